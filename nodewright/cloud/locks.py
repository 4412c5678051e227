"""Per-key locks: one writer at a time per NIC, per scale set, per scale-set instance.

ARM writes such as a NIC PUT replace the whole resource; two writers in this process would race
on the etag. ``KeyedLocks`` hands out one ``threading.Lock`` per key (keys are compared
lowercased, like ARM IDs). Used by ``compute`` and ``network``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class KeyedLocks:
    """A lock per key, created on first use and kept (keys are few: NICs, scale sets)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def lock_for(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key.lower(), threading.Lock())

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Hold the lock for ``key`` for the duration of the block."""
        with self.lock_for(key):
            yield
