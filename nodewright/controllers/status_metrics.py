"""The figures ``nodewright status`` shows, as the manager's Prometheus gauges.

Owns ``register_status_metrics(manager)``. At scrape time each gauge reads the manager's informer
caches of NodeImages, NodeNetworkConfigs (with Nodes, for the node pool) and
AzureAssignedIdentities, and computes its figures with the functions ``nodewright status`` uses on
the same objects (``status.node_image_line``, ``status.pool_lines``, ``status.assignment_state``),
so a dashboard panel and the status view cannot disagree about what the CRs say:

- ``nodewright_rollout_nodes{node_image,figure}``: ``up_to_date`` (status.upToDateNodes),
  ``total`` (status.totalNodes), ``replacing`` (donors), ``pending`` and ``budget``;
- ``nodewright_ip_pool_addresses{node_pool,figure}``: ``allocated`` (status ipAssignments),
  ``requested`` (spec.requestedIPCount) and ``pending_release`` (spec.ipsNotInUse), summed;
- ``nodewright_ip_pool_nodes{node_pool,figure}``: ``total`` and ``filling`` (allocated < requested);
- ``nodewright_identity_assignments{state}``: AzureAssignedIdentities by status.status.

A kind no enabled reconciler watches has no informer and so no series: the gauges never start an
informer of their own. Both replicas report (the standby's caches are warm too): aggregate with
``max``. Side effects: none beyond the manager's metric registry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from nodewright.controllers.status import (
    AZURE_ASSIGNED_IDENTITY,
    NODE_IMAGE,
    NODE_NETWORK_CONFIG,
    assignment_state,
    node_image_line,
    pool_lines,
)
from nodewright.runtime import NODE, Kind, Manager

__all__ = ["register_status_metrics"]

Object = dict[str, Any]


def _objects(manager: Manager, kind: Kind) -> list[Object]:
    """Every cached object of ``kind`` across the manager's informers of it, once each."""
    found: dict[str, Object] = {}
    for informer in manager.cache.informers():
        if (informer.kind.api_version, informer.kind.plural) != (kind.api_version, kind.plural):
            continue
        for item in informer.store.list():
            metadata = item.get("metadata") or {}
            found[f"{metadata.get('namespace')}/{metadata.get('name')}"] = item
    return list(found.values())


def _has_informer(manager: Manager, kind: Kind) -> bool:
    return any(
        (i.kind.api_version, i.kind.plural) == (kind.api_version, kind.plural)
        for i in manager.cache.informers()
    )


def rollout_observations(images: Iterable[Object]) -> list[Observation]:
    """One observation per NodeImage and figure (pure)."""
    observations = []
    for image in images:
        line = node_image_line(image)
        figures = {
            "up_to_date": line.up_to_date,
            "total": line.total,
            "replacing": line.replacing,
            "pending": line.pending,
            "budget": line.budget,
        }
        observations += [
            Observation(value, {"node_image": line.name, "figure": figure})
            for figure, value in figures.items()
        ]
    return observations


def pool_observations(
    configs: list[Object], nodes: list[Object]
) -> tuple[list[Observation], list[Observation]]:
    """Addresses and nodes per node pool and figure (pure)."""
    addresses: list[Observation] = []
    counts: list[Observation] = []
    for line in pool_lines(configs, nodes):
        pool = {"node_pool": line.pool}
        addresses += [
            Observation(line.allocated, {**pool, "figure": "allocated"}),
            Observation(line.requested, {**pool, "figure": "requested"}),
            Observation(line.not_in_use, {**pool, "figure": "pending_release"}),
        ]
        counts += [
            Observation(line.nodes, {**pool, "figure": "total"}),
            Observation(line.filling, {**pool, "figure": "filling"}),
        ]
    return addresses, counts


def assignment_observations(assignments: Iterable[Object]) -> list[Observation]:
    """AzureAssignedIdentities counted by state; Assigned always present (pure)."""
    states = Counter(assignment_state(item) for item in assignments)
    states.setdefault("Assigned", 0)
    return [Observation(count, {"state": state}) for state, count in sorted(states.items())]


def register_status_metrics(manager: Manager) -> None:
    """Create the gauges of the module docstring on ``manager``'s meter (side effect)."""
    meter = manager.metrics.provider.get_meter("nodewright.status")

    def rollouts(_: CallbackOptions) -> Iterable[Observation]:
        return rollout_observations(_objects(manager, NODE_IMAGE))

    def pools(index: int) -> Any:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            if not _has_informer(manager, NODE_NETWORK_CONFIG):
                return []
            configs = _objects(manager, NODE_NETWORK_CONFIG)
            return pool_observations(configs, _objects(manager, NODE))[index]

        return callback

    def assignments(_: CallbackOptions) -> Iterable[Observation]:
        if not _has_informer(manager, AZURE_ASSIGNED_IDENTITY):
            return []
        return assignment_observations(_objects(manager, AZURE_ASSIGNED_IDENTITY))

    meter.create_observable_gauge(
        "nodewright_rollout_nodes", callbacks=[rollouts], description="NodeImage status figures"
    )
    meter.create_observable_gauge(
        "nodewright_ip_pool_addresses", callbacks=[pools(0)], description="IP pool addresses per node pool"
    )
    meter.create_observable_gauge(
        "nodewright_ip_pool_nodes", callbacks=[pools(1)], description="Nodes per node pool, and those filling"
    )
    meter.create_observable_gauge(
        "nodewright_identity_assignments",
        callbacks=[assignments],
        description="AzureAssignedIdentities by status.status",
    )
