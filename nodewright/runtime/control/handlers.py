"""Handlers: turn a watched object's events into reconcile requests (``Request``s, or the keys a
controller declares).

Owns the ``Handler`` protocol and its three common forms: ``enqueue_for_object`` (the object's
own namespace/name), ``enqueue_owner(kind)`` (the controlling owner of that kind, read from
``metadata.ownerReferences``) and ``enqueue_mapped(map_function)`` (any function from an object
to a list of requests). The controller runs them after its predicates and adds the requests to
its work queue. Pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from nodewright.runtime.control.reconcile import K, Request
from nodewright.runtime.kube.kinds import Kind

__all__ = [
    "Handler",
    "MapFunction",
    "enqueue_for_object",
    "enqueue_mapped",
    "enqueue_owner",
    "request_for",
]

Object = dict[str, Any]
MapFunction = Callable[[Object], Iterable[K]]
_K_co = TypeVar("_K_co", bound=Hashable, covariant=True)


class Handler(Protocol[_K_co]):
    """Which requests an event on a watched object produces."""

    def create(self, obj: Object) -> Iterable[_K_co]: ...

    def update(self, old: Object, new: Object) -> Iterable[_K_co]: ...

    def delete(self, obj: Object) -> Iterable[_K_co]: ...


def request_for(obj: Object) -> Request:
    """The request naming the object itself."""
    metadata = obj.get("metadata") or {}
    return Request(metadata.get("namespace") or "", metadata.get("name") or "")


@dataclass(frozen=True, slots=True)
class MapHandler(Generic[K]):
    """A handler made of one map function; updates map the new object, and the old one too
    when ``map_old_on_update`` (so a request moved away from still sees the change)."""

    map_function: MapFunction[K]
    map_old_on_update: bool = True

    def create(self, obj: Object) -> Iterable[K]:
        return list(self.map_function(obj))

    def update(self, old: Object, new: Object) -> Iterable[K]:
        requests = list(self.map_function(new))
        if self.map_old_on_update:
            requests.extend(r for r in self.map_function(old) if r not in requests)
        return requests

    def delete(self, obj: Object) -> Iterable[K]:
        return list(self.map_function(obj))


def enqueue_for_object() -> Handler[Request]:
    """Reconcile the object that changed (what ``for_`` uses)."""
    return MapHandler(lambda obj: [request_for(obj)], map_old_on_update=False)


def enqueue_owner(owner: Kind, *, only_controller: bool = True) -> Handler[Request]:
    """Reconcile the owner of kind ``owner`` named in the object's ownerReferences.

    Matches on API group and kind (any version), and by default only the reference with
    ``controller: true``, as ``owns`` in the builder does.
    """

    def owners(obj: Object) -> list[Request]:
        metadata = obj.get("metadata") or {}
        namespace = (metadata.get("namespace") or "") if owner.namespaced else ""
        requests: list[Request] = []
        for reference in metadata.get("ownerReferences") or []:
            if reference.get("kind") != owner.kind:
                continue
            if str(reference.get("apiVersion", "")).rpartition("/")[0] != owner.group:
                continue
            if only_controller and not reference.get("controller"):
                continue
            requests.append(Request(namespace, reference.get("name", "")))
        return requests

    return MapHandler(owners)


def enqueue_mapped(map_function: MapFunction[K]) -> Handler[K]:
    """Reconcile whatever ``map_function(obj)`` names (for ``watches``)."""
    return MapHandler(map_function)
