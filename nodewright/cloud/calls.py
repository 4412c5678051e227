"""The one wrapper every SDK call of ``ComputeService``, ``NetworkService`` and
``StandaloneMachineService`` goes through: ``GuardedCalls``.

A call is refused while its target backs off, counted on the ``CallObserver``, its azure-core
error translated to a ``CloudError`` naming the target, and the target's backoff updated from
the outcome (``backoff.guarded_call``). A write whose long-running operation is left to the
``operations.OperationTracker`` (``track``) updates the backoff when the operation ends, as a
write waited for does. No I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TypeVar

from nodewright.cloud.backoff import TargetBackoff, guarded_call
from nodewright.cloud.budget import ArmBudget
from nodewright.cloud.operations import OperationOutcome, OperationTracker, TrackedPolling
from nodewright.cloud.throttle import DEFAULT_PACING_MAX_WAIT_SECONDS, CallObserver, NullObserver, held_error

__all__ = ["GuardedCalls"]

T = TypeVar("T")


class GuardedCalls:
    """The SDK call wrapper that ``ComputeService`` and ``NetworkService`` share: every call goes
    through ``backoff.guarded_call`` (refused while its target backs off, counted on the
    observer, azure-core errors translated to ``CloudError`` naming the target, the backoff
    updated from the outcome)."""

    def __init__(
        self,
        observer: CallObserver | None,
        backoff: TargetBackoff | None,
        budget: ArmBudget | None = None,
        max_wait_seconds: float = DEFAULT_PACING_MAX_WAIT_SECONDS,
    ) -> None:
        self.observer: CallObserver = observer or NullObserver()
        self.backoff = backoff
        self.budget = budget
        self.max_wait_seconds = max_wait_seconds

    def __call__(
        self, operation: str, function: Callable[[], T], target: object | None = None, *, write: bool = False
    ) -> T:
        """Run one SDK call (see the class docstring); ``write`` selects the write backoff."""
        return guarded_call(self.observer, self.backoff, operation, function, target, write=write)

    def check_write(self, target: object) -> None:
        """Refuse a read-modify-write at once while its write backs off (no read is wasted)."""
        if self.backoff is not None:
            self.backoff.check(str(target), "write")

    @contextmanager
    def prepaid_write(self, call: str, request: str, target: object) -> Iterator[None]:
        """Around a read-modify-write whose write is the SDK call ``call`` sending ``request``
        (``throttle.operation_name``'s form): the write's budget is taken before the read, so a
        write the budget would keep back costs no read. When it cannot be taken now, ``call``
        fails here as the write itself would have: a quiet ``ThrottledError`` of a request not
        sent, counted and noted on the target's write backoff. What no write spent is given back."""
        budget = self.budget
        if budget is None:
            yield
            return
        method = request.split(" ", 1)[0]
        wait = budget.prepay(method, request, self.max_wait_seconds)
        if wait > 0:
            error = held_error(f"{request} by the budget", wait, code="ClientPacing")
            self(call, partial(_raise, error), target, write=True)
        try:
            yield
        finally:
            budget.release_prepaid(method, request)

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


def _raise(error: Exception) -> None:
    raise error
