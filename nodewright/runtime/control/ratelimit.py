"""Rate limiters that decide how long a failed work-queue item waits before its next try.

Owns the three client-go limiters the controller uses: per-item exponential backoff
(5 ms x 2^n, capped at 1000 s), an overall token bucket (10 qps, burst 100), and a combinator
that takes the longest of several delays. ``workqueue.WorkQueue.add_rate_limited`` asks a
limiter ``when(item)``; the controller calls ``forget(item)`` after a success. Pure logic with an
injectable clock; nothing here sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol

__all__ = [
    "ItemExponentialRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "TokenBucketRateLimiter",
    "default_controller_rate_limiter",
]

Clock = Callable[[], float]


class RateLimiter(Protocol):
    """Decides the delay before an item is retried, and remembers its failures."""

    def when(self, item: Hashable) -> float:
        """Seconds to wait before the item is processed again; records one more failure."""
        ...

    def forget(self, item: Hashable) -> None:
        """Stop tracking the item: its next failure starts from the smallest delay."""
        ...

    def retries(self, item: Hashable) -> int:
        """How many failures of the item are being tracked."""
        ...


class ItemExponentialRateLimiter:
    """``base_delay * 2**failures`` per item, capped at ``max_delay``."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:
        with self._lock:
            failures = self._failures.get(item, 0)
            self._failures[item] = failures + 1
        if failures >= 64:  # 2**64 x any sane base is past every cap; avoid float overflow
            return self.max_delay
        return min(self.base_delay * 2.0**failures, self.max_delay)

    def forget(self, item: Hashable) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def retries(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class TokenBucketRateLimiter:
    """An overall bucket: ``burst`` tokens, refilled at ``qps`` per second, shared by all items.

    Each ``when`` reserves one token; when the bucket is empty the reservation lies in the
    future and the returned delay says how far.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:  # noqa: ARG002 - one bucket for all items
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, item: Hashable) -> None:
        """The bucket is shared, not per item: nothing to forget."""

    def retries(self, item: Hashable) -> int:  # noqa: ARG002 - one bucket for all items
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters; ``forget`` and ``retries`` reach all of them."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def retries(self, item: Hashable) -> int:
        return max(limiter.retries(item) for limiter in self.limiters)


def default_controller_rate_limiter(clock: Clock = time.monotonic) -> MaxOfRateLimiter:
    """controller-runtime's default: max(5 ms x 2^n capped at 1000 s, 10 qps burst 100)."""
    return MaxOfRateLimiter(
        ItemExponentialRateLimiter(0.005, 1000.0), TokenBucketRateLimiter(10.0, 100, clock)
    )
