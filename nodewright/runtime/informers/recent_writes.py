"""One controller's own writes, kept until the informers' caches show them (read your own writes).

A reconciler that writes an object and is run again before the watch delivers the write reads the
old object from the cache, decides again from it, and repeats the write (and its Event). Owns:

- ``RecentWrites``: the server's answer to each write of one kind; ``newer`` hands it back
  instead of the cached object until the cache holds that version or a later one, or until
  ``ttl`` has passed. It only ever replaces an object the cache holds: an object deleted by
  someone else is never brought back.
- ``RecentDeletes``: the objects of one kind this controller is deleting or has deleted, so that
  a watch may drop the delete events they cause (``caused``) and a read may leave out an object
  the cache still shows although this controller deleted it for good (``hides``).
- ``OwnWrites``: both, per kind, for one controller. Its client (``Client.with_own_writes``)
  records into it; its cache view (``cache_view.py``) reads through it.

Versions are compared as integers where both are (etcd's revisions, as client-go's
``NewIntegerResourceVersionMutationCache`` does), and otherwise only for equality.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from nodewright.runtime.informers.informer import object_key
from nodewright.runtime.kube.kinds import Kind

__all__ = ["OwnWrites", "RecentDeletes", "RecentWrites", "caught_up"]

V = TypeVar("V")
Object = dict[str, Any]


@dataclass(frozen=True)
class _Written:
    obj: Object
    at: float


def _version(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def caught_up(cached: Object, written: Object) -> bool:
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


def _drop_expired(table: dict[str, Any], before: float) -> None:
    """Drop the entries noted before ``before`` (the oldest come first); the caller holds the
    table's lock."""
    while table:
        key = next(iter(table))
        if table[key].at >= before:
            return
        del table[key]


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

    def pending_keys(self) -> list[str]:
        """The keys of the objects kept (some may have caught up; ``newer`` tells), once those
        older than ``ttl`` are let go."""
        return [key for key, _ in self.pending()]

    def pending(self) -> list[tuple[str, Object]]:
        """The objects kept, by key (as ``pending_keys``)."""
        with self._lock:
            _drop_expired(self._written, self.clock() - self.ttl)
            return [(key, written.obj) for key, written in self._written.items()]

    def remember(self, obj: Object) -> None:
        """Keep the server's answer to a write (an object with its new resourceVersion)."""
        if not _version(obj):
            return
        with self._lock:
            _put_newest(self._written, object_key(obj), _Written(obj, self.clock()), self.limit)

    def forget(self, obj: Object) -> None:
        self.forget_key(object_key(obj))

    def forget_key(self, key: str) -> None:
        with self._lock:
            self._written.pop(key, None)

    def newer(self, cached: Object) -> Object:
        """``cached``, or this controller's later write of it while the cache has not caught up."""
        key = object_key(cached)
        with self._lock:
            written = self._written.get(key)
            if written is None:
                return cached
            if self.clock() - written.at > self.ttl or caught_up(cached, written.obj):
                del self._written[key]
                return cached
            return written.obj

    def overlay(self, cached: Iterable[Object]) -> list[Object]:
        """``newer`` of each object."""
        return [self.newer(obj) for obj in cached]


@dataclass
class _Deleting:
    uid: str  # "" until known: the request named the object by name only
    at: float
    gone: bool = False  # the answer said the object no longer exists


class RecentDeletes:
    """Objects of one kind this controller deletes, by key (``namespace/name``): noted *before*
    the request (the delete event may be handled before the answer is read), given their uid
    and fate by the answer (``deleted``), dropped after a failed request (``failed``).

    ``caused(obj)`` tells a delete event of such an object: the pass that deleted it has already
    decided without it, and a pass run again for that event only repeats the reads. An entry
    noted by name alone takes the uid of the first delete event it claims, so a later object of
    the same name, deleted by someone else, is not taken for ours. ``hides(obj)`` tells a cached
    object that this controller deleted for good. Thread-safe; an entry lasts ``ttl`` seconds,
    and at most ``limit`` are kept."""

    def __init__(
        self, ttl: float = 60.0, *, limit: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.limit = limit
        self.clock = clock
        self._deleting: dict[str, _Deleting] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._deleting)

    def keys(self) -> list[str]:
        """The keys of the live entries (those older than ``ttl`` are let go)."""
        with self._lock:
            _drop_expired(self._deleting, self.clock() - self.ttl)
            return list(self._deleting)

    def deleting(self, key: str, uid: str = "") -> None:
        with self._lock:
            _put_newest(self._deleting, key, _Deleting(uid, self.clock()), self.limit)

    def deleted(self, key: str, uid: str, *, gone: bool) -> None:
        """The answer: the object's uid (if it told one) and whether it is gone already (not
        held by finalizers or a grace period). Notes the entry if ``deleting`` did not."""
        with self._lock:
            entry = self._deleting.get(key)
            if entry is None or (uid and entry.uid and entry.uid != uid):
                entry = _Deleting(uid, self.clock())
                _put_newest(self._deleting, key, entry, self.limit)
            entry.uid = entry.uid or uid
            entry.gone = gone

    def failed(self, key: str) -> None:
        with self._lock:
            self._deleting.pop(key, None)

    def _entry(self, obj: Object) -> _Deleting | None:
        """The live entry that matches ``obj``'s uid; the caller holds the lock."""
        key = object_key(obj)
        entry = self._deleting.get(key)
        if entry is None:
            return None
        if self.clock() - entry.at > self.ttl:
            del self._deleting[key]
            return None
        uid = _uid(obj)
        return entry if uid and entry.uid in (uid, "") else None

    def caused(self, obj: Object) -> bool:
        """Whether this delete event is of an object this controller deleted."""
        with self._lock:
            entry = self._entry(obj)
            if entry is None:
                return False
            entry.uid = _uid(obj)
            return True

    def hides(self, obj: Object) -> bool:
        """Whether ``obj`` (a cached copy) is one this controller deleted for good."""
        with self._lock:
            entry = self._entry(obj)
            return entry is not None and entry.gone and entry.uid == _uid(obj)


def _kind_key(kind: Kind) -> tuple[str, str]:
    return (kind.plural, kind.group)


def _gone_by(answer: Object) -> bool:
    """Whether an object in a write's answer no longer exists: it was being deleted, and its last
    finalizer is off (the server removes it then; a pod in its grace period is still there)."""
    metadata = answer.get("metadata") or {}
    return (
        answer.get("kind") != "Status"
        and bool(metadata.get("deletionTimestamp"))
        and not metadata.get("finalizers")
        and not metadata.get("deletionGracePeriodSeconds")
    )


def _stored_form(answer: Object) -> Object:
    """A copy of an answer as an informer keeps it (callers may change theirs; no managedFields)."""
    kept = copy.deepcopy(answer)
    (kept.get("metadata") or {}).pop("managedFields", None)
    return kept


class OwnWrites:
    """What one controller wrote and deleted, per kind (see the module docstring). Thread-safe."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._writes: dict[tuple[str, str], RecentWrites] = {}
        self._deletes: dict[tuple[str, str], RecentDeletes] = {}
        self._lock = threading.Lock()

    def writes(self, kind: Kind) -> RecentWrites:
        key = _kind_key(kind)
        table = self._writes.get(key)
        if table is None:
            with self._lock:
                table = self._writes.setdefault(key, RecentWrites(clock=self.clock))
        return table

    def deletes(self, kind: Kind) -> RecentDeletes:
        key = _kind_key(kind)
        deletes = self._deletes.get(key)
        if deletes is None:
            with self._lock:
                deletes = self._deletes.setdefault(key, RecentDeletes(clock=self.clock))
        return deletes

    def pending(self, kind: Kind) -> set[str]:
        """The keys of ``kind`` whose reads this record may change (none: read the cache as is)."""
        key = _kind_key(kind)
        table, deletes = self._writes.get(key), self._deletes.get(key)
        return {*(table.pending_keys() if table else ()), *(deletes.keys() if deletes else ())}

    def has_writes(self, kind: Kind) -> bool:
        """Whether anything of ``kind`` is kept (reads skip the overlay when nothing is)."""
        key = _kind_key(kind)
        table, deletes = self._writes.get(key), self._deletes.get(key)
        return bool(table) or bool(deletes)

    # ---- the client's hooks (``client.WriteRecorder``) -------------------------------------
    def wrote(self, kind: Kind, answer: Object) -> None:
        """The answer to a create, update or patch."""
        if _gone_by(answer):  # the write took the last finalizer off a deleted object
            self.writes(kind).forget(answer)
            self.deletes(kind).deleted(object_key(answer), _uid(answer), gone=True)
            return
        self.writes(kind).remember(_stored_form(answer))

    def deleting(self, kind: Kind, key: str, uid: str) -> None:
        self.deletes(kind).deleting(key, uid)

    def deleted(self, kind: Kind, key: str, answer: Object) -> None:
        """The answer to a delete: the object while finalizers or a grace period hold it, else a
        Status (or the object as it was) naming its uid."""
        metadata = answer.get("metadata") or {}
        if answer.get("kind") != "Status" and metadata.get("deletionTimestamp") and not _gone_by(answer):
            self.writes(kind).remember(_stored_form(answer))
            self.deletes(kind).deleted(key, _uid(answer), gone=False)
            return
        uid = _uid(answer) or str((answer.get("details") or {}).get("uid") or "")
        self.writes(kind).forget_key(key)
        self.deletes(kind).deleted(key, uid, gone=True)

    def delete_failed(self, kind: Kind, key: str) -> None:
        self.deletes(kind).failed(key)

    # ---- the cache view's reads ------------------------------------------------------------
    def newer(self, kind: Kind, cached: Object) -> Object | None:
        """The object to read for ``cached``: this controller's later write of it, or
        ``cached`` itself, or None when this controller deleted it for good."""
        if self.deletes(kind).hides(cached):
            return None
        return self.writes(kind).newer(cached)
