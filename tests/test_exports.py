"""Each package's public surface is explicit: ``__all__`` names exist, and nothing public is
exported by accident (a name imported into a package but missing from ``__all__``)."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = [
    "nodewright",
    "nodewright.runtime",
    "nodewright.runtime.observe",
    "nodewright.runtime.kube",
    "nodewright.runtime.informers",
    "nodewright.runtime.control",
    "nodewright.runtime.process",
    "nodewright.api",
    "nodewright.cloud",
    "nodewright.cloud.emulator",
    "nodewright.ipam",
    "nodewright.controllers",
    "nodewright.devenv",
]


@pytest.mark.parametrize("package_name", PACKAGES)
def test_all_matches_the_public_names(package_name: str) -> None:
    """``__all__`` lists exactly the package's public, non-module attributes."""
    package = importlib.import_module(package_name)
    exported = set(package.__all__)
    missing = sorted(name for name in exported if not hasattr(package, name))
    assert not missing, f"{package_name}.__all__ names what does not exist: {missing}"
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and (not isinstance(value, types.ModuleType) or name in exported)  # a module exported on purpose
        and name != "annotations"
    }
    dunder_exports = {name for name in exported if name.startswith("__")}
    assert public == exported - dunder_exports, (
        f"{package_name}: public but not in __all__: {sorted(public - exported)}; "
        f"in __all__ but private: {sorted(exported - public - dunder_exports)}"
    )
