"""The reconcile contract: what a reconciler receives and what it may answer.

Owns ``Request`` (namespace and name, nothing about what happened), ``Result`` and
``TerminalError``, and the one-method ``Reconciler`` protocol. A controller whose unit of work is
not one object declares its own key type instead of ``Request`` (any hashable value, such as a
frozen dataclass naming an ARM resource; ``manager.controller(name, key_type)``); ``key_fields``
is how a key appears in logs and traces (its ``log_fields()`` if it has one). The controller in
``controller.py`` drives reconcilers through this contract; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

__all__ = ["K", "Reconciler", "ReconcilerFunc", "Request", "Result", "TerminalError", "key_fields"]

K = TypeVar("K", bound=Hashable)
"""A controller's request key type (``Request`` unless the controller declares another)."""
_K_contra = TypeVar("_K_contra", bound=Hashable, contravariant=True)


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """Which object to reconcile. Level-based: it never says whether it was created or changed."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return self.key

    def log_fields(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name}


def key_fields(key: Hashable) -> dict[str, str]:
    """How a request key appears in log lines and span attributes."""
    fields = getattr(key, "log_fields", None)
    return dict(fields()) if callable(fields) else {"key": str(key)}


@dataclass(frozen=True, slots=True)
class Result:
    """What to do after a successful reconcile.

    ``requeue_after`` (seconds) forgets the item's backoff and comes back after the delay;
    ``requeue`` alone re-adds it through the rate limiter. The default means "done".
    """

    requeue: bool = False
    requeue_after: float | None = None


class TerminalError(Exception):
    """A failure that retrying cannot fix: logged and counted, never requeued."""


@runtime_checkable
class Reconciler(Protocol[_K_contra]):
    def reconcile(self, request: _K_contra) -> Result: ...


ReconcilerFunc = Callable[[K], Result]
