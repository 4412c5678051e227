"""Per-target exponential backoff for failed ARM calls: what stops a failure storm.

A cloud call that fails with a retryable ARM error (5xx, a failed long-running operation, a 409
conflict, a transport failure) starts a backoff for its target (an ARM resource ID) and access
(read or write): 5 s, doubling per further failure, at most a minute
(so that a target is tried again within a minute of a fault clearing). Until it ends, calls for
that target and access fail at once with ``BackingOffError`` (no HTTP request) naming the
remaining seconds and the last error code; the work queue requeues the reconcile for then. A
success ends the backoff.

Errors the caller handles itself (not found, a stale etag, a rejected identity, a full subnet)
start nothing. A throttled read starts nothing either (the shared request budget holds its class
and later reads wait there); a throttled write backs its target off for at least the hold, so a
read-modify-write of that target is refused before its read.
Which layer retries what (documented in ``docs/cloud-retries.md``): azure-core retries only
transport failures (connection and read errors); 429, 5xx and failed operations go back to the
work queue, which meets this backoff. Thread-safe; no I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from azure.core.exceptions import AzureError

from nodewright.cloud.errors import (
    CloudError,
    IdentityRejectedError,
    LimitExceededError,
    NotFoundError,
    PreconditionFailedError,
    SubnetFullError,
    ThrottledError,
    translate_error,
)
from nodewright.cloud.throttle import CallObserver, observe_call

__all__ = ["BackingOffError", "TargetBackoff", "guarded_call", "starts_backoff"]

Clock = Callable[[], float]
T = TypeVar("T")


class BackingOffError(CloudError):
    """A call was not sent: its target is backing off after a failure. Expected and quiet."""

    quiet = True

    def __init__(self, target: str, seconds: float, last_code: str | None) -> None:
        super().__init__(
            f"Backing off calls to {target} for {seconds:.0f} s after {last_code or 'an error'}",
            code=last_code,
        )
        self.target = target
        self.retry_after: float | None = seconds


def starts_backoff(error: CloudError) -> bool:
    """Whether a failure should hold its target back (pure)."""
    handled_by_caller = (
        NotFoundError,
        PreconditionFailedError,
        IdentityRejectedError,
        SubnetFullError,
        LimitExceededError,
        BackingOffError,
    )
    return not isinstance(error, handled_by_caller)


@dataclass
class _Entry:
    failures: int
    until: float
    last_code: str | None


class TargetBackoff:
    """Backoff deadlines by (target, access); see the module docstring."""

    def __init__(
        self,
        *,
        initial_seconds: float = 5.0,
        max_seconds: float = 60.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.initial_seconds = initial_seconds
        self.max_seconds = max_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}

    def check(self, target: str, access: str) -> None:
        """Raise ``BackingOffError`` if ``target`` is backing off for ``access``."""
        key = (target.lower(), access)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            remaining = entry.until - self._clock()
            if remaining > 0:
                raise BackingOffError(target, remaining, entry.last_code)

    def failed(self, target: str, access: str, error: CloudError) -> float:
        """Record a failure; the new backoff in seconds (0 when the error starts none)."""
        if not starts_backoff(error):
            return 0.0
        if isinstance(error, ThrottledError) and access != "write":
            return 0.0  # a throttled read waits in the shared budget's hold instead
        key = (target.lower(), access)
        with self._lock:
            entry = self._entries.get(key) or _Entry(0, 0.0, None)
            delay = min(self.max_seconds, self.initial_seconds * 2.0**entry.failures)
            retry_after = getattr(error, "retry_after", None)
            if isinstance(retry_after, (int, float)) and retry_after > delay:
                delay = float(retry_after)
            entry.failures += 1
            entry.until = self._clock() + delay
            entry.last_code = error.code or (str(error.status_code) if error.status_code else None)
            self._entries[key] = entry
            return delay

    def succeeded(self, target: str, access: str) -> None:
        """End any backoff of ``target`` for ``access``."""
        with self._lock:
            self._entries.pop((target.lower(), access), None)


def guarded_call(
    observer: CallObserver,
    backoff: TargetBackoff | None,
    operation: str,
    function: Callable[[], T],
    target: object | None = None,
    *,
    write: bool = False,
) -> T:
    """Run one SDK call: refused while ``target`` backs off, counted, azure-core errors
    translated to ``CloudError`` (naming ``target``), the backoff updated from the outcome."""
    access = "write" if write else "read"
    key = str(target) if target is not None else None
    if backoff is not None and key is not None:
        backoff.check(key, access)
    with observe_call(observer, operation):
        try:
            result = function()
        except AzureError as error:
            translated = translate_error(error)
            translated.target = translated.target or key
            if backoff is not None and key is not None:
                backoff.failed(key, access, translated)
            raise translated from error
        except CloudError as error:  # raised inside the pipeline, e.g. a call held after a 429
            error.target = error.target or key
            if backoff is not None and key is not None:
                backoff.failed(key, access, error)
            raise
    if backoff is not None and key is not None:
        backoff.succeeded(key, access)
    return result
