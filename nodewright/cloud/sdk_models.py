"""Makes the Azure SDK models' first-use setup safe across threads.

Owns ``guard_model_setup``. azure-mgmt-compute (34 and later) and azure-mgmt-network generate
their models on azure-core's newer model base: the first object built of each model class walks
the class's hierarchy (``vars()`` of every class in its MRO) and writes a field table onto the
class. Two threads doing this at once for related classes can change a dictionary while the other
iterates it (``RuntimeError: dictionary changed size during iteration``); the SDK's lenient
field deserializer catches the error and hands back the raw JSON ``dict`` instead of the model.
Seen here as ``AttributeError: 'dict' object has no attribute 'id'`` reading a scale set's image
while other workers read NICs; reported upstream as azure-sdk-for-python #47426 (fixed in the
generator by microsoft/typespec #11236, not yet in the packages we install).

The guard wraps the model base's ``__new__`` once per process: a class whose table is built goes
straight through (one set lookup, as before); a class's first construction takes one process-wide
lock, so no two setups overlap. Packages without that model base (older azure-mgmt-* on msrest
models) are left alone. Side effect: patches the SDK's model base classes in place.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["MODEL_BASE_MODULES", "guard_model_setup", "guarded_model_bases"]

MODEL_BASE_MODULES = (
    "azure.mgmt.compute._utils.model_base",
    "azure.mgmt.network._utils.model_base",
    "azure.mgmt.msi._utils.model_base",
)
"""Where the generated packages keep their model base (a private module: absent ones are skipped)."""

_GUARD_MARK = "_nodewright_setup_guarded"
_setup_lock = threading.RLock()
_install_lock = threading.Lock()


def _model_bases() -> Iterator[type]:
    for name in MODEL_BASE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        base = getattr(module, "Model", None)
        if isinstance(base, type) and isinstance(getattr(base, "_calculated", None), set):
            yield base


def _guarded_new(original: Any, calculated: set[str]) -> Any:
    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        if f"{cls.__module__}.{cls.__qualname__}" in calculated:  # set up: as the SDK would
            return original(cls, *args, **kwargs)
        with _setup_lock:  # first object of this class: one setup at a time
            return original(cls, *args, **kwargs)

    return staticmethod(new)


def guard_model_setup() -> tuple[type, ...]:
    """Guard every installed model base (idempotent); returns the bases guarded."""
    with _install_lock:
        for base in _model_bases():
            if not base.__dict__.get(_GUARD_MARK, False):
                original = base.__dict__["__new__"]
                function = original.__func__ if isinstance(original, staticmethod) else original
                type.__setattr__(base, "__new__", _guarded_new(function, base.__dict__["_calculated"]))
                type.__setattr__(base, _GUARD_MARK, True)
        return guarded_model_bases()


def guarded_model_bases() -> tuple[type, ...]:
    """The installed model bases that carry the guard."""
    return tuple(base for base in _model_bases() if base.__dict__.get(_GUARD_MARK, False))
