"""``nodewright_ipam_*`` metrics, in the spirit of Azure CNS's ``cx_ipam_*``, per node pool.

Owns ``IpamMetrics``: each reconcile records a node's figures (``record``); and ``IpamGauges``,
one per manager (``manager.services`` under ``IPAM_GAUGES``; ``install`` adds its reconciler's
``IpamMetrics``), whose gauges on that manager's metrics sum them per node pool at scrape time:

- ``nodewright_ipam_allocated_ips``: secondary IPs on the nodes' NICs (status ipAssignments);
- ``nodewright_ipam_available_ips``: of those, the ones no pod uses;
- ``nodewright_ipam_requested_ips``: spec.requestedIPCount summed;
- ``nodewright_ipam_pending_release_ips``: names listed in ipsNotInUse still on the NIC;
- ``nodewright_ipam_subnet_exhaustion_seconds``: per subnet, seconds until it runs out at the
  average consumption rate seen since the reconciler started (absent while not consumed);
- ``nodewright_ipam_subnet_exhausted``: per subnet the reconciler has read, 1 while it counts as
  exhausted (what it publishes in the subnet's ClusterSubnetState), else 0.

A node pool is the node's ``kubernetes.azure.com/agentpool`` label, else its scale set's name,
else ``standalone``. Side effects: none beyond the manager's metric registry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from nodewright.cloud.resource_ids import InvalidResourceIdError, ScaleSetInstanceId, parse_provider_id
from nodewright.controllers.node_network_config.resources import provider_id_of
from nodewright.runtime import Manager, Metrics, ServiceKey

__all__ = ["IPAM_GAUGES", "IpamGauges", "IpamMetrics", "NodeFigures", "node_pool_of"]

AGENT_POOL_LABEL = "kubernetes.azure.com/agentpool"


@dataclass(frozen=True)
class NodeFigures:
    pool: str
    allocated: int
    available: int
    requested: int
    pending_release: int


def node_pool_of(node: Mapping[str, Any]) -> str:
    """The node pool a Node belongs to (see the module docstring). Pure."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if labels.get(AGENT_POOL_LABEL):
        return str(labels[AGENT_POOL_LABEL])
    try:
        machine = parse_provider_id(provider_id_of(node))
    except InvalidResourceIdError:
        return "standalone"
    return machine.scale_set_name if isinstance(machine, ScaleSetInstanceId) else "standalone"


_FIGURES = {
    "allocated": "Secondary IPs on the nodes' NICs",
    "available": "Secondary IPs on the nodes' NICs that no pod uses",
    "requested": "IPs requested in NodeNetworkConfig specs",
    "pending_release": "IPs listed in ipsNotInUse and still on the NIC",
}


class IpamGauges:
    """The ``nodewright_ipam_*`` gauges on one manager's ``metrics``: they sum, at scrape time,
    over every ``IpamMetrics`` added (one per NodeNetworkConfig reconciler of that manager)."""

    def __init__(self, metrics: Metrics) -> None:
        self._lock = threading.Lock()
        self._sources: list[IpamMetrics] = []
        meter = metrics.provider.get_meter("nodewright.ipam")
        for name, description in _FIGURES.items():
            meter.create_observable_gauge(
                f"nodewright_ipam_{name}_ips", callbacks=[self._per_pool(name)], description=description
            )
        meter.create_observable_gauge(
            "nodewright_ipam_subnet_exhaustion_seconds",
            callbacks=[self._exhaustion],
            description="Seconds until the subnet runs out at the consumption rate seen so far",
        )
        meter.create_observable_gauge(
            "nodewright_ipam_subnet_exhausted",
            callbacks=[self._exhausted],
            description="1 while the subnet counts as exhausted (its ClusterSubnetState says so)",
        )

    def add(self, source: IpamMetrics) -> None:
        """Report ``source``'s figures too."""
        with self._lock:
            self._sources.append(source)

    def _each(self) -> list[IpamMetrics]:
        with self._lock:
            return list(self._sources)

    def _per_pool(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            totals: dict[str, int] = {}
            for source in self._each():
                for pool, figures in source.totals().items():
                    totals[pool] = totals.get(pool, 0) + figures[name]
            return [Observation(value, {"node_pool": pool}) for pool, value in totals.items()]

        return callback

    def _exhaustion(self, _: CallbackOptions) -> Iterable[Observation]:
        now = time.monotonic()
        forecasts: dict[str, float] = {}
        for source in self._each():
            forecasts.update(source.forecasts(now))
        return [Observation(seconds, {"subnet": subnet}) for subnet, seconds in forecasts.items()]

    def _exhausted(self, _: CallbackOptions) -> Iterable[Observation]:
        states: dict[str, bool] = {}
        for source in self._each():
            states.update(source.exhausted_subnets())
        return [Observation(int(exhausted), {"subnet": subnet}) for subnet, exhausted in states.items()]


def _manager_gauges(manager: Manager) -> IpamGauges:
    return IpamGauges(manager.metrics)


IPAM_GAUGES: ServiceKey[IpamGauges] = ServiceKey("ipam-gauges", _manager_gauges)
"""A manager's ``nodewright_ipam_*`` gauges (made on its metrics the first time one is asked for)."""


class IpamMetrics:
    """Per-node figures of one reconciler, summed per node pool at scrape time."""

    def __init__(
        self,
        forecasts: Callable[[float], Mapping[str, float]],
        exhausted_subnets: Callable[[], Mapping[str, bool]] = dict,
    ) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeFigures] = {}
        self.forecasts = forecasts
        self.exhausted_subnets = exhausted_subnets

    def record(self, node: str, figures: NodeFigures) -> None:
        with self._lock:
            self._nodes[node] = figures

    def forget(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)

    def totals(self) -> dict[str, dict[str, int]]:
        """Pool -> figure name -> sum (what the gauges report)."""
        with self._lock:
            nodes = list(self._nodes.values())
        totals: dict[str, dict[str, int]] = {}
        for figures in nodes:
            pool = totals.setdefault(figures.pool, {})
            for name in _FIGURES:
                pool[name] = pool.get(name, 0) + int(getattr(figures, name))
        return totals
