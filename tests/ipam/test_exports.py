"""The ipam package's public surface: everything in ``__all__`` exists, and every public class or
function of its modules is exported (nothing useful hides in a submodule)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from nodewright import ipam


def test_all_names_exist() -> None:
    """Each name in ``nodewright.ipam.__all__`` is importable from the package."""
    for exported in ipam.__all__:
        assert hasattr(ipam, exported), exported


def test_every_public_definition_is_exported() -> None:
    """Each public class or function defined in an ipam module appears in ``__all__``."""
    missing = []
    for module_info in pkgutil.iter_modules(ipam.__path__):
        module = importlib.import_module(f"nodewright.ipam.{module_info.name}")
        for attribute, value in vars(module).items():
            if attribute.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
                continue
            if value.__module__ == module.__name__ and attribute not in ipam.__all__:
                missing.append(f"{module.__name__}.{attribute}")
    assert missing == []
