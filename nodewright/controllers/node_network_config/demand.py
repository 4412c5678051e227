"""The demand side of a NodeNetworkConfig: what the node's pool should hold, per consumer mode.

Owns ``SpecDecision`` and ``DemandSide``:

- consumer ``crd`` with ``demandFromPods: false`` (the default): the node agent (Azure CNS in CRD
  mode, its pool monitor) writes spec.requestedIPCount and spec.ipsNotInUse; they are read as
  they are and nodewright writes status only.
- consumer ``crd`` with ``demandFromPods: true`` (nodewright configured as the node agent: a
  CNS-compatible agent that only reads status, or testing): nodewright writes the spec from the
  node's pods (``ipam.compute_request``).
- consumer ``nodesubnet``: nodewright sizes the NIC from the node's pods plus
  ``discoveryHeadroomIPs`` and writes the spec as its own record. The consumer (Azure CNS in
  NodeSubnet mode) discovers IPs from the NIC and has no release handshake, so nothing is ever
  marked for release (``release: never``; ``idle`` is refused at config validation).

With ``prefixBlocks`` (experimental; nodesubnet only) the NIC's secondary
IP configurations are /28 blocks of 16 addresses; the request is counted in addresses.

In both modes that compute demand, the node's pods include those its ``nodewright.io/incoming-pods``
annotation announces (``incoming_pods``): a heir's pool is sized for its donor's pods before the
drain sends them, the rule the NodeImage reconciler's heir-network gate waits on
(``ipam.incoming``); a lapsed or unreadable announcement counts for nothing. A surplus must have
lasted ``scaleDownDelaySeconds`` before anything is marked (hysteresis).
Side effects: spec writes through ``spec_writer.SpecWriter`` (server-side apply under its own field
manager; another writer of the spec is noticed and followed, never overwritten).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.nodewright.v1alpha1 import INCOMING_PODS_ANNOTATION, IncomingPods
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.spec_writer import SpecWriter
from nodewright.ipam import PoolRequest, address_count, compute_request, pool_target
from nodewright.runtime.logs import get_logger

__all__ = ["DemandSide", "SpecDecision", "incoming_pods", "releasable_addresses"]

log = get_logger(__name__)
Object = dict[str, Any]


@dataclass(frozen=True)
class SpecDecision:
    """The spec the allocation side works to in this pass."""

    requested: int
    listed: tuple[str, ...]
    """Every name in ipsNotInUse."""
    releasable: tuple[str, ...]
    """The listed names that may be released in this pass (settled)."""


def _as_stored(config: NodeNetworkConfig) -> SpecDecision:
    """The spec as stored, followed as it is (the node agent's, or another writer's). Pure."""
    listed = tuple(dict.fromkeys(config.spec.ips_not_in_use))
    return SpecDecision(config.spec.requested_ip_count, listed, listed)


def incoming_pods(node: Mapping[str, Any], now: datetime | None) -> int:
    """The pods the Node's incoming-pods annotation says are about to arrive (0 when it has none,
    it does not parse, it has lapsed, or the time is unknown). Pure."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    announced = IncomingPods.parse(annotations.get(INCOMING_PODS_ANNOTATION))
    if announced is None or now is None:
        return 0
    return announced.count_at(now)


def releasable_addresses(
    *,
    settings: NodeNetworkConfigSettings,
    surplus_lasted: float,
) -> Collection[str] | None:
    """Which free addresses a scale-down may mark now (None: any free one). Pure.

    Nothing before the surplus has lasted ``scale_down_delay_seconds``; for a NodeSubnet consumer
    nothing ever (it has no release handshake)."""
    if surplus_lasted < settings.scale_down_delay_seconds or settings.nodesubnet:
        return ()
    return None


class DemandSide:
    """Decides (and, when nodewright owns it, writes) a node's spec (see the module docstring)."""

    def __init__(
        self, *, settings: NodeNetworkConfigSettings, book: NicBook, spec_writer: SpecWriter
    ) -> None:
        self._settings = settings
        self._book = book
        self._spec_writer = spec_writer

    def decide(
        self,
        *,
        raw: Object,
        config: NodeNetworkConfig,
        nic_id: str,
        demand: int,
        in_use: set[str],
        exhausted: bool,
        now: float,
    ) -> tuple[Object, SpecDecision]:
        """The spec for this pass; returns the object as stored after any spec patch."""
        spec = config.spec
        if not self._settings.computes_demand:
            return raw, _as_stored(config)
        assignments = [(a.name, a.ip) for c in config.status.network_containers[:1] for a in c.ip_assignments]
        if self._settings.prefix_blocks:
            return self._blocks(raw, config, assignments, demand, exhausted)
        request = self._request(nic_id, assignments, spec.ips_not_in_use, demand, in_use, exhausted, now)
        name = raw["metadata"]["name"]
        if request.differs_from(spec.requested_ip_count, spec.ips_not_in_use):
            body = {
                "requestedIPCount": request.requested_ip_count,
                "ipsNotInUse": list(request.ips_not_in_use),
            }
            stored = self._spec_writer.write(raw, body)
            if stored is None:  # another writer holds the spec: follow it, mark nothing
                return raw, _as_stored(config)
            raw = stored
            log.info(
                "Requested IPs",
                node=name,
                demand=demand,
                requested=request.requested_ip_count,
                not_in_use=len(request.ips_not_in_use),
            )
        self._book.mark(nic_id, request.newly_marked, (*request.released, *request.reclaimed), now)
        listed = tuple(request.ips_not_in_use)
        settled = self._book.settled(nic_id, listed, now, self._settings.release_settle_seconds)
        return raw, SpecDecision(request.requested_ip_count, listed, tuple(n for n in listed if n in settled))

    def _blocks(
        self,
        raw: Object,
        config: NodeNetworkConfig,
        assignments: list[tuple[str, str]],
        demand: int,
        exhausted: bool,
    ) -> tuple[Object, SpecDecision]:
        """Prefix blocks (experimental; nodesubnet, never released): the request in IPs is the
        target, or what the blocks already hold if more."""
        wanted = demand + self._settings.discovery_headroom_ips
        target = pool_target(wanted, self._settings.scaler, exhausted=exhausted)
        requested = max(target, address_count(address for _, address in assignments))
        spec = config.spec
        if spec.requested_ip_count != requested or spec.ips_not_in_use:
            stored = self._spec_writer.write(raw, {"requestedIPCount": requested, "ipsNotInUse": []})
            if stored is None:  # another writer holds the spec: follow it
                return raw, _as_stored(config)
            raw = stored
            log.info("Requested IPs", node=raw["metadata"]["name"], demand=demand, requested=requested)
        return raw, SpecDecision(requested, (), ())

    def _request(  # noqa: PLR0917 - a private step of ``decide``
        self,
        nic_id: str,
        assignments: Sequence[tuple[str, str]],
        ips_not_in_use: Sequence[str],
        demand: int,
        in_use: set[str],
        exhausted: bool,
        now: float,
    ) -> PoolRequest:
        settings = self._settings
        wanted = demand + (settings.discovery_headroom_ips if settings.nodesubnet else 0)
        pending = set(ips_not_in_use)
        retained = [address for name, address in assignments if name not in pending]
        surplus = pool_target(wanted, settings.scaler, exhausted=exhausted) < len(retained)
        lasted = self._book.surplus_lasted(nic_id, surplus, now)
        allowed = releasable_addresses(settings=settings, surplus_lasted=lasted)
        return compute_request(
            demand=wanted,
            scaler=settings.scaler,
            assignments=assignments,
            in_use_addresses=in_use,
            ips_not_in_use=ips_not_in_use,
            exhausted=exhausted,
            releasable_addresses=allowed,
        )
