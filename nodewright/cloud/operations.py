"""Long-running operations followed apart from the caller: ``OperationTracker``.

ARM answers a write at once and finishes it later; azure-core's pollers then sleep in the
caller's thread until the operation ends (30 s between polls unless ARM sends ``Retry-After``).
A reconcile worker must not spend its slot that way, so a write started through the tracker
returns with ARM's first answer, and the tracker follows the operation:

- ``polling()`` is the azure-core polling method to hand the SDK's ``begin_*`` call: it reads the
  first answer (status URL, first status, ``Retry-After``) and stops, so the SDK's poller starts
  no thread and its ``result()`` is the first answer's resource (``lro.AnswerKeepingPolling``).
- ``track(...)`` takes that polling method over. A few tracker threads poll every operation
  in flight, each when it is due: ``Retry-After`` of its last answer when ARM sent one, never
  sooner, else ``interval``; all polls together within ``polls_per_second`` (they are reads, and
  the reads budget is shared with everything else), on top of the shared ARM budget the
  clients' pipeline applies to each request. A poll that fails (429, 5xx, transport) is tried
  again later, doubling from ``interval`` up to ``POLL_FAILURE_CAP_SECONDS`` or as long as its
  ``Retry-After`` asks; after ``max_poll_failures`` in a row, or ``deadline_seconds`` after the
  start, the operation ends as failed with a ``CloudError`` (its true outcome unknown: the
  caller reads the resource again, level-based).
- When the operation succeeds, fails or is cancelled, ``on_done`` gets an ``OperationOutcome``
  (``error`` is the ``CloudError`` of a failed one, classified by its ARM code, so a
  ``SubnetIsFull`` failure is a ``SubnetFullError``); it runs on a tracker thread and must be
  quick (record the outcome, enqueue a request). No final GET is sent: the caller reads what it
  needs.

The tracker holds no Kubernetes knowledge and no state across restarts: a process that stops
with operations in flight forgets them, and its successor reads the resources afresh. Thread-safe;
its threads are daemons, started on the first ``track`` and stopped by ``close``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from azure.core.exceptions import AzureError

from nodewright.cloud.errors import CloudError, ErrorFacts, classify_error, parse_retry_after, translate_error
from nodewright.cloud.lro import AnswerKeepingPolling
from nodewright.cloud.throttle import CallObserver, NullObserver, TokenBucket, observe_call

__all__ = [
    "MINIMUM_POLL_SECONDS",
    "OperationOutcome",
    "OperationTracker",
    "TrackedPolling",
]

log = logging.getLogger(__name__)

MINIMUM_POLL_SECONDS = 0.05
"""The shortest delay between two polls of one operation (an ``interval`` of 0 means this)."""
POLL_FAILURE_CAP_SECONDS = 60.0
SUCCEEDED = "succeeded"
TERMINAL_FAILURES = frozenset({"failed", "canceled", "cancelled"})


class TrackedPolling(AnswerKeepingPolling):
    """The polling method a tracked ``begin_*`` call gets: it reads the first answer and reports
    the operation finished to the SDK's poller (which so starts no thread); the tracker then
    polls it step by step (``poll_once``)."""

    def __init__(self, interval: float) -> None:
        super().__init__(interval)
        self._handed_over = False

    def finished(self) -> bool:
        if not self._handed_over:
            return True  # the SDK's poller returns at once; the tracker follows the operation
        return self.operation_status() in TERMINAL_FAILURES or self.operation_status() == SUCCEEDED

    def run(self) -> None:
        return None  # the SDK's poller never polls: the tracker does

    def hand_over(self) -> None:
        self._handed_over = True

    def operation_status(self) -> str:
        """The operation's status as last answered, lowercased (``inprogress``, ``succeeded``...)."""
        return str(self._status).lower()

    def poll_once(self) -> None:
        """One GET of the status URL (raises azure-core errors on a bad answer)."""
        self.update_status()

    def retry_after(self) -> float | None:
        """``Retry-After`` of the last answer (seconds), when ARM sent one."""
        headers = self._pipeline_response.http_response.headers
        return parse_retry_after(dict(headers.items()))

    def failure(self) -> CloudError:
        """The ``CloudError`` a failed or cancelled operation's status answer describes."""
        body: Any = None
        try:
            body = self._pipeline_response.http_response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        code = str(error.get("code") or "OperationFailed")
        message = str(error.get("message") or f"The long-running operation ended {self.operation_status()}")
        return classify_error(ErrorFacts(status_code=None, code=code, message=message))


@dataclass(frozen=True)
class OperationOutcome:
    """How a tracked operation ended: ``error`` is None when it succeeded."""

    name: str
    target: str
    error: CloudError | None
    started: float
    finished: float
    polls: int

    @property
    def succeeded(self) -> bool:
        return self.error is None


OnDone = Callable[[OperationOutcome], None]


@dataclass
class _Tracked:
    name: str
    target: str
    polling: TrackedPolling
    on_done: OnDone
    started: float
    polls: int = 0
    failures: int = 0
    last_error: CloudError | None = None
    sequence: int = field(default=0)


class OperationTracker:
    """Follows long-running operations on its own threads (see the module docstring)."""

    def __init__(
        self,
        *,
        interval: float,
        polls_per_second: float = 10.0,
        workers: int = 2,
        max_poll_failures: int = 8,
        deadline_seconds: float = 3600.0,
        observer: CallObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = max(MINIMUM_POLL_SECONDS, interval)
        self.max_poll_failures = max_poll_failures
        self.deadline_seconds = deadline_seconds
        self._polls = TokenBucket(polls_per_second, max(1, int(polls_per_second)))
        self._workers = max(1, workers)
        self._observer: CallObserver = observer or NullObserver()
        self._clock = clock
        self._condition = threading.Condition()
        self._due: list[tuple[float, int, _Tracked]] = []
        self._sequence = itertools.count()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._polling_now = 0

    def polling(self) -> TrackedPolling:
        """A polling method for one ``begin_*`` call whose operation this tracker will follow."""
        return TrackedPolling(self.interval)

    def track(self, name: str, target: object, polling: TrackedPolling, on_done: OnDone) -> None:
        """Follow the operation ``polling`` started (after its ``begin_*`` call returned); ``on_done``
        is called once, on a tracker thread, when it ends. ``name`` and ``target`` go into logs
        and the call counts (``<name>.poll``)."""
        polling.hand_over()
        entry = _Tracked(
            name=name, target=str(target), polling=polling, on_done=on_done, started=self._clock()
        )
        first = 0.0 if polling.finished() else self._delay(polling.retry_after())
        with self._condition:
            if self._stopping:
                raise CloudError(f"Operation tracker closed; not following {name} on {target}")
            self._start_threads()
            self._schedule(entry, self._clock() + first)

    def pending(self) -> int:
        """Operations in flight (scheduled or being polled)."""
        with self._condition:
            return len(self._due) + self._polling_now

    def close(self) -> None:
        """Stop the threads; operations still in flight are forgotten (their ``on_done`` never runs)."""
        with self._condition:
            self._stopping = True
            self._due.clear()
            self._condition.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    # -- threads ----------------------------------------------------------------------------------

    def _start_threads(self) -> None:
        if self._threads:
            return
        for index in range(self._workers):
            thread = threading.Thread(target=self._run, name=f"operation-tracker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _schedule(self, entry: _Tracked, due: float) -> None:
        entry.sequence = next(self._sequence)
        heapq.heappush(self._due, (due, entry.sequence, entry))
        self._condition.notify()

    def _next(self) -> _Tracked | None:
        """The next operation due, waiting for it; None when stopping."""
        with self._condition:
            while not self._stopping:
                if self._due:
                    wait = self._due[0][0] - self._clock()
                    if wait <= 0:
                        entry = heapq.heappop(self._due)[2]
                        self._polling_now += 1
                        return entry
                    self._condition.wait(timeout=wait)
                else:
                    self._condition.wait()
            return None

    def _run(self) -> None:
        while True:
            entry = self._next()
            if entry is None:
                return
            try:
                self._step(entry)
            except Exception:  # a bug must not stop the tracker; the operation ends unknown
                log.exception(
                    "Operation tracker step failed: operation=%s target=%s", entry.name, entry.target
                )
                self._finish(entry, CloudError(f"Following {entry.name} on {entry.target} failed"))
            finally:
                with self._condition:
                    self._polling_now -= 1

    # -- one step ---------------------------------------------------------------------------------

    def _step(self, entry: _Tracked) -> None:
        """Poll once (unless the first answer was final) and finish or reschedule."""
        polling = entry.polling
        if not polling.finished():
            wait = self._polls.reserve()
            if wait > 0:
                time.sleep(wait)
            try:
                with observe_call(self._observer, f"{entry.name}.poll"):
                    entry.polls += 1
                    self._poll(polling)
            except CloudError as error:
                self._after_poll_failure(entry, error)
                return
            entry.failures = 0
        status = polling.operation_status()
        if status == SUCCEEDED:
            self._finish(entry, None)
        elif status in TERMINAL_FAILURES:
            self._finish(entry, polling.failure())
        elif self._clock() - entry.started > self.deadline_seconds:
            self._finish(
                entry, CloudError(f"{entry.name} on {entry.target} still running after the deadline")
            )
        else:
            self._reschedule(entry, self._delay(polling.retry_after()))

    @staticmethod
    def _poll(polling: TrackedPolling) -> None:
        try:
            polling.poll_once()
        except AzureError as error:
            raise translate_error(error) from error
        except Exception as error:  # azure-core's BadStatus/BadResponse: an answer it cannot read
            raise CloudError(f"Polling the operation failed: {error}") from error

    def _after_poll_failure(self, entry: _Tracked, error: CloudError) -> None:
        entry.failures += 1
        entry.last_error = error
        if entry.failures > self.max_poll_failures:
            message = f"{entry.name} on {entry.target}: its status could not be read ({error})"
            self._finish(entry, CloudError(message, status_code=error.status_code, code=error.code))
            return
        backoff = min(POLL_FAILURE_CAP_SECONDS, self.interval * 2**entry.failures)
        retry_after = getattr(error, "retry_after", None)
        delay = max(backoff, float(retry_after) if retry_after else 0.0)
        if entry.failures == 1:
            log.info(
                "Operation poll failed, retrying: operation=%s target=%s delay=%.1fs error=%s",
                entry.name,
                entry.target,
                delay,
                error,
            )
        self._reschedule(entry, delay)

    def _reschedule(self, entry: _Tracked, delay: float) -> None:
        with self._condition:
            if not self._stopping:
                self._schedule(entry, self._clock() + delay)

    def _delay(self, retry_after: float | None) -> float:
        """Seconds until the next poll: ``Retry-After`` when sent (never sooner), else ``interval``."""
        if retry_after is not None and retry_after > 0:
            return max(MINIMUM_POLL_SECONDS, retry_after)
        return self.interval

    def _finish(self, entry: _Tracked, error: CloudError | None) -> None:
        if error is not None:
            error.target = error.target or entry.target
        outcome = OperationOutcome(
            name=entry.name,
            target=entry.target,
            error=error,
            started=entry.started,
            finished=self._clock(),
            polls=entry.polls,
        )
        if error is not None:
            log.info(
                "Operation failed: operation=%s target=%s code=%s polls=%d",
                entry.name,
                entry.target,
                error.code,
                entry.polls,
            )
        try:
            entry.on_done(outcome)
        except Exception:  # the caller's callback must not stop the tracker
            log.exception("Operation completion callback failed: operation=%s", entry.name)
