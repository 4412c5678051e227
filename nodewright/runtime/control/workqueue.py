"""The work queue between event handlers and reconcile workers, with client-go semantics.

Owns ``WorkQueue``: a key is never handed to two workers at once; adding a key that is already
queued is a no-op; adding a key while a worker holds it marks it dirty and re-queues it when
the worker calls ``done``; ``add_after`` delays an add (one heap, one timer thread, earliest
deadline first); ``add_rate_limited`` delays by the rate limiter from ``ratelimit.py``. With a
``BatchWindow``, ``add`` debounces: a key becomes ready once its adds have been quiet for
``quiet`` seconds, and never later than ``max_delay`` after the first add of the burst, so a
burst of events on one key costs one reconcile (``add_after`` and retries are not debounced).

Shutdown differs from client-go in one deliberate way: after ``shut_down`` the queue stops
intake at once (``get`` returns ``None`` even if keys are still queued), so a manager that
is stopping finishes only the reconciles already in flight; ``shut_down_with_drain`` also
waits for those. Metrics are reported through the ``QueueMetrics`` hooks (``metrics.py``
implements them); the queue itself knows nothing of OpenTelemetry.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from nodewright.runtime.control.ratelimit import RateLimiter, default_controller_rate_limiter

__all__ = ["BatchWindow", "QueueMetrics", "WorkQueue"]

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class BatchWindow:
    """Debounce adds: ready after ``quiet`` seconds without a new add, at most ``max_delay``
    seconds after the first add of a burst.

    ``shared``: the quiet is the whole queue's (no batched add of *any* key for ``quiet``
    seconds), so a wave of changes spread over many keys is handed out once it has ended, even
    when one key's own adds are further apart than ``quiet``; ``max_delay`` still bounds each
    key's wait."""

    quiet: float
    max_delay: float
    shared: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.quiet <= self.max_delay:
            raise ValueError("a batch window needs 0 < quiet <= max_delay")


class QueueMetrics(Protocol):
    """Hooks a queue calls as keys move through it (depth and running times are read on demand)."""

    def added(self) -> None: ...

    def started(self, queued_seconds: float) -> None: ...

    def finished(self, work_seconds: float) -> None: ...

    def retried(self) -> None: ...


class WorkQueue(Generic[T]):
    """A deduplicating, delaying, rate-limited FIFO of keys shared by N workers."""

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: RateLimiter | None = None,
        metrics: QueueMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        batch_window: BatchWindow | None = None,
    ) -> None:
        self.name = name
        self.rate_limiter = rate_limiter or default_controller_rate_limiter()
        self.batch_window = batch_window
        self._burst_started: dict[T, float] = {}  # key -> first add of its open burst
        self._batched: set[T] = set()  # keys whose pending deadline a batched add set
        self._last_batched_add = float("-inf")  # for a shared quiet
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # signals workers and drainers
        self._timer_wakeup = threading.Condition(self._lock)  # signals the timer thread
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()  # queued, or to be re-queued when its worker is done
        self._processing: dict[T, float] = {}  # key -> start time
        self._queued_at: dict[T, float] = {}
        self._waiting: list[tuple[float, int, T]] = []  # (ready time, sequence, key)
        self._waiting_until: dict[T, float] = {}  # earliest pending ready time per key
        self._sequence = itertools.count()
        self._timer: threading.Thread | None = None
        self._shutting_down = False
        self._idle = 0  # workers waiting in get(): an add wakes one only when there is one
        self._draining = 0  # callers waiting in shut_down_with_drain()

    # -- intake --------------------------------------------------------------------------

    def add(self, item: T) -> None:
        """Queue the key unless it is queued already; if a worker holds it, re-queue it later.

        With a batch window the key is queued once its burst of adds has gone quiet.
        """
        if self.batch_window is not None:
            self._add_batched(item, self.batch_window)
            return
        with self._lock:
            if self._shutting_down or item in self._dirty:
                return
            self._add_locked(item)
        if self._metrics is not None:
            self._metrics.added()  # outside the lock: metrics must not slow the workers down

    def _add_batched(self, item: T, window: BatchWindow) -> None:
        with self._lock:
            if self._shutting_down or item in self._dirty:
                return  # queued (or re-queued when done) already: it will read the newest state
            now = self._clock()
            self._last_batched_add = now
            first = self._burst_started.setdefault(item, now)
            ready_at = min(now + window.quiet, first + window.max_delay)
            current = self._waiting_until.get(item)
            if current is not None and current <= ready_at and item not in self._batched:
                return  # an explicit add_after that is due sooner adds it
            self._batched.add(item)
            self._schedule_locked(item, ready_at)

    def _add_locked(self, item: T) -> None:
        """Queue a key that is neither queued nor shut out (the caller checked both)."""
        self._dirty.add(item)
        if self._metrics is not None:
            self._queued_at[item] = self._clock()
        if item not in self._processing:
            self._queue.append(item)
            if self._idle:
                self._ready.notify()

    def add_after(self, item: T, delay: float) -> None:
        """Add the key once ``delay`` seconds have passed; the earliest pending deadline wins."""
        if delay <= 0:
            self.add(item)
            return
        with self._lock:
            if self._shutting_down:
                return
            ready_at = self._clock() + delay
            current = self._waiting_until.get(item)
            if current is not None and current <= ready_at:
                return
            self._batched.discard(item)  # an explicit deadline: a later batched add must not postpone it
            self._schedule_locked(item, ready_at)

    def _schedule_locked(self, item: T, ready_at: float) -> None:
        self._waiting_until[item] = ready_at
        heapq.heappush(self._waiting, (ready_at, next(self._sequence), item))
        if self._timer is None:
            self._timer = threading.Thread(
                target=self._run_timer, name=f"workqueue-timer-{self.name}", daemon=True
            )
            self._timer.start()
        self._timer_wakeup.notify()

    def add_rate_limited(self, item: T) -> None:
        """Add the key after the delay its rate limiter gives (a retry after a failure)."""
        if self._metrics is not None:
            self._metrics.retried()
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Reset the key's backoff (after a success)."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.retries(item)

    def _run_timer(self) -> None:
        with self._lock:
            while not self._shutting_down:
                now = self._clock()
                while self._waiting and self._waiting[0][0] <= now:
                    ready_at, _, item = heapq.heappop(self._waiting)
                    if self._waiting_until.get(item) == ready_at:
                        later = self._shared_quiet_end(item)
                        if later > now:
                            self._waiting_until[item] = later
                            heapq.heappush(self._waiting, (later, next(self._sequence), item))
                            continue
                        del self._waiting_until[item]
                        self._burst_started.pop(item, None)
                        self._batched.discard(item)
                        if item not in self._dirty:
                            self._add_locked(item)
                            if self._metrics is not None:
                                self._metrics.added()
                timeout = self._waiting[0][0] - now if self._waiting else None
                self._timer_wakeup.wait(timeout)

    def _shared_quiet_end(self, item: T) -> float:
        """When a batched key is due under a shared quiet (-inf when it is due now or the
        window is not shared): the queue's quiet end, capped by the key's ``max_delay``."""
        window = self.batch_window
        if window is None or not window.shared or item not in self._batched:
            return float("-inf")
        first = self._burst_started.get(item, self._last_batched_add)
        return min(self._last_batched_add + window.quiet, first + window.max_delay)

    # -- workers -------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> T | None:
        """Block until a key is ready and hand it to the caller; ``None`` once shut down.

        The caller must call ``done(key)`` when finished. With ``timeout``, ``None`` also means
        that nothing became ready in time.
        """
        with self._lock:
            if not self._queue and not self._shutting_down and not self._wait_locked(timeout):
                return None
            if self._shutting_down:
                return None
            item = self._queue.popleft()
            now = self._clock()
            self._processing[item] = now
            self._dirty.discard(item)
            if self._metrics is None:
                return item
            queued_seconds = now - self._queued_at.pop(item, now)
        self._metrics.started(queued_seconds)
        return item

    def _wait_locked(self, timeout: float | None) -> bool:
        """Wait (holding the lock's condition) until a key is queued or the queue shuts down;
        False when ``timeout`` passed first."""
        self._idle += 1
        try:
            return bool(self._ready.wait_for(lambda: self._queue or self._shutting_down, timeout))
        finally:
            self._idle -= 1

    def done(self, item: T) -> None:
        """Release the key; if it was added while held, it goes back in the queue now."""
        with self._lock:
            started = self._processing.pop(item, None)
            if item in self._dirty and not self._shutting_down:
                self._queue.append(item)
                if self._idle:
                    self._ready.notify()
            elif self._draining and not self._processing:
                self._ready.notify_all()
        if started is not None and self._metrics is not None:
            self._metrics.finished(self._clock() - started)

    # -- shutdown and inspection ---------------------------------------------------------

    def shut_down(self) -> None:
        """Stop intake: ``add`` is ignored and ``get`` returns ``None`` from now on."""
        with self._lock:
            self._shutting_down = True
            self._ready.notify_all()
            self._timer_wakeup.notify_all()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down, then wait until every key handed out has been marked done.

        Returns False when ``timeout`` passed with keys still being processed.
        """
        self.shut_down()
        with self._lock:
            self._draining += 1
            try:
                return self._ready.wait_for(lambda: not self._processing, timeout)
            finally:
                self._draining -= 1

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        """Keys waiting for a worker (not counting delayed or in-flight ones)."""
        with self._lock:
            return len(self._queue)

    def len(self) -> int:
        return len(self)

    def processing(self) -> int:
        with self._lock:
            return len(self._processing)

    def unfinished_work_seconds(self) -> float:
        """Total seconds that in-flight keys have been processed so far."""
        with self._lock:
            now = self._clock()
            return sum(now - started for started in self._processing.values())

    def longest_running_seconds(self) -> float:
        """Seconds the longest in-flight key has been processed so far."""
        with self._lock:
            now = self._clock()
            return max((now - started for started in self._processing.values()), default=0.0)
