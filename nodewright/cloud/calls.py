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
from nodewright.cloud.throttle import (
    DEFAULT_PACING_MAX_WAIT_SECONDS,
    CallObserver,
    NullObserver,
    TokenBucket,
    held_error,
)

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
        mutation_bucket: TokenBucket | None = None,
    ) -> None:
        self.observer: CallObserver = observer or NullObserver()
        self.backoff = backoff
        self.budget = budget
        self.max_wait_seconds = max_wait_seconds
        self.mutation_bucket = mutation_bucket

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
    def reserved_write(self, request: str) -> Iterator[float]:
        """Take the ARM budget and the mutation token of a write ``request``
        (``throttle.operation_name``'s form) that this thread sends inside the block, before the
        reads it rests on. Yields 0.0 when taken (the write passes without taking them again,
        and a ``prepaid_write`` inside takes nothing more), else the seconds until they could be
        (nothing taken: the caller comes back then). What no write spent is given back."""
        method = request.split(" ", 1)[0]
        budget, bucket = self.budget, self.mutation_bucket
        wait = budget.prepay(method, request, self.max_wait_seconds) if budget is not None else 0.0
        if wait <= 0 and bucket is not None:
            wait = bucket.prepay(self.max_wait_seconds)
            if wait > 0 and budget is not None:
                budget.release_prepaid(method, request)
        try:
            yield wait
        finally:
            if wait <= 0 and budget is not None:
                budget.release_prepaid(method, request)
            if wait <= 0 and bucket is not None:
                bucket.release_prepaid()

    @contextmanager
    def prepaid_write(self, call: str, request: str, target: object) -> Iterator[None]:
        """Around a read-modify-write whose write is the SDK call ``call`` sending ``request``:
        ``reserved_write``, and when it cannot take the write's share now, ``call`` fails here as
        the write itself would have (a quiet ``ThrottledError`` of a request not sent, counted and
        noted on the target's write backoff), before any read."""
        with self.reserved_write(request) as wait:
            if wait > 0:
                error = held_error(f"{request} by the budget", wait, code="ClientPacing")
                self(call, partial(_raise, error), target, write=True)
            yield

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
