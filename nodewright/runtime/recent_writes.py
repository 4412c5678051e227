"""Objects this process wrote that an informer's cache may not show yet (read your own writes).

A reconciler that writes an object and is run again before the watch delivers the write reads the
old object from the cache, decides again from it, and repeats the write (and its Event). Keep the
server's answer to each write here; ``newer`` hands it back instead of the cached object until the
cache holds that version or a later one, or until ``ttl`` has passed. It only ever replaces an
object the cache holds: an object deleted by someone else is never brought back.

Versions are compared as integers where both are (etcd's revisions, as client-go's
``NewIntegerResourceVersionMutationCache`` does), and otherwise only for equality.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from nodewright.runtime.informer import object_key

__all__ = ["RecentDeletes", "RecentWrites"]

V = TypeVar("V")


@dataclass(frozen=True)
class _Written:
    obj: dict[str, Any]
    at: float


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def caught_up(cached: dict[str, Any], written: dict[str, Any]) -> bool:
    """Whether the cached object is the written version or a later one."""
    cached_version, written_version = _version(cached), _version(written)
    if cached_version.isdigit() and written_version.isdigit():
        return int(cached_version) >= int(written_version)
    return cached_version == written_version


def _put_newest(table: dict[str, V], key: str, value: V, limit: int) -> None:
    """Store ``value`` as the newest entry (the dict stays in write order) and drop the oldest
    beyond ``limit``; the caller holds the table's lock."""
    table.pop(key, None)
    table[key] = value
    while len(table) > limit:
        del table[next(iter(table))]


class RecentWrites:
    """Thread-safe; at most ``limit`` objects are kept (the oldest go first)."""

    def __init__(
        self, ttl: float = 30.0, *, limit: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.limit = limit
        self.clock = clock
        self._written: dict[str, _Written] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._written)

    def remember(self, obj: dict[str, Any]) -> None:
        """Keep the server's answer to a write (an object with its new resourceVersion)."""
        if not _version(obj):
            return
        with self._lock:
            _put_newest(self._written, object_key(obj), _Written(obj, self.clock()), self.limit)

    def forget(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._written.pop(object_key(obj), None)

    def newer(self, cached: dict[str, Any]) -> dict[str, Any]:
        """``cached``, or this process's later write of it while the cache has not caught up."""
        key = object_key(cached)
        with self._lock:
            written = self._written.get(key)
            if written is None:
                return cached
            if self.clock() - written.at > self.ttl or caught_up(cached, written.obj):
                del self._written[key]
                return cached
            return written.obj

    def overlay(self, cached: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """``newer`` of each object."""
        return [self.newer(obj) for obj in cached]


class RecentDeletes:
    """Objects this process is deleting (by uid), so a watch may drop the delete events it caused:
    the pass that deleted an object has already decided without it, and a pass run again for
    that event only repeats the reads (and, for a cloud resource, a GET). Noted *before* the
    request (the event may be handled before the answer is read); ``discard`` after a failed
    request. Thread-safe; an entry lasts ``ttl`` seconds or until its event is seen, and at most
    ``limit`` are kept."""

    def __init__(
        self, ttl: float = 60.0, *, limit: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.limit = limit
        self.clock = clock
        self._deleting: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, obj: dict[str, Any]) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        with self._lock:
            _put_newest(self._deleting, uid, self.clock(), self.limit)

    def discard(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._deleting.pop(str((obj.get("metadata") or {}).get("uid") or ""), None)

    def caused(self, obj: dict[str, Any]) -> bool:
        """Whether this delete event is of an object this process deleted (forgotten once asked)."""
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        with self._lock:
            noted = self._deleting.pop(uid, None)
        return noted is not None and self.clock() - noted <= self.ttl
