"""The reconcile contract: what a reconciler receives and what it may answer.

Owns ``Request`` (namespace and name, nothing about what happened), ``Result`` and
``TerminalError``, and the one-method ``Reconciler`` protocol. The controller in
``controller.py`` drives reconcilers through this contract; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Reconciler", "ReconcilerFunc", "Request", "Result", "TerminalError"]


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
class Reconciler(Protocol):
    def reconcile(self, request: Request) -> Result: ...


ReconcilerFunc = Callable[[Request], Result]
