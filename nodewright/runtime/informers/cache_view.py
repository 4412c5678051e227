"""One controller's view of the shared cache: its own writes laid over the informers' stores.

Owns ``CacheView`` (``get``, ``list`` and ``informer`` as on ``Cache``), ``InformerView`` (a
shared informer whose ``store`` is read through the view) and ``StoreView``. The builder gives
each controller one (``builder.cache``) over the ``OwnWrites`` its client records into
(``builder.client``): after a create, update, patch or delete through that client, the
controller's reads return the server's answer instead of the informer's older copy until the
watch delivers that version or a later one (or 30 s pass), and leave out an object it deleted for
good. They never bring back an object the cache does not hold, so an object someone else
deleted is never resurrected, and a newer version written by someone else wins. An indexed read
places a written object by its written fields. Other controllers' reads are not affected.

Objects returned are shared (the stores' or the record's): never mutate them (deep-copy first).
"""

from __future__ import annotations

import builtins
from typing import Any

from nodewright.runtime.informers.cache import Cache, StoreReader, get_cached, list_cached
from nodewright.runtime.informers.informer import EventHandler, IndexFunc, Informer, Store, object_key
from nodewright.runtime.informers.recent_writes import OwnWrites
from nodewright.runtime.kube.kinds import Kind

__all__ = ["CacheView", "InformerView", "StoreView"]

Object = dict[str, Any]


class StoreView:
    """A store's reads with one controller's own writes laid over (see the module docstring)."""

    def __init__(self, store: Store, kind: Kind, own: OwnWrites) -> None:
        self.store = store
        self.kind = kind
        self.own = own

    def get(self, key: str) -> Object | None:
        obj = self.store.get(key)
        if obj is None or not self.own.has_writes(self.kind):
            return obj
        return self.own.newer(self.kind, obj)

    def list(self) -> list[Object]:
        pending = self.own.pending(self.kind) if self.own.has_writes(self.kind) else None
        if not pending:
            return self.store.list()
        items = self.store.items()
        found = [obj for key, obj in items if key not in pending]
        for key, obj in items:  # the few pending ones, after the others
            if key in pending and (newer := self.own.newer(self.kind, obj)) is not None:
                found.append(newer)
        return found

    def by_index(self, index_name: str, value: str) -> builtins.list[Object]:
        """The objects whose ``index_name`` is ``value`` as this controller last wrote them: one it
        wrote since the cache's copy is listed under the values of its written version."""
        indexed = self.store.by_index(index_name, value)
        pending = self.own.pending(self.kind) if self.own.has_writes(self.kind) else None
        if not pending:
            return indexed
        function = self.store.index_function(index_name)
        found: builtins.list[Object] = []
        seen: set[str] = set()
        for obj in indexed:
            key = object_key(obj)
            seen.add(key)
            newer = obj if key not in pending else self.own.newer(self.kind, obj)
            if newer is not None and (newer is obj or value in _index_values(function, newer)):
                found.append(newer)
        for key, written in self.own.writes(self.kind).pending():  # written into this index value
            if key in seen or value not in _index_values(function, written):
                continue
            cached = self.store.get(key)
            newer = None if cached is None else self.own.newer(self.kind, cached)
            if newer is not None and newer is not cached and value in _index_values(function, newer):
                found.append(newer)
        return found

    def index_names(self) -> builtins.list[str]:
        return self.store.index_names()


def _index_values(function: IndexFunc, obj: Object) -> list[str]:
    try:
        return list(function(obj))
    except Exception:  # the store logs a failing index function; here the object is left out
        return []


class InformerView:
    """A shared informer as one controller uses it: reads through ``store`` (a ``StoreView``);
    indexes and event handlers go to the shared informer itself."""

    def __init__(self, informer: Informer, own: OwnWrites) -> None:
        self.informer = informer
        self.kind = informer.kind
        self.store = StoreView(informer.store, informer.kind, own)

    def ensure_indexer(self, name: str, function: IndexFunc) -> None:
        """``Informer.ensure_indexer``: idempotent, the one way to add an index."""
        self.informer.ensure_indexer(name, function)

    def add_event_handler(self, handler: EventHandler) -> None:
        self.informer.add_event_handler(handler)

    def has_synced(self) -> bool:
        return self.informer.has_synced()

    def wait_for_sync(self, timeout: float) -> bool:
        return self.informer.wait_for_sync(timeout)


class CacheView:
    """The shared ``Cache`` as one controller reads it (see the module docstring)."""

    def __init__(self, cache: Cache, own: OwnWrites) -> None:
        self.cache = cache
        self.own = own

    def informer(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> InformerView:
        """The shared informer for this scope (``Cache.informer``), read through this view."""
        shared = self.cache.informer(
            kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )
        return InformerView(shared, self.own)

    def store(self, informer: Informer | Store, kind: Kind) -> StoreReader:
        """A store (an informer's, or one held by a test) read through this view."""
        store = informer.store if isinstance(informer, Informer) else informer
        return StoreView(store, kind, self.own)

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Object:
        """``Cache.get`` through this view; raises ``errors.NotFound``."""
        return get_cached(self._reads(kind, namespace), kind, name, namespace)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        index: tuple[str, str] | None = None,
    ) -> builtins.list[Object]:
        """``Cache.list`` through this view."""
        store = self._reads(kind, namespace)
        return list_cached(store, kind, namespace, label_selector=label_selector, index=index)

    def _reads(self, kind: Kind, namespace: str | None) -> StoreView:
        return StoreView(self.cache.reading_informer(kind, namespace).store, kind, self.own)
