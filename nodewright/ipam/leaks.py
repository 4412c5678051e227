"""Garbage collection of leaked IPs: first-seen times and the grace period.

Owns ``LeakTracker`` and ``collectable`` (the grace rule over a snapshot of first-seen times).
An IP configuration on a NIC that no NodeNetworkConfig accounts for and no
pod uses is a possible leak (Baidu's ENI IPAM: "an IP that no pod, reservation or idle pool
accounts for"). It is recorded with the time it was first seen so; once it has stayed that way
for the grace period (default 10 minutes) it may be released. If it comes back into use or into
the status in the meantime it is forgotten, and its clock starts afresh should it leak again.
The tracker lives in memory: after a restart every grace period starts again, which can only
delay a release, never hasten one.

Pure state transitions with the time passed in (no clock is read here); not thread-safe: the
reconciler serialises calls per NIC. Imports nothing internal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

__all__ = ["DEFAULT_LEAK_GRACE_SECONDS", "LeakTracker", "collectable"]

DEFAULT_LEAK_GRACE_SECONDS = 600.0


def collectable(
    first_seen: Mapping[str, float], unaccounted: Collection[str], now: float, grace_seconds: float
) -> tuple[str, ...]:
    """Which of ``unaccounted`` have been so for at least the grace period, given the first-seen
    times known before ``now`` (a name not among them is first seen now), sorted."""
    return tuple(sorted(name for name in unaccounted if now - first_seen.get(name, now) >= grace_seconds))


class LeakTracker:
    """First-seen times of unaccounted IP configurations, per NIC."""

    def __init__(self, grace_seconds: float = DEFAULT_LEAK_GRACE_SECONDS) -> None:
        if grace_seconds < 0:
            raise ValueError(f"grace_seconds must not be negative, got {grace_seconds}")
        self.grace_seconds = grace_seconds
        self._first_seen: dict[str, dict[str, float]] = {}

    def observe(self, nic: str, unaccounted: Collection[str], now: float) -> tuple[str, ...]:
        """Record that ``unaccounted`` are the NIC's unaccounted, unused names at ``now``; names no
        longer among them are forgotten. Returns those unaccounted for at least the grace period,
        sorted (the ones the allocation plan may collect)."""
        previous = self._first_seen.get(nic, {})
        current = {name: previous.get(name, now) for name in unaccounted}
        if current:
            self._first_seen[nic] = current
        else:
            self._first_seen.pop(nic, None)
        return collectable(current, current, now, self.grace_seconds)

    def first_seen(self, nic: str, name: str) -> float | None:
        return self._first_seen.get(nic, {}).get(name)

    def next_due(self, nic: str) -> float | None:
        """When the earliest tracked name of the NIC becomes collectable (None: nothing tracked);
        the reconciler requeues for then."""
        times = self._first_seen.get(nic)
        if not times:
            return None
        return min(times.values()) + self.grace_seconds

    def forget(self, nic: str, names: Collection[str] | None = None) -> None:
        """Forget the named entries (all of the NIC's when ``names`` is None): released, or the
        node is gone."""
        if names is None:
            self._first_seen.pop(nic, None)
            return
        times = self._first_seen.get(nic)
        if times is None:
            return
        for name in names:
            times.pop(name, None)
        if not times:
            self._first_seen.pop(nic, None)

    def tracked(self, nic: str) -> dict[str, float]:
        """A copy of the NIC's first-seen times."""
        return dict(self._first_seen.get(nic, {}))
