"""The public surface of nodewright.cloud: every name in __all__ exists, and nothing of the
SDKs leaks into it."""

from __future__ import annotations

import nodewright.cloud


def test_all_names_exist_and_are_sorted() -> None:
    """__all__ lists real attributes, each once, sorted."""
    names = nodewright.cloud.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(nodewright.cloud, name), name


def test_no_sdk_types_are_exported() -> None:
    """Callers get our own types only: nothing exported comes from an azure package."""
    for name in nodewright.cloud.__all__:
        module = getattr(getattr(nodewright.cloud, name), "__module__", "") or ""
        assert not module.startswith("azure"), name
