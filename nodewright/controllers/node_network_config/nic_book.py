"""``NicBook``: the node_network_config reconciler's in-memory knowledge of each NIC, behind one lock.

Per NIC (keyed by its ARM ID, lowercased): the last snapshot read from ARM and when, the write
guard (``ipam.NicGuard``: backoff and batch halving), ARM's last terminal refusal of a write (its
code and message, until a write goes through), when each name was marked in ipsNotInUse,
which names were released lately, since when a pool surplus has lasted (scale-down hysteresis),
and first-seen times of unaccounted IP configurations (leaks). Also which node owns each NIC
(``track``), which the NIC watcher (``nic_watch``) lists, and whose snapshots it refreshes from
its lists. And the NIC's write in flight (``operations.NicOperation``: started by a pass, ended
by the cloud layer's operation tracker, absorbed by the next pass), at most one per NIC. A pass's
pure steps read a copy of a NIC's entry (``memory``: ``NicMemory``), never the book. Workers
never touch these dicts directly: every read and change is one method call that holds the book's
lock, so no caller can forget it. The work queue never runs one node's key twice at once, so a
NIC's entries are changed by one worker at a time; the lock guards the dicts themselves.
``on_remember`` (set once, at wiring) hears of each NIC a pass read, outside the lock. No I/O.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from nodewright.cloud.errors import CloudError
from nodewright.cloud.models import NicInfo
from nodewright.controllers.node_network_config.operations import NicOperation
from nodewright.ipam import LeakTracker, NicGuard

__all__ = ["NicBook", "NicMemory"]

RELEASED_MEMORY_SECONDS = 600.0
"""How long a released name is remembered (the node may list it a while longer)."""


@dataclass
class _Entry:
    guard: NicGuard
    snapshot: NicInfo | None = None
    read_at: float = float("-inf")
    marked_at: dict[str, float] = field(default_factory=dict)
    released_at: dict[str, float] = field(default_factory=dict)
    surplus_since: float | None = None
    refusal: tuple[str, str] | None = None
    operation: NicOperation | None = None


@dataclass(frozen=True)
class NicMemory:
    """A copy of what the book knows about one NIC, for a pass's pure steps to read."""

    guard: NicGuard
    read_at: float
    refusal: tuple[str, str] | None
    marked_at: Mapping[str, float]
    surplus_since: float | None
    leaks_first_seen: Mapping[str, float]
    leak_grace_seconds: float

    def settled(self, names: Collection[str], now: float, settle_seconds: float) -> set[str]:
        """The names marked at least ``settle_seconds`` ago (a name never marked is settled)."""
        return {n for n in names if now - self.marked_at.get(n, float("-inf")) >= settle_seconds}

    def settling_until(self, names: Collection[str], settle_seconds: float) -> list[float]:
        return [self.marked_at[n] + settle_seconds for n in names if n in self.marked_at]

    def surplus_due(self, delay_seconds: float) -> float | None:
        """When the current surplus will have lasted ``delay_seconds`` (None: no surplus)."""
        return None if self.surplus_since is None else self.surplus_since + delay_seconds

    def next_leak_due(self) -> float | None:
        """When the earliest unaccounted name becomes collectable (None: none tracked)."""
        if not self.leaks_first_seen:
            return None
        return min(self.leaks_first_seen.values()) + self.leak_grace_seconds


class NicBook:
    """Thread-safe per-NIC memory (see the module docstring)."""

    def __init__(
        self,
        *,
        backoff_base_seconds: float,
        backoff_cap_seconds: float,
        leak_grace_seconds: float,
    ) -> None:
        self._lock = threading.Lock()
        self._base = backoff_base_seconds
        self._cap = backoff_cap_seconds
        self._entries: dict[str, _Entry] = {}
        self._owners: dict[str, str] = {}
        self._leaks = LeakTracker(leak_grace_seconds)
        self.on_remember: Callable[[NicInfo], None] | None = None
        """Told each NIC a pass read (outside the lock; ``boot_pools`` counts pools with it)."""

    def _entry(self, nic_id: str) -> _Entry:
        key = nic_id.lower()
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(guard=NicGuard(base_seconds=self._base, cap_seconds=self._cap))
            self._entries[key] = entry
        return entry

    def memory(self, nic_id: str) -> NicMemory:
        """A copy of the NIC's entry (the pure steps of a pass read it, never the book)."""
        with self._lock:
            entry = self._entry(nic_id)
            return NicMemory(
                guard=entry.guard,
                read_at=entry.read_at,
                refusal=entry.refusal,
                marked_at=dict(entry.marked_at),
                surplus_since=entry.surplus_since,
                leaks_first_seen=self._leaks.tracked(nic_id.lower()),
                leak_grace_seconds=self._leaks.grace_seconds,
            )

    # -- snapshots and the write guard ----------------------------------------------------------

    def snapshot(self, nic_id: str) -> tuple[NicInfo | None, float]:
        with self._lock:
            entry = self._entry(nic_id)
            return entry.snapshot, entry.read_at

    def remember(self, nic_id: str, nic: NicInfo, now: float) -> None:
        with self._lock:
            entry = self._entry(nic_id)
            entry.snapshot, entry.read_at = nic, now
        if self.on_remember is not None:
            self.on_remember(nic)

    def refresh_from_list(self, nic_id: str, nic: NicInfo, listed_at: float) -> bool:
        """Take a NIC as a list sent at ``listed_at`` showed it, unless the book read it later
        (a pass's own read or write is newer). True when it differs from the book's snapshot
        (etag or IP configurations) or the book had none: the node's pass should look."""
        with self._lock:
            entry = self._entry(nic_id)
            if entry.read_at > listed_at:
                return False
            before = entry.snapshot
            entry.snapshot, entry.read_at = nic, listed_at
            return before is None or (before.etag, before.ip_configurations) != (
                nic.etag,
                nic.ip_configurations,
            )

    def drop_snapshot(self, nic_id: str, listed_at: float) -> bool:
        """A list sent at ``listed_at`` did not show the NIC: drop the snapshot unless the book
        read it later; True when one was dropped (the node's pass should read it)."""
        with self._lock:
            entry = self._entry(nic_id)
            if entry.read_at > listed_at or entry.snapshot is None:
                return False
            entry.snapshot, entry.read_at = None, float("-inf")
            return True

    def guard(self, nic_id: str) -> NicGuard:
        with self._lock:
            return self._entry(nic_id).guard

    def set_guard(self, nic_id: str, guard: NicGuard) -> None:
        with self._lock:
            self._entry(nic_id).guard = guard

    def refusal(self, nic_id: str) -> tuple[str, str] | None:
        """ARM's last terminal refusal of a write to the NIC (code, message), until one succeeds."""
        with self._lock:
            return self._entry(nic_id).refusal

    def note_refusal(self, nic_id: str, refusal: tuple[str, str] | None) -> None:
        """Remember a terminal refusal, or (None) that a write went through."""
        with self._lock:
            self._entry(nic_id).refusal = refusal

    def back_off(self, nic_id: str, now: float) -> float:
        """After a failed call: back off and drop the snapshot; returns the delay."""
        with self._lock:
            entry = self._entry(nic_id)
            entry.guard = entry.guard.after_failure(now)
            entry.snapshot = None
            return entry.guard.retry_in(now)

    # -- the write in flight --------------------------------------------------------------------

    def begin_operation(self, nic_id: str, operation: NicOperation) -> None:
        with self._lock:
            self._entry(nic_id).operation = operation

    def finish_operation(self, nic_id: str, error: CloudError | None) -> NicOperation | None:
        """Mark the NIC's write ended (``error`` if it failed); None when there was none."""
        with self._lock:
            entry = self._entries.get(nic_id.lower())
            if entry is None or entry.operation is None:
                return None
            entry.operation = dataclasses.replace(entry.operation, done=True, error=error)
            return entry.operation

    def clear_operation(self, nic_id: str) -> None:
        with self._lock:
            self._entry(nic_id).operation = None

    def operation(self, nic_id: str) -> NicOperation | None:
        """The NIC's write, in flight or ended and not yet settled by a pass."""
        with self._lock:
            return self._entry(nic_id).operation

    def take_ended_operation(self, nic_id: str) -> NicOperation | None:
        """The NIC's ended write, removed from the book (the pass settles it); None otherwise."""
        with self._lock:
            entry = self._entry(nic_id)
            operation = entry.operation
            if operation is None or not operation.done:
                return None
            entry.operation = None
            return operation

    # -- release bookkeeping --------------------------------------------------------------------

    def mark(self, nic_id: str, marked: Iterable[str], unmarked: Iterable[str], now: float) -> None:
        with self._lock:
            entry = self._entry(nic_id)
            for name in marked:
                entry.marked_at[name] = now
            for name in unmarked:
                entry.marked_at.pop(name, None)

    def after_removal(
        self, nic_id: str, removed: Collection[str], on_nic: Collection[str], now: float
    ) -> None:
        with self._lock:
            entry = self._entry(nic_id)
            for name in removed:
                entry.marked_at.pop(name, None)
                if name not in on_nic:
                    entry.released_at[name] = now

    def recently_released(self, nic_id: str, now: float) -> set[str]:
        with self._lock:
            released = self._entry(nic_id).released_at
            for name, when in list(released.items()):
                if now - when > RELEASED_MEMORY_SECONDS:
                    del released[name]
            return set(released)

    def set_surplus_since(self, nic_id: str, since: float | None) -> None:
        """Keep the surplus clock (``ipam.requested_count`` decides it; None: no surplus)."""
        with self._lock:
            self._entry(nic_id).surplus_since = since

    # -- leaks ---------------------------------------------------------------------------------

    def observe_leaks(self, nic_id: str, unaccounted: Collection[str], now: float) -> tuple[str, ...]:
        with self._lock:
            return self._leaks.observe(nic_id.lower(), unaccounted, now)

    # -- owners ---------------------------------------------------------------------------------

    def track(self, nic_id: str, owner: str) -> None:
        """Record that ``owner`` (the node's request name) keeps its pool on this NIC."""
        with self._lock:
            self._owners[nic_id.lower()] = owner

    def tracked(self) -> dict[str, str]:
        """Every tracked NIC (lowercased ID) and its owner."""
        with self._lock:
            return dict(self._owners)

    def forget(self, nic_id: str) -> None:
        """The node is gone: drop everything about its NIC."""
        with self._lock:
            self._entries.pop(nic_id.lower(), None)
            self._owners.pop(nic_id.lower(), None)
            self._leaks.forget(nic_id.lower())
