"""The one wrapper every SDK call of ``ComputeService``, ``NetworkService`` and
``StandaloneMachineService`` goes through: ``GuardedCalls``.

A call is refused while its target backs off, counted on the ``CallObserver``, its azure-core
error translated to a ``CloudError`` naming the target, and the target's backoff updated from
the outcome (``backoff.guarded_call``). A write whose long-running operation is left to the
``operations.OperationTracker`` (``track``) updates the backoff when the operation ends, as a
write waited for does. No I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from nodewright.cloud.backoff import TargetBackoff, guarded_call
from nodewright.cloud.operations import OperationOutcome, OperationTracker, TrackedPolling
from nodewright.cloud.throttle import CallObserver, NullObserver

__all__ = ["GuardedCalls"]

T = TypeVar("T")


class GuardedCalls:
    """The SDK call wrapper that ``ComputeService`` and ``NetworkService`` share: every call goes
    through ``backoff.guarded_call`` (refused while its target backs off, counted on the
    observer, azure-core errors translated to ``CloudError`` naming the target, the backoff
    updated from the outcome)."""

    def __init__(self, observer: CallObserver | None, backoff: TargetBackoff | None) -> None:
        self.observer: CallObserver = observer or NullObserver()
        self.backoff = backoff

    def __call__(
        self, operation: str, function: Callable[[], T], target: object | None = None, *, write: bool = False
    ) -> T:
        """Run one SDK call (see the class docstring); ``write`` selects the write backoff."""
        return guarded_call(self.observer, self.backoff, operation, function, target, write=write)

    def check_write(self, target: object) -> None:
        """Refuse a read-modify-write at once while its write backs off (no read is wasted)."""
        if self.backoff is not None:
            self.backoff.check(str(target), "write")

    def track(
        self,
        tracker: OperationTracker,
        operation: str,
        target: object,
        polling: TrackedPolling,
        on_done: Callable[[OperationOutcome], None],
    ) -> None:
        """Hand a started write's operation to ``tracker``; its end updates the target's write
        backoff as a waited-for operation's would, then reaches ``on_done``."""
        backoff, key = self.backoff, str(target)

        def done(outcome: OperationOutcome) -> None:
            if backoff is not None:
                if outcome.error is None:
                    backoff.succeeded(key, "write")
                else:
                    backoff.failed(key, "write", outcome.error)
            on_done(outcome)

        tracker.track(operation, target, polling, done)
