"""Cloud protection per NIC: batch halving on capacity errors and exponential backoff.

Owns ``NicGuard``, an immutable value with pure transitions (the time is passed in):

- A capacity error ("subnet has no more IPs", "NIC holds no more IP configurations") while
  adding ``n`` IPs halves the add limit to ``n // 2`` and allows an immediate retry; a capacity
  error while adding a single IP marks the NIC exhausted and backs it off (Baidu's ENI IPAM).
- Any other failed write backs the NIC off: 2 s x 2^(failures-1), capped (default 60 s).
- A successful write clears the backoff; a successful add also clears the exhaustion and doubles
  a reduced add limit (back
  to no limit once it reaches the NIC's capacity), so one lucky retry does not set off a new
  cascade of failing large requests against a nearly full subnet.

``may_write`` tells the reconciler whether to touch the NIC now and ``retry_in`` when to come
back. Imports nothing internal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nodewright.ipam.scaler import MAX_SECONDARY_IPS_PER_NIC

__all__ = ["DEFAULT_BACKOFF_BASE_SECONDS", "DEFAULT_BACKOFF_CAP_SECONDS", "NicGuard", "backoff_delay"]

DEFAULT_BACKOFF_BASE_SECONDS = 2.0
DEFAULT_BACKOFF_CAP_SECONDS = 60.0


def backoff_delay(
    failures: int, base: float = DEFAULT_BACKOFF_BASE_SECONDS, cap: float = DEFAULT_BACKOFF_CAP_SECONDS
) -> float:
    """The wait after ``failures`` consecutive failures: 0, then base, 2 base, 4 base ... capped."""
    if failures <= 0:
        return 0.0
    # Bound the exponent so huge failure counts cannot overflow a float.
    return min(cap, base * 2.0 ** min(failures - 1, 62))


@dataclass(frozen=True)
class NicGuard:
    """The protection state of one NIC."""

    failures: int = 0
    retry_at: float = 0.0
    add_limit: int | None = None
    exhausted: bool = False
    base_seconds: float = DEFAULT_BACKOFF_BASE_SECONDS
    cap_seconds: float = DEFAULT_BACKOFF_CAP_SECONDS

    def may_write(self, now: float) -> bool:
        return now >= self.retry_at

    def retry_in(self, now: float) -> float:
        return max(0.0, self.retry_at - now)

    def limit(self, wanted: int) -> int:
        """How many of ``wanted`` additions to attempt now."""
        return wanted if self.add_limit is None else min(wanted, self.add_limit)

    def after_capacity_error(self, attempted: int, now: float) -> NicGuard:
        """Adding ``attempted`` IPs failed for lack of room: halve, or at one mark exhausted."""
        if attempted > 1:
            return replace(self, add_limit=attempted // 2)
        return self._backed_off(now, add_limit=1, exhausted=True)

    def after_failure(self, now: float) -> NicGuard:
        """A write failed for another reason (throttled, server error, conflict): back off."""
        return self._backed_off(now, add_limit=self.add_limit, exhausted=self.exhausted)

    def after_success(self, added: int = 0) -> NicGuard:
        """A write went through: no backoff. If it added IPs (``added`` > 0) the NIC is no longer
        exhausted and a reduced add limit doubles; a removal alone proves nothing about room."""
        if added <= 0:
            return replace(self, failures=0, retry_at=0.0)
        limit = self.add_limit
        if limit is not None:
            limit = None if limit * 2 >= MAX_SECONDARY_IPS_PER_NIC else limit * 2
        return replace(self, failures=0, retry_at=0.0, add_limit=limit, exhausted=False)

    def _backed_off(self, now: float, *, add_limit: int | None, exhausted: bool) -> NicGuard:
        failures = self.failures + 1
        return replace(
            self,
            failures=failures,
            retry_at=now + backoff_delay(failures, self.base_seconds, self.cap_seconds),
            add_limit=add_limit,
            exhausted=exhausted,
        )
