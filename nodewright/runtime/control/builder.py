"""The fluent builder that wires a controller into a manager.

Owns ``Builder``: ``manager.controller("nodeimage").for_(NODE_IMAGE).owns(PENDING_NODE)
.watches(NODE, map_function, predicate=ready_changed).with_options(max_concurrent_reconciles=4)
.complete(reconciler)``. ``for_`` reconciles the object itself, ``owns`` reconciles the
controlling owner of a dependent object, ``watches`` reconciles whatever a map function names.
A controller whose unit of work is not one object (a scale set, a node pool) has no ``for_``:
``manager.controller("identity").watches(POD, pods_to_targets).complete(reconciler)``, as
controller-runtime's ``Named()`` without ``For()``. ``watches_source(source)`` adds a
source that is not an informer (``sources.PollingSource``). ``with_options(batch_window=...)`` makes the
queue wait for a burst of events on one key to go quiet before the key is reconciled once.
Informers come from the manager's shared cache; the finished ``Controller`` is handed to the
manager, which starts it while leading. A ``max_concurrent_reconciles`` set for this name in the
manager's config wins over the one given in code.

Each builder holds its controller's own writes (``OwnWrites``, ``recent_writes.py``): the
reconciler writes through ``builder.client`` and reads through ``builder.cache`` (a
``CacheView``), and so reads its own writes while the watch is behind. ``ignore_own_deletes()``
drops the delete events of objects that client deleted: the pass that deleted one has already
decided without it.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from nodewright.runtime.control.controller import Controller
from nodewright.runtime.control.handlers import (
    Handler,
    MapFunction,
    enqueue_for_object,
    enqueue_mapped,
    enqueue_owner,
)
from nodewright.runtime.control.predicates import Predicate, predicate
from nodewright.runtime.control.ratelimit import RateLimiter
from nodewright.runtime.control.reconcile import K, Reconciler, ReconcilerFunc, Request
from nodewright.runtime.control.sources import Source
from nodewright.runtime.control.workqueue import BatchWindow
from nodewright.runtime.informers.cache_view import CacheView
from nodewright.runtime.informers.recent_writes import OwnWrites, RecentDeletes
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind

if TYPE_CHECKING:
    from nodewright.runtime.process.manager import Manager

__all__ = ["Builder"]


@dataclass(frozen=True, slots=True)
class _WatchSpec:
    kind: Kind
    handler: Handler[Any] | None  # None: the owner handler of the for_ kind, resolved in complete
    predicates: tuple[Predicate, ...]
    namespace: str | None
    label_selector: str | None


class Builder(Generic[K]):
    """Collects a controller's watches and options; ``complete`` builds and registers it. ``K`` is
    the controller's request key type: ``Request`` for ``for_``/``owns``, or what the map functions
    of ``watches`` return (``manager.controller(name, key_type)``)."""

    def __init__(self, manager: Manager, name: str, key_type: type[K]) -> None:
        self._manager = manager
        self._name = name
        self._key_type = key_type
        self._for: _WatchSpec | None = None
        self._watches: list[_WatchSpec] = []
        self._sources: list[Source[K]] = []
        self._max_concurrent_reconciles = 1
        self._rate_limiter: RateLimiter | None = None
        self._batch_window: BatchWindow | None = None
        self._ignore_own_deletes = False
        self.own_writes = OwnWrites()
        """What this controller wrote and deleted through ``client``, until its cache shows it."""
        self.client: Client = manager.client.with_own_writes(self.own_writes)
        """The controller's client: the manager's (fenced), recording each write's answer."""
        self.cache = CacheView(manager.cache, self.own_writes)
        """The controller's cache: the shared one, read with its own writes laid over."""

    def for_(
        self: Builder[Request],
        kind: Kind,
        *,
        predicate: Predicate | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Builder[Request]:
        """Reconcile objects of ``kind`` themselves (once per controller; ``Request`` keys)."""
        self._needs_requests("for_")
        if self._for is not None:
            raise ValueError(f"controller {self._name!r}: for_ already called")
        self._for = _WatchSpec(kind, enqueue_for_object(), _tuple(predicate), namespace, label_selector)
        return self

    def owns(
        self: Builder[Request],
        kind: Kind,
        *,
        predicate: Predicate | None = None,
        namespace: str | None = None,
    ) -> Builder[Request]:
        """Reconcile the ``for_`` object that controls (ownerReference) a changed ``kind``."""
        if self._for is None:
            raise ValueError(f"controller {self._name!r}: owns() needs for_(kind) first")
        self._watches.append(_WatchSpec(kind, None, _tuple(predicate), namespace, None))
        return self

    def watches(
        self,
        kind: Kind,
        map_function: MapFunction[K] | Handler[K],
        *,
        predicate: Predicate | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Builder[K]:
        """Reconcile the requests that ``map_function(obj)`` returns for a changed ``kind``."""
        handler: Handler[K] = (
            typing.cast(Handler[K], map_function)
            if _is_handler(map_function)
            else enqueue_mapped(typing.cast(MapFunction[K], map_function))
        )
        self._watches.append(_WatchSpec(kind, handler, _tuple(predicate), namespace, label_selector))
        return self

    def watches_source(self, source: Source[K]) -> Builder[K]:
        """Reconcile the requests a non-informer source adds (started and stopped with the controller)."""
        self._sources.append(source)
        return self

    def with_options(
        self,
        *,
        max_concurrent_reconciles: int | None = None,
        rate_limiter: RateLimiter | None = None,
        batch_window: BatchWindow | None = None,
    ) -> Builder[K]:
        """Worker count, retry rate limiter and the queue's batching window (see ``WorkQueue``)."""
        if max_concurrent_reconciles is not None:
            self._max_concurrent_reconciles = max_concurrent_reconciles
        if rate_limiter is not None:
            self._rate_limiter = rate_limiter
        if batch_window is not None:
            self._batch_window = batch_window
        return self

    def ignore_own_deletes(self) -> Builder[K]:
        """Drop the delete events of objects this controller's ``client`` deleted (or whose last
        finalizer it removed after someone else's delete): they wake no pass. Other deletes of
        the watched kinds still do."""
        self._ignore_own_deletes = True
        return self

    def complete(
        self, reconciler: Reconciler[K] | ReconcilerFunc[K] | Callable[..., object]
    ) -> Controller[K]:
        """Build the controller, attach its watches to shared informers, register it."""
        if self._for is None and not self._watches and not self._sources:
            raise ValueError(f"controller {self._name!r}: call for_(kind) or watches(...) before complete()")
        configured = self._manager.reconciler_config(self._name)
        workers = self._max_concurrent_reconciles
        if configured is not None and configured.max_concurrent_reconciles is not None:
            workers = configured.max_concurrent_reconciles
        controller: Controller[K] = Controller(
            self._name,
            reconciler,  # type: ignore[arg-type]
            max_concurrent_reconciles=workers,
            rate_limiter=self._rate_limiter,
            batch_window=self._batch_window,
            metrics=self._manager.metrics,
        )
        specs = self._watches if self._for is None else [self._for, *self._watches]
        for spec in specs:
            handler = spec.handler
            if handler is None:  # owns(): only reachable after for_ (Request keys), checked there
                assert self._for is not None
                handler = enqueue_owner(self._for.kind)
            informer = self._manager.cache.informer(
                spec.kind, namespace=spec.namespace, label_selector=spec.label_selector
            )
            predicates = spec.predicates
            if self._ignore_own_deletes:
                predicates = (*predicates, _not_deleted_by(self.own_writes.deletes(spec.kind)))
            controller.watch(informer, typing.cast("Handler[K]", handler), predicates)
        for source in self._sources:
            controller.add_source(source)
        self._manager.add_controller(controller)
        return controller

    def _needs_requests(self, method: str) -> None:
        if self._key_type is not Request:
            raise ValueError(
                f"controller {self._name!r}: {method} needs Request keys, not {self._key_type.__name__}"
            )


def _is_handler(value: object) -> bool:
    return all(callable(getattr(value, method, None)) for method in ("create", "update", "delete"))


def _tuple(given: Predicate | None) -> tuple[Predicate, ...]:
    return () if given is None else (given,)


def _not_deleted_by(deletes: RecentDeletes) -> Predicate:
    return predicate(delete=lambda obj: not deletes.caused(obj))
