"""Informers: a reflector that mirrors one resource type into a thread-safe, indexed store and
tells event handlers about every change.

Owns ``Informer`` (one reflector thread per watched kind and selector), ``Store`` (objects by
key, plus indexes), the ``EventHandler`` protocol and ``object_key``; what the store keeps of an
object (transforms, the compressed encoding) is ``transforms.py``'s.
The shared cache (``cache.py``) creates and shares informers; controllers register handlers
that turn events into work-queue keys.

The reflector lists (paginated), then watches from the list's resourceVersion with bookmarks
and a randomised server timeout, resumes from the last resourceVersion it saw whenever a
stream ends or breaks, backs off 0.8 s to 30 s on errors, and relists when the server says the
resourceVersion is gone (410 as a response or as an ERROR event). A relist reconciles the store
with the fresh list: objects that vanished meanwhile are reported through ``on_delete`` (with
their last known state), changed ones through ``on_update``. It does not use pykube-ng's
``WatchQuery``, which neither resumes nor reports ERROR events and dies on a 10 s read timeout.

Objects handed to handlers and returned by the store are shared, not copied: callers must
never mutate them (``copy.deepcopy`` first). The default transform drops
``metadata.managedFields`` and interns keys and short strings to keep the store lean.

Side effects: a background thread per informer, network I/O through the client.
"""

from __future__ import annotations

import builtins
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from nodewright.runtime.informers.transforms import (
    CompressedJson,
    compact_object,
    default_transform,
    drop_managed_fields,
)
from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client, WatchEvent, WatchStream, collector_paused
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.observe.logs import get_logger

__all__ = [
    "CompressedJson",
    "EventHandler",
    "IndexFunc",
    "Informer",
    "ReflectorStats",
    "Store",
    "Transform",
    "compact_object",
    "default_transform",
    "drop_managed_fields",
    "object_key",
]

log = get_logger(__name__)

IndexFunc = Callable[[dict[str, Any]], list[str]]
Transform = Callable[[dict[str, Any]], dict[str, Any]]

WATCH_TIMEOUT_RANGE: tuple[int, int] = (300, 600)
"""Server-side watch timeout, seconds, drawn at random per watch (client-go: 5 to 10 minutes)."""
INITIAL_BACKOFF = 0.8
MAX_BACKOFF = 30.0


class EventHandler(Protocol):
    """Receives an informer's events, on the informer's thread, in order.

    An exception raised here is logged and does not stop the informer. The objects are shared
    with the store: do not mutate them.
    """

    def on_add(self, obj: dict[str, Any]) -> None: ...
    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None: ...
    def on_delete(self, obj: dict[str, Any]) -> None: ...


def object_key(obj: dict[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` otherwise (as ``Request.key``)."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = metadata.get("name", "")
    return f"{namespace}/{name}" if namespace else str(name)


def _resource_version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class Store:
    """Objects by key with secondary indexes; thread-safe.

    Plain stores keep the objects themselves and reads return them shared (never mutate them).
    A store with a ``codec`` (``CompressedJson``) keeps an encoded form and decodes on every
    read. Only the owning informer writes to it; writes take and return decoded objects, and
    ``encode``/``replace`` let the informer hand over a whole list already encoded.
    """

    def __init__(self, codec: CompressedJson | None = None) -> None:
        self._lock = threading.RLock()
        self._codec = codec
        self._items: dict[str, Any] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}

    @property
    def compressed(self) -> bool:
        return self._codec is not None

    def encode(self, obj: dict[str, Any]) -> Any:
        """The stored form of ``obj`` (itself for a plain store)."""
        return obj if self._codec is None else self._codec.encode(obj)

    def decode(self, stored: Any) -> dict[str, Any]:
        """The object of a stored form."""
        if self._codec is None:
            result: dict[str, Any] = stored
            return result
        return self._codec.decode(stored)

    def unchanged(self, old: Any, new: Any) -> bool:
        """Whether two stored forms hold the same version of an object."""
        if self._codec is None:
            return bool(_resource_version(old) == _resource_version(new))
        return bool(old == new)

    # ---- reads ----------------------------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            stored = self._items.get(key)
        return None if stored is None else self.decode(stored)

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            stored = list(self._items.values())
        return stored if self._codec is None else [self.decode(item) for item in stored]

    def stored(self) -> builtins.list[Any]:
        """The stored forms themselves (objects, or encoded bytes): for memory accounting."""
        with self._lock:
            return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        with self._lock:
            return list(self._items)

    def items(self) -> builtins.list[tuple[str, dict[str, Any]]]:
        with self._lock:
            stored = list(self._items.items())
        return stored if self._codec is None else [(key, self.decode(item)) for key, item in stored]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def by_index(self, index_name: str, value: str) -> builtins.list[dict[str, Any]]:
        """Objects whose ``index_name`` function returned ``value``. Raises KeyError for an
        unknown index."""
        stored = [item for _, item in self.by_index_stored(index_name, value)]
        return stored if self._codec is None else [self.decode(item) for item in stored]

    def by_index_stored(self, index_name: str, value: str) -> builtins.list[tuple[str, Any]]:
        """``by_index`` without decoding: (key, stored form) pairs. A stored form is replaced,
        never changed, when its object changes, so a caller may keep what it derived from one
        for as long as the store hands back the same form (``is``), and decode only new ones."""
        with self._lock:
            if index_name not in self._indexers:
                raise KeyError(f"no index named {index_name!r}")
            keys = self._indices[index_name].get(value, ())
            return [(key, self._items[key]) for key in keys]

    def index_names(self) -> builtins.list[str]:
        with self._lock:
            return list(self._indexers)

    def index_function(self, index_name: str) -> IndexFunc:
        """The function of an index (KeyError for an unknown one)."""
        with self._lock:
            return self._indexers[index_name]

    # ---- writes (the informer's) ----------------------------------------------------------
    def _add_indexer(self, name: str, function: IndexFunc) -> None:
        """Add an index and build it over the objects already stored."""
        with self._lock:
            if name in self._indexers:
                raise ValueError(f"index {name!r} already exists")
            self._indexers[name] = function
            self._indices[name] = {}
            for key, stored in self._items.items():
                self._index_one(name, function, key, self.decode(stored))

    def ensure_indexer(self, name: str, function: IndexFunc) -> None:
        """Add the index unless it exists already with the same function (the same object, or
        one of the same module and qualified name, as ``field_indexer`` makes them), so that
        every reconciler sharing an informer may ask for the index it reads. Raises ValueError
        when ``name`` is taken by a different function."""
        with self._lock:
            existing = self._indexers.get(name)
            if existing is None:
                self._add_indexer(name, function)
            elif not _same_function(existing, function):
                raise ValueError(f"index {name!r} already exists with another function")

    def put(self, key: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Store ``obj`` under ``key``; returns the object it replaced."""
        stored = self.encode(obj)
        with self._lock:
            old_stored = self._items.get(key)
            old = None if old_stored is None else self.decode(old_stored)
            if old is not None:
                self._unindex(key, old)
            self._items[key] = stored
            for name, function in self._indexers.items():
                self._index_one(name, function, key, obj)
            return old

    def remove(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            old_stored = self._items.pop(key, None)
            old = None if old_stored is None else self.decode(old_stored)
            if old is not None:
                self._unindex(key, old)
            return old

    def replace(self, items: dict[str, Any]) -> dict[str, Any]:
        """Swap in a complete new set of objects, given in stored form (see ``encode``);
        returns the previous set in stored form."""
        with self._lock:
            previous = self._items
            self._items = items
            for name, function in self._indexers.items():
                self._indices[name] = {}
                for key, stored in items.items():
                    self._index_one(name, function, key, self.decode(stored))
            return previous

    def _index_values(self, function: IndexFunc, obj: dict[str, Any]) -> Iterable[str]:
        try:
            return function(obj)
        except Exception:
            log.exception("Index function failed", key=object_key(obj))
            return ()

    def _index_one(self, name: str, function: IndexFunc, key: str, obj: dict[str, Any]) -> None:
        index = self._indices[name]
        for value in self._index_values(function, obj):
            index.setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: dict[str, Any]) -> None:
        for name, function in self._indexers.items():
            index = self._indices[name]
            for value in self._index_values(function, obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]


def _same_function(first: IndexFunc, second: IndexFunc) -> bool:
    """Whether two index functions are the same one (or made alike, by the same factory)."""
    if first is second:
        return True
    names = [(getattr(f, "__module__", None), getattr(f, "__qualname__", None)) for f in (first, second)]
    return names[0] == names[1] and names[0][1] is not None and "<lambda>" not in str(names[0][1])


@dataclass(slots=True)
class ReflectorStats:
    """Counters that describe what the reflector did (for tests, metrics and debugging)."""

    lists: int = 0
    watches: int = 0
    watch_errors: int = 0
    resource_version: str = ""
    watch_resource_versions: list[str] | None = None


class _Backoff:
    """Exponential backoff with jitter, 0.8 s doubling to 30 s."""

    def __init__(self, initial: float = INITIAL_BACKOFF, maximum: float = MAX_BACKOFF) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay * (1 + random.random() * 0.1)  # noqa: S311 - jitter, not cryptography

    def reset(self) -> None:
        self._next = self.initial


class Informer:
    """Mirrors one kind (optionally one namespace and selectors) into ``store`` and fans out
    events to handlers.

    ``transform`` runs on every object before it is stored (default: ``default_transform``).
    ``resync_period`` (seconds) re-delivers ``on_update(obj, obj)`` for every stored object.
    ``watch_timeout`` is the (min, max) server timeout drawn per watch.
    """

    def __init__(
        self,
        client: Client,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = default_transform,
        compress: bool = False,
        resync_period: float | None = None,
        watch_timeout: tuple[int, int] = WATCH_TIMEOUT_RANGE,
        page_size: int = 500,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.store = Store(CompressedJson() if compress else None)
        self.stats = ReflectorStats(watch_resource_versions=[])
        # Interning is wasted on a compressed store: keep only the managedFields drop.
        self._transform = drop_managed_fields if compress and transform is default_transform else transform
        self._resync_period = resync_period
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._backoff = _Backoff(initial_backoff, max_backoff)
        self._handlers: list[EventHandler] = []
        self._dispatch_lock = threading.RLock()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._threads: list[threading.Thread] = []
        self._started = False
        self._resource_version = ""

    def __repr__(self) -> str:
        scope = f" namespace={self.namespace}" if self.namespace else ""
        return f"<Informer {self.kind}{scope}>"

    # ---- public API -----------------------------------------------------------------------
    def add_event_handler(self, handler: EventHandler) -> None:
        """Register ``handler``. Once the informer has synced, the handler first receives
        ``on_add`` for every stored object, then every later event, in order."""
        with self._dispatch_lock:
            if self._synced.is_set():
                for obj in self.store.list():
                    self._call(handler.on_add, obj)
            self._handlers.append(handler)

    def ensure_indexer(self, name: str, fn: IndexFunc) -> None:
        """Add an index over the store (``fn(obj)`` returns the index values of one object) unless
        the same one exists already: idempotent, and the one way to add an index (see
        ``Store.ensure_indexer``)."""
        self.store.ensure_indexer(name, fn)

    def start(self) -> None:
        """Start the reflector thread (and the resync thread); idempotent."""
        if self._started:
            return
        self._started = True
        thread = threading.Thread(target=self._run, name=f"informer-{self.kind.plural}", daemon=True)
        self._threads.append(thread)
        thread.start()
        if self._resync_period:
            resync = threading.Thread(
                target=self._resync_loop, name=f"resync-{self.kind.plural}", daemon=True
            )
            self._threads.append(resync)
            resync.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the reflector: close the open watch and join the threads."""
        self._stopping.set()
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def is_stopped(self) -> bool:
        """True once started and one of its threads has ended (``stop``, or a crash): its store
        no longer follows the API server."""
        return self._started and any(not thread.is_alive() for thread in self._threads)

    def has_synced(self) -> bool:
        """Whether the first list has been stored and delivered to the handlers."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str:
        """The last resourceVersion the reflector has seen (list, event or bookmark)."""
        return self._resource_version

    # ---- the reflector --------------------------------------------------------------------
    def _run(self) -> None:
        need_list = True
        while not self._stopping.is_set():
            try:
                if need_list:
                    self._list_and_replace()
                    need_list = False
                self._watch()
            except errors.Gone as error:
                log.info(
                    "Relisted after expired resource version",
                    kind=self.kind.kind,
                    resource_version=self._resource_version,
                    reason=error.reason,
                )
                need_list = True
            except errors.ApiError as error:
                if self._stopping.is_set():
                    break
                if errors.is_resource_version_too_large(error):
                    need_list = True
                self.stats.watch_errors += 1
                delay = self._backoff.next_delay()
                log.warning(
                    "Watch failed",
                    kind=self.kind.kind,
                    error=str(error),
                    retry_in=round(delay, 2),
                    relist=need_list,
                )
                self._stopping.wait(delay)
            except Exception:
                if self._stopping.is_set():
                    break
                self.stats.watch_errors += 1
                delay = self._backoff.next_delay()
                log.exception("Reflector failed", kind=self.kind.kind, retry_in=round(delay, 2))
                self._stopping.wait(delay)
        log.debug("Stopped informer", kind=self.kind.kind)

    def _list_and_replace(self) -> None:
        """List everything and make the store equal to it, reporting the differences."""
        try:
            items, resource_version = self._list(self._page_size)
        except errors.Gone:
            # A continue token expired between pages: one unpaginated list instead.
            items, resource_version = self._list(None)
        store = self.store
        with self._dispatch_lock:
            previous = store.replace(items)
            if self._handlers:
                for key, stored in items.items():
                    old = previous.get(key)
                    if old is None:
                        self._dispatch("on_add", store.decode(stored))
                    elif not store.unchanged(old, stored):
                        self._dispatch("on_update", store.decode(old), store.decode(stored))
            for key, old in previous.items():
                if key not in items:
                    self._dispatch("on_delete", store.decode(old))
            self._resource_version = resource_version
            self.stats.resource_version = resource_version
            self.stats.lists += 1
            first = not self._synced.is_set()
            self._synced.set()
        log.info(
            "Listed objects" if first else "Relisted objects",
            kind=self.kind.kind,
            count=len(items),
            resource_version=resource_version,
            added=sum(1 for key in items if key not in previous) if not first else len(items),
            deleted=sum(1 for key in previous if key not in items),
        )
        self._backoff.reset()

    def _list(self, page_size: int | None) -> tuple[dict[str, Any], str]:
        """Every object, in the store's stored form, by key; and the list's resourceVersion."""
        items: dict[str, Any] = {}
        resource_version = ""
        pages = self.client.list_pages(
            self.kind,
            self.namespace,
            self.label_selector,
            self.field_selector,
            limit=page_size or 0,
        )
        while True:
            # The collector stays paused until a compressed store has encoded the page and
            # let its decoded objects go: they are freed by their counts, and no collection
            # walks them (one did as the decode ended, 15 % of a compressed sync).
            with collector_paused():
                page = next(pages, None)
                if page is None:
                    return items, resource_version
                for item in page.items:
                    obj = self._transform(item) if self._transform else item
                    items[object_key(obj)] = self.store.encode(obj)
                page.items.clear()
                resource_version = page.resource_version

    def _watch(self) -> None:
        """One watch from the current resourceVersion until the server ends it (or stop)."""
        low, high = self._watch_timeout
        timeout_seconds = random.randint(low, high)  # noqa: S311 - spreading load, not secrets
        stream = self.client.watch(
            self.kind,
            self.namespace,
            resource_version=self._resource_version,
            timeout_seconds=timeout_seconds,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        with self._stream_lock:
            self._stream = stream
            if self._stopping.is_set():
                stream.close()
        self.stats.watches += 1
        if self.stats.watch_resource_versions is not None:
            self.stats.watch_resource_versions.append(self._resource_version)
        try:
            for event in stream:
                self._backoff.reset()
                if self._stopping.is_set():
                    return
                self._apply(event)
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()

    def _apply(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK":
            self._set_resource_version(_resource_version(event.object))
            return
        obj = self._transform(event.object) if self._transform else event.object
        key = object_key(obj)
        with self._dispatch_lock:
            if event.type in ("ADDED", "MODIFIED"):
                old = self.store.put(key, obj)
                if old is None:
                    self._dispatch("on_add", obj)
                else:
                    self._dispatch("on_update", old, obj)
            elif event.type == "DELETED":
                # The event carries the final state; report it even if we never stored the
                # object (a delete right after a relist races nothing: handlers are idempotent).
                self.store.remove(key)
                self._dispatch("on_delete", obj)
            else:
                log.warning("Ignored unknown watch event", kind=self.kind.kind, type=event.type)
            self._set_resource_version(_resource_version(obj))

    def _set_resource_version(self, resource_version: str) -> None:
        if resource_version:
            self._resource_version = resource_version
            self.stats.resource_version = resource_version

    # ---- fan-out --------------------------------------------------------------------------
    def _dispatch(self, method: str, *objects: dict[str, Any]) -> None:
        for handler in self._handlers:
            self._call(getattr(handler, method), *objects)

    def _call(self, function: Callable[..., None], *objects: dict[str, Any]) -> None:
        try:
            function(*objects)
        except Exception:
            log.exception(
                "Event handler failed",
                kind=self.kind.kind,
                key=object_key(objects[-1]),
                handler=getattr(function, "__qualname__", repr(function)),
            )

    def _resync_loop(self) -> None:
        assert self._resync_period is not None
        while not self._stopping.wait(self._resync_period):
            if not self._synced.is_set():
                continue
            started = time.monotonic()
            with self._dispatch_lock:
                objects = self.store.list()
                for obj in objects:
                    self._dispatch("on_update", obj, obj)
            log.debug(
                "Resynced objects",
                kind=self.kind.kind,
                count=len(objects),
                seconds=round(time.monotonic() - started, 3),
            )
