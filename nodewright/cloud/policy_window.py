"""A local mirror of one Compute resource provider throttling policy: at most ``capacity``
requests of an operation family in any ``window`` seconds, a sliding window (``GetVMScaleSet3Min``,
``PutVMScaleSetVM30Min``, ...).

Owns ``PolicyWindow``. A token bucket refilled at capacity over window (what ``budget`` used
before) spends a burst and then trickles for ever after, although the sliding window gives the
whole burst back once it has aged out: a 1,000-node cold start sent 583 instance PUTs in its first
100 s and then 3.3 a second, 100 s longer than the window allowed. This mirror keeps the send
times of its own requests instead, so an allowance comes back exactly when the request that used
it leaves the window. What others spend is learnt from ARM's ``x-ms-ratelimit-remaining-resource``
report: the requests the server counts beyond our own in the window are taken to stay for a
whole window from the report (we cannot see when they were sent). Pure given the clock; not
thread-safe (``budget.ArmBudget`` holds its lock around every call).
"""

from __future__ import annotations

import bisect
import math
from collections import deque

__all__ = ["PolicyWindow"]


class PolicyWindow:
    """Our sends in the sliding window, and what others are known to spend in it."""

    def __init__(self, capacity: float, window: float) -> None:
        self.capacity = capacity
        self.window = window
        self._sent: deque[float] = deque()
        """Our send times (or planned send times, for a request told to wait), sorted."""
        self._foreign = 0.0
        self._foreign_until = 0.0

    def _trim(self, now: float) -> None:
        while self._sent and self._sent[0] <= now - self.window:
            self._sent.popleft()

    def available(self, now: float) -> float:
        """Requests that may still go now."""
        self._trim(now)
        foreign = self._foreign if now < self._foreign_until else 0.0
        return self.capacity - len(self._sent) - foreign

    def take(self, now: float, reserve: float) -> float:
        """Count one request; the seconds to wait so that ``reserve`` requests stay free after
        it (it is counted as sent after that wait)."""
        missing = reserve + 1.0 - self.available(now)
        wait = 0.0 if missing <= 0 else self._freed_after(now, missing)
        bisect.insort(self._sent, now + wait)
        return wait

    def _freed_after(self, now: float, missing: float) -> float:
        """Seconds until ``missing`` more requests may go: our oldest sends leave the window, or
        the others' spending is assumed gone, whichever comes first."""
        index = math.ceil(missing) - 1
        candidates = []
        if index < len(self._sent):
            candidates.append(self._sent[index] + self.window - now)
        if self._foreign > 0 and self._foreign_until > now:
            candidates.append(self._foreign_until - now)
        return max(min(candidates), 0.001) if candidates else self.window

    def give_back(self, now: float) -> None:
        """Forget the latest request counted by ``take`` (it was not sent)."""
        self._trim(now)
        if self._sent:
            self._sent.pop()

    def report(self, now: float, remaining: int) -> None:
        """ARM says ``remaining`` requests are left in the window now: whatever it counts beyond
        our own sends is someone else's, assumed to stay for a whole window."""
        self._trim(now)
        ours = sum(1 for sent in self._sent if sent <= now)
        self._foreign = max(0.0, self.capacity - remaining - ours)
        self._foreign_until = now + self.window

    def exhaust(self, now: float, seconds: float) -> None:
        """A 429 named this policy: nothing more goes for ``seconds``."""
        self._foreign = self.capacity
        self._foreign_until = now + seconds
