"""What the identity reconciler last saw on each VM or scale set, so a pass that writes can skip
its GET.

Owns ``KnownIdentities``: per target key, the identity block with the resource's etag, as the
last GET read it or the last PATCH left it, and when. A pass may plan a write from it instead of
reading the target again: the PATCH carries that etag (If-Match), so if anything changed the
target since (another writer, an identity removed out of band), ARM answers 412, nothing is
applied, the entry is forgotten and the pass reads the target and decides again. A pass that
would write nothing, or whose entry is older than ``max_age`` or has no etag, reads the target as
before, so drift repair is unchanged. This takes one ARM round trip off every pass that follows
another within ``max_age``, the usual case under pod churn.

Side effects: none (memory only); thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from nodewright.cloud.models import ResourceIdentities

__all__ = ["KnownIdentities"]


class KnownIdentities:
    """The last identity block seen per target (see the module docstring)."""

    def __init__(self, *, max_age: float, clock: Callable[[], float]) -> None:
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[ResourceIdentities, float]] = {}

    def remember(self, key: str, identities: ResourceIdentities | None) -> None:
        """Record what the target holds now (forgotten when unknown or without an etag)."""
        with self._lock:
            if identities is None or not identities.etag:
                self._entries.pop(key, None)
            else:
                self._entries[key] = (identities, self._clock())

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def fresh(self, key: str) -> ResourceIdentities | None:
        """The remembered identities if younger than ``max_age``, else None."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or self._clock() - entry[1] > self.max_age:
            return None
        return entry[0]
