"""The shared cache: one informer per watched (kind, namespace, selectors), shared by every
controller, and cached reads served from them.

Owns ``Cache``, the built-in ``namespace`` index, ``field_indexer`` for indexes on a dotted
field path such as ``spec.nodeName``, the ``StoreReader`` protocol with the cached ``get`` and
``list`` over any reader (``get_cached``, ``list_cached``: a controller's cache view, in
``cache_view.py``, reads through the same), and a small label-selector matcher for cached lists
(which also refuses keys and values no label can have, through ``labels``).
The manager creates one cache and starts it before the controllers; controllers ask it for
informers (to register event handlers) and read through it. Writes go to the ``Client``.

Objects returned are shared with the informers' stores: never mutate them (deep-copy first).
"""

from __future__ import annotations

import builtins
import re
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

from nodewright.runtime.informers.informer import IndexFunc, Informer, Transform, default_transform
from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.kube.labels import label_key_problem, label_value_problem, shown
from nodewright.runtime.observe.logs import get_logger

__all__ = [
    "NAMESPACE_INDEX",
    "Cache",
    "StoreReader",
    "field_indexer",
    "get_cached",
    "label_selector_matcher",
    "list_cached",
    "namespace_index",
]

log = get_logger(__name__)

NAMESPACE_INDEX = "namespace"

InformerKey = tuple[Kind, str | None, str | None, str | None]


def namespace_index(obj: dict[str, Any]) -> list[str]:
    """The built-in index: an object's namespace ("" for cluster-scoped objects)."""
    return [str((obj.get("metadata") or {}).get("namespace") or "")]


def field_indexer(path: str) -> IndexFunc:
    """An index function over a dotted field path: ``field_indexer("spec.nodeName")``.

    Objects whose field is missing or empty are not indexed; a list value indexes each item.
    """
    parts = path.split(".")

    def index(obj: dict[str, Any]) -> list[str]:
        value: Any = obj
        for part in parts:
            if not isinstance(value, dict):
                return []
            value = value.get(part)
        if value is None or value == "":
            return []
        if isinstance(value, list):
            return [str(item) for item in value]
        return [str(value)]

    index.__qualname__ = f"field_indexer({path!r})"
    return index


_REQUIREMENT = re.compile(
    r"^\s*(?P<not>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|!=|=|\s+in\s+|\s+notin\s+)\s*(?P<value>\([^)]*\)|[A-Za-z0-9_.-]*))?\s*$"
)


def _split_requirements(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def _check_labels(text: str, key: str, values: Iterable[str]) -> None:
    """Raise ValueError when a requirement names a key or value no label can have (too long,
    non-ASCII): the API server refuses such a selector, and it could never match."""
    requirement = f"label selector requirement {shown(text.strip())}"
    problem = label_key_problem(key)
    if problem is not None:
        raise ValueError(f"{requirement}: key {shown(key)} {problem}")
    for value in values:
        problem = label_value_problem(value)
        if problem is not None:
            raise ValueError(f"{requirement}: value {shown(value)} {problem}")


def label_selector_matcher(selector: str | None) -> Any:
    """A predicate ``labels -> bool`` for a label selector string (=, ==, !=, in, notin,
    exists, !exists). Raises ValueError for a selector it cannot parse or whose keys and values
    no label can have (longer than Kubernetes allows, or not ASCII)."""
    requirements: list[tuple[str, str, set[str]]] = []
    for text in _split_requirements(selector or ""):
        match = _REQUIREMENT.match(text)
        if not match:
            raise ValueError(f"cannot parse label selector requirement {shown(text)}")
        key, raw_op, raw_value = match["key"], (match["op"] or "").strip(), match["value"] or ""
        if match["not"]:
            if raw_op:
                raise ValueError(f"cannot parse label selector requirement {text!r}")
            requirements.append((key, "!exists", set()))
        elif not raw_op:
            requirements.append((key, "exists", set()))
        elif raw_op in ("in", "notin"):
            values = {value.strip() for value in raw_value.strip("()").split(",")}
            requirements.append((key, raw_op, values))
        else:
            requirements.append((key, "!=" if raw_op == "!=" else "=", {raw_value}))
        _check_labels(text, key, requirements[-1][2])

    def matches(labels: dict[str, str]) -> bool:
        for key, op, values in requirements:
            present = key in labels
            value = labels.get(key)
            if op == "exists" and not present:
                return False
            if op == "!exists" and present:
                return False
            if op in ("=", "in") and value not in values:
                return False
            if op in ("!=", "notin") and present and value in values:
                return False
        return True

    return matches


class Cache:
    """Informers shared by (kind, namespace, label selector, field selector), and reads from
    them.

    ``informer()`` may be called before or after ``start()``; informers created after start
    start at once. ``get`` and ``list`` read from the informer for the kind (cluster-wide, or
    the one for the namespace asked) and create it, and wait for its sync, when none exists.
    """

    def __init__(
        self,
        client: Client,
        *,
        resync_period: float | None = None,
        transform: Transform | None = default_transform,
        sync_timeout: float = 120.0,
        compressed_kinds: Iterable[str] = (),
    ) -> None:
        self.client = client
        self.resync_period = resync_period
        self.transform = transform
        self.compressed_kinds = frozenset(compressed_kinds)
        """Kinds (``Kind.kind``, such as "Pod") whose informers keep objects compressed."""
        self.sync_timeout = sync_timeout
        self._lock = threading.RLock()
        self._informers: dict[InformerKey, Informer] = {}
        self._started = False

    def informer(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer:
        """The shared informer for this scope, created (and started if the cache runs) on
        first use. It carries the ``namespace`` index."""
        key: InformerKey = (
            kind,
            namespace if kind.namespaced else None,
            label_selector or None,
            field_selector or None,
        )
        with self._lock:
            informer = self._informers.get(key)
            if informer is None:
                informer = Informer(
                    self.client,
                    kind,
                    namespace=key[1],
                    label_selector=key[2],
                    field_selector=key[3],
                    transform=self.transform,
                    compress=kind.kind in self.compressed_kinds,
                    resync_period=self.resync_period,
                )
                informer.ensure_indexer(NAMESPACE_INDEX, namespace_index)
                self._informers[key] = informer
                log.info(
                    "Created informer",
                    kind=kind.kind,
                    namespace=key[1],
                    label_selector=key[2],
                    field_selector=key[3],
                )
                if self._started:
                    informer.start()
            return informer

    def informers(self) -> list[Informer]:
        with self._lock:
            return list(self._informers.values())

    def start(self) -> None:
        """Start every informer created so far; later ones start as they are created."""
        with self._lock:
            self._started = True
            for informer in self._informers.values():
                informer.start()

    def stop(self) -> None:
        with self._lock:
            self._started = False
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop()

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers())

    def wait_for_sync(self, timeout: float) -> bool:
        """Wait until every informer has synced; False when ``timeout`` (seconds) passes first."""
        deadline = time.monotonic() + timeout
        for informer in self.informers():
            if not informer.wait_for_sync(max(0.0, deadline - time.monotonic())):
                return False
        return True

    # ---- cached reads ---------------------------------------------------------------------
    def reading_informer(self, kind: Kind, namespace: str | None) -> Informer:
        """The synced informer ``get`` and ``list`` read ``kind`` from: the cluster-wide one, or
        the one for ``namespace``; created (and waited for) when none exists."""
        with self._lock:
            informer = self._informers.get((kind, None, None, None))
            if informer is None and namespace and kind.namespaced:
                informer = self._informers.get((kind, namespace, None, None))
            if informer is None:
                informer = self.informer(kind)
                if not self._started:
                    informer.start()
        if not informer.wait_for_sync(self.sync_timeout):
            raise errors.ServerTimeout(f"cache for {kind} did not sync in {self.sync_timeout} s")
        return informer

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The cached object; raises ``errors.NotFound`` when the cache does not hold it."""
        return get_cached(self.reading_informer(kind, namespace).store, kind, name, namespace)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        index: tuple[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Cached objects of ``kind``, narrowed by namespace, label selector and an index
        ``(index_name, value)`` (for example ``("spec.nodeName", "node-1")``)."""
        store = self.reading_informer(kind, namespace).store
        return list_cached(store, kind, namespace, label_selector=label_selector, index=index)


class StoreReader(Protocol):
    """The reads of an informer's ``Store`` (a controller's ``StoreView`` has the same)."""

    def get(self, key: str) -> dict[str, Any] | None: ...
    def list(self) -> list[dict[str, Any]]: ...
    def by_index(self, index_name: str, value: str) -> builtins.list[dict[str, Any]]: ...
    def index_names(self) -> builtins.list[str]: ...


def get_cached(store: StoreReader, kind: Kind, name: str, namespace: str | None) -> dict[str, Any]:
    """The object ``store`` holds; raises ``errors.NotFound`` when it holds none."""
    key = f"{namespace}/{name}" if namespace and kind.namespaced else name
    obj = store.get(key)
    if obj is None:
        raise errors.NotFound(
            f'{kind.plural} "{name}" not found in cache',
            reason="NotFound",
            status={"details": {"name": name, "kind": kind.plural}},
        )
    return obj


def list_cached(
    store: StoreReader,
    kind: Kind,
    namespace: str | None,
    *,
    label_selector: str | None = None,
    index: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The objects of ``store`` narrowed as ``Cache.list`` says."""
    if index is not None:
        objects = store.by_index(*index)
        if namespace and kind.namespaced:
            objects = [o for o in objects if o["metadata"].get("namespace") == namespace]
    elif namespace and kind.namespaced:
        objects = store.by_index(NAMESPACE_INDEX, namespace)
    else:
        objects = store.list()
    if label_selector:
        matches = label_selector_matcher(label_selector)
        objects = [o for o in objects if matches(o["metadata"].get("labels") or {})]
    return objects
