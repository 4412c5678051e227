"""The reconciler registry: how a reconciler named in config is found and set up.

Owns ``ReconcilerPlugin``, the declared plug-in contract, and ``ReconcilerRegistry``. A
reconciler module exports one frozen ``PLUGIN = ReconcilerPlugin(name, setup, validate_options,
rbac_rules)``: ``setup(manager, options)`` wires its controller with
``manager.controller(name)...complete(...)``; ``validate_options(options)`` (optional) raises
``ConfigError`` for bad options before any cluster is touched; ``rbac_rules`` are the permissions
it uses, from which config/rbac is generated. A name from the config's ``reconcilers`` section is
resolved, in order, from: the ``module`` the config names (a dotted path whose ``PLUGIN`` is
used, or ``module:attribute`` naming a plugin); the plug-ins registered explicitly in code (the
composition root in ``nodewright.controllers`` registers ours); and the ``nodewright.reconcilers``
entry-point group of installed packages. A module that exports only ``setup`` still works: it is
a plug-in with no option check and no declared rules.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodewright.runtime.process.rbac import PolicyRule

if TYPE_CHECKING:
    from nodewright.runtime.process.manager import Manager

__all__ = [
    "ENTRY_POINT_GROUP",
    "OptionsValidator",
    "ReconcilerPlugin",
    "ReconcilerRegistry",
    "RegistryError",
    "Setup",
]

ENTRY_POINT_GROUP = "nodewright.reconcilers"

Setup = Callable[["Manager", Mapping[str, Any]], None]
"""``setup(manager, options)``: wires one reconciler into the manager (side effects only)."""

OptionsValidator = Callable[[Mapping[str, Any]], object]
"""``validate_options(options)``: raises ``ConfigError`` naming the bad key; no I/O."""


@dataclass(frozen=True, slots=True)
class ReconcilerPlugin:
    """What a reconciler module declares about itself (its ``PLUGIN``)."""

    name: str
    setup: Setup
    validate_options: OptionsValidator | None = None
    rbac_rules: tuple[PolicyRule, ...] = ()


class RegistryError(LookupError):
    """A reconciler could not be found or declares neither ``PLUGIN`` nor ``setup``."""


def _plugin_of(target: Any, name: str, where: str) -> ReconcilerPlugin:
    """A plug-in, a module exporting ``PLUGIN`` (or only ``setup``), or a setup callable."""
    if isinstance(target, ReconcilerPlugin):
        return target
    plugin = getattr(target, "PLUGIN", None)
    if isinstance(plugin, ReconcilerPlugin):
        return plugin
    setup = getattr(target, "setup", None)
    if callable(setup):
        return ReconcilerPlugin(name, setup)
    if callable(target) and not isinstance(target, type):
        return ReconcilerPlugin(name, target)
    raise RegistryError(f"{where} exports no PLUGIN and no setup(manager, options) function")


def load_plugin(name: str, path: str) -> ReconcilerPlugin:
    """Import ``package.module`` (its ``PLUGIN``) or ``package.module:attribute``."""
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise RegistryError(f"cannot import reconciler module {module_name!r}: {error}") from None
    if not attribute:
        return _plugin_of(module, name, f"module {module_name!r}")
    target = getattr(module, attribute, None)
    if target is None:
        raise RegistryError(f"module {module_name!r} has no attribute {attribute!r}")
    return _plugin_of(target, name, path)


class ReconcilerRegistry:
    """Names to plug-ins, filled in code and completed by config and entry points."""

    def __init__(self) -> None:
        self._plugins: dict[str, ReconcilerPlugin] = {}

    def register(self, plugin: ReconcilerPlugin) -> None:
        """Register ``plugin`` under its name (a later registration of the name replaces it)."""
        self._plugins[plugin.name] = plugin

    def names(self) -> list[str]:
        return sorted(self._plugins)

    def plugins(self) -> list[ReconcilerPlugin]:
        return [self._plugins[name] for name in self.names()]

    def resolve(self, name: str, module: str = "") -> ReconcilerPlugin:
        """The plug-in of reconciler ``name``: config module, then registry, then entry points."""
        if module:
            return load_plugin(name, module)
        if name in self._plugins:
            return self._plugins[name]
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
            return _plugin_of(entry_point.load(), name, f"entry point {name!r}")
        raise RegistryError(
            f"reconciler {name!r} is not registered, names no module and has no "
            f"{ENTRY_POINT_GROUP!r} entry point"
        )
