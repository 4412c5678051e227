"""Per-target exponential backoff for failed ARM calls: what stops a failure storm.

Keyed by target (an ARM resource ID) and access (read or write). Until a backoff ends, calls for
that target and access fail at once with ``BackingOffError`` (no HTTP request) naming the
remaining seconds and the last error code; the work queue requeues the reconcile for then. Three
causes, three rules (documented in ``docs/cloud-retries.md``):

- **A failure of the target** (5xx, a failed long-running operation, a 409 conflict, a transport
  failure) is a fact about that target: 5 s, doubling per further failure of the target, at most
  ``max_seconds`` (a minute by default). Only a success of that target ends it.
- **A terminal answer** (``errors.is_terminal``: a full subnet, a limit or quota, an invalid
  request; all 400-class) says the same request cannot succeed as it is:
  ``terminal_initial_seconds`` (2 s), doubling per further failure of the target, at most
  ``terminal_max_seconds`` (2 minutes): seconds to minutes, so a target gets at most 5 writes in
  its first minute and one per 2 minutes later. The cap is no longer so that a target is tried
  again within 2 minutes of the cause going (room in the subnet, a raised quota, a fixed
  parameter); the first step is short because the caller usually sends a smaller request next
  (the IPAM reconciler halves its batch). Only a success of that target ends it.
- **Throttling** (a 429, or a call the shared budget refused unsent during its class hold) is a
  fact about the whole class, not the target: the budget's class hold already grows with each
  429 in a row. So a throttled write backs its target off for the class hold only (the error's
  ``Retry-After``, else what ``class_hold`` reports, else ``initial_seconds``), never growing per
  target, and a success of any call of the same access ends every throttle-caused backoff of that
  access at once (cut short: the class is no longer throttled). Throttling does not count as a
  failure of the target, so a target that also failed keeps its failure count. Cutting a
  backoff short never sends a call the budget would still hold: the budget holds it.

A throttled write backs its target off so that a read-modify-write of that target is refused
before its read; a throttled read starts nothing (the budget holds its class and later reads wait
there). Errors the caller handles itself (not found, a stale etag, a rejected identity) start
nothing. A failure that starts a backoff carries it as ``retry_after``/``retry_at`` (unless it
named its own), so the controller requeues for when the target may be tried again. Which layer
retries what: azure-core retries only transport failures of reads (connection and read errors);
429, 5xx, terminal answers and failed operations go back to the work queue, which meets this
backoff. Thread-safe; no I/O.
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
    NotFoundError,
    PreconditionFailedError,
    ThrottledError,
    is_terminal,
    translate_error,
)
from nodewright.cloud.throttle import CallObserver, observe_call

__all__ = ["BackingOffError", "TargetBackoff", "guarded_call", "starts_backoff"]

Clock = Callable[[], float]
T = TypeVar("T")


class BackingOffError(CloudError):
    """A call was not sent: its target is backing off after a failure. Expected and quiet."""

    quiet = True

    def __init__(
        self,
        target: str,
        seconds: float,
        last_code: str | None,
        last_message: str = "",
        *,
        terminal: bool = False,
    ) -> None:
        super().__init__(
            f"Backing off calls to {target} for {seconds:.0f} s after {last_code or 'an error'}",
            code=last_code,
        )
        self.target = target
        self.retry_after = seconds
        self.retry_at = time.monotonic() + seconds
        self.last_message = last_message
        """ARM's message of the failure that started the backoff."""
        self.terminal = terminal
        """Whether that failure was a terminal answer (``errors.is_terminal``)."""


def starts_backoff(error: CloudError) -> bool:
    """Whether a failure should hold its target back (pure)."""
    handled_by_caller = (NotFoundError, PreconditionFailedError, IdentityRejectedError, BackingOffError)
    return not isinstance(error, handled_by_caller)


@dataclass
class _Entry:
    failures: int
    until: float
    last_code: str | None
    throttled: bool = False  # the running backoff was caused by throttling (class-wide)
    terminal: bool = False  # the last failure was a terminal answer
    last_message: str = ""


def _code_of(error: CloudError) -> str | None:
    return error.code or (str(error.status_code) if error.status_code else None)


class TargetBackoff:
    """Backoff deadlines by (target, access); see the module docstring. ``class_hold(access)``
    reports the seconds left on the shared budget's hold of that access's class (0 when none)."""

    def __init__(
        self,
        *,
        initial_seconds: float = 5.0,
        max_seconds: float = 60.0,
        terminal_initial_seconds: float = 2.0,
        terminal_max_seconds: float = 120.0,
        clock: Clock = time.monotonic,
        class_hold: Callable[[str], float] | None = None,
    ) -> None:
        self.initial_seconds = initial_seconds
        self.max_seconds = max_seconds
        self.terminal_initial_seconds = terminal_initial_seconds
        self.terminal_max_seconds = terminal_max_seconds
        self._clock = clock
        self._class_hold = class_hold
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
                raise BackingOffError(
                    target, remaining, entry.last_code, entry.last_message, terminal=entry.terminal
                )

    def failed(self, target: str, access: str, error: CloudError) -> float:
        """Record a failure; the new backoff in seconds (0 when the error starts none)."""
        if not starts_backoff(error):
            return 0.0
        throttled = isinstance(error, ThrottledError)
        if throttled and access != "write":
            return 0.0  # a throttled read waits in the shared budget's hold instead
        delay = self._throttle_delay(access, error) if throttled else 0.0
        key = (target.lower(), access)
        with self._lock:
            entry = self._entries.get(key) or _Entry(0, 0.0, None)
            if not throttled:
                delay = self._failure_delay(entry.failures, error)
                entry.failures += 1
            entry.throttled = throttled
            entry.terminal = is_terminal(error)
            entry.until = self._clock() + delay
            entry.last_code = _code_of(error)
            entry.last_message = error.message
            self._entries[key] = entry
            return delay

    def _failure_delay(self, failures: int, error: CloudError) -> float:
        """The backoff after one more failure of a target: the terminal or the failure rule, at
        least the error's own Retry-After."""
        if is_terminal(error):
            delay = min(self.terminal_max_seconds, self.terminal_initial_seconds * 2.0 ** min(failures, 32))
        else:
            delay = min(self.max_seconds, self.initial_seconds * 2.0 ** min(failures, 32))
        retry_after = error.retry_after
        if isinstance(retry_after, (int, float)) and retry_after > delay:
            delay = float(retry_after)
        return delay

    def _throttle_delay(self, access: str, error: CloudError) -> float:
        """The class hold a throttled call waits for: its Retry-After, else the budget's hold."""
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, (int, float)) and retry_after > 0:
            return float(retry_after)
        held = self._class_hold(access) if self._class_hold is not None else 0.0
        return held if held > 0 else self.initial_seconds

    def succeeded(self, target: str, access: str) -> None:
        """End any backoff of ``target`` for ``access``, and cut short every throttle-caused
        backoff of ``access`` (a call of the class went through: it is no longer throttled)."""
        with self._lock:
            self._entries.pop((target.lower(), access), None)
            for key, entry in list(self._entries.items()):
                if key[1] == access and entry.throttled:
                    entry.throttled = False
                    entry.until = 0.0
                    if entry.failures == 0:
                        del self._entries[key]


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
            _note_failure(backoff, key, access, translated)
            raise translated from error
        except CloudError as error:  # raised inside the pipeline, e.g. a call held after a 429
            _note_failure(backoff, key, access, error)
            raise
    if backoff is not None and key is not None:
        backoff.succeeded(key, access)
    return result


def _note_failure(backoff: TargetBackoff | None, key: str | None, access: str, error: CloudError) -> None:
    """Name the target on ``error``, start its backoff, and let the error carry the backoff as
    its retry time when it names none of its own (side effect: changes ``error``)."""
    error.target = error.target or key
    if backoff is None or key is None:
        return
    delay = backoff.failed(key, access, error)
    if delay > 0 and error.retry_after is None:
        error.retry_after = delay
        error.retry_at = time.monotonic() + delay
