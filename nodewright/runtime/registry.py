"""The reconciler registry: how a reconciler named in config is found and set up.

Owns ``ReconcilerRegistry``. A reconciler is anything exposing ``setup(manager, options)``,
which wires its controller with ``manager.controller(name)...complete(...)``. A name from the
config's ``reconcilers`` section is resolved, in order, from: the ``module`` the config names
(a dotted path, or ``module:attribute``); the factories registered explicitly in code (the
composition root in ``nodewright.controllers`` registers ours); and the ``nodewright.reconcilers``
entry-point group of installed packages. Adding a reconciler is writing one module and naming it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodewright.runtime.manager import Manager

__all__ = ["ENTRY_POINT_GROUP", "ReconcilerRegistry", "RegistryError", "Setup"]

ENTRY_POINT_GROUP = "nodewright.reconcilers"

Setup = Callable[["Manager", Mapping[str, Any]], None]
"""``setup(manager, options)``: wires one reconciler into the manager (side effects only)."""


class RegistryError(LookupError):
    """A reconciler could not be found or does not expose ``setup``."""


def _setup_of(target: Any, where: str) -> Setup:
    """A module (or object) with a ``setup`` attribute, or a setup callable itself."""
    setup = getattr(target, "setup", None)
    if callable(setup):
        return setup  # type: ignore[no-any-return]
    if callable(target) and not isinstance(target, type):
        return target  # type: ignore[no-any-return]
    raise RegistryError(f"{where} has no setup(manager, options) function")


def load_setup(path: str) -> Setup:
    """Import ``package.module`` (its ``setup``) or ``package.module:attribute``."""
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise RegistryError(f"cannot import reconciler module {module_name!r}: {error}") from None
    if not attribute:
        return _setup_of(module, f"module {module_name!r}")
    target = getattr(module, attribute, None)
    if target is None:
        raise RegistryError(f"module {module_name!r} has no attribute {attribute!r}")
    return _setup_of(target, path)


class ReconcilerRegistry:
    """Names to setup functions, filled in code and completed by config and entry points."""

    def __init__(self) -> None:
        self._setups: dict[str, Setup] = {}

    def register(self, name: str, setup: Setup | Any) -> None:
        """Register a setup function, or a module/object exposing ``setup``, under ``name``."""
        self._setups[name] = _setup_of(setup, f"reconciler {name!r}")

    def names(self) -> list[str]:
        return sorted(self._setups)

    def resolve(self, name: str, module: str = "") -> Setup:
        """The setup of reconciler ``name``: config module, then registry, then entry points."""
        if module:
            return load_setup(module)
        if name in self._setups:
            return self._setups[name]
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
            return _setup_of(entry_point.load(), f"entry point {name!r}")
        raise RegistryError(
            f"reconciler {name!r} is not registered, names no module and has no "
            f"{ENTRY_POINT_GROUP!r} entry point"
        )
