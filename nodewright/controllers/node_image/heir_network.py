"""Whether a heir's IP pool can take its donor's pods (pure), read from the NodeNetworkConfigs the
IPAM side publishes (their ``status``), never from IPAM code.

A donor whose NodeNetworkConfig does not exist is not on pod-subnet networking: nothing to wait
for. Otherwise the donor's pods that will move (``incoming_pods``: not DaemonSet, mirror,
finished, host-network or already terminating pods) are what the heir is told to expect (the
``nodewright.io/incoming-pods`` annotation, which the IPAM side sizes the heir's pool from) and
what the gate waits for: one count for both. The heir's pool (the IPs in its NodeNetworkConfig's
``status.networkContainers``) less the IPs its own pods hold must cover them plus the spare its
scaler keeps (``status.scaler``); both sides take that rule from ``nodewright.ipam.incoming``, so
a pool sized for the heir's pods and the incoming ones always passes the gate. Until it does, the
donor is not cordoned.

Two waits that could never end by themselves are not silent: a heir that cannot hold the pods at
all under its maximum needs only a full pool and the donor goes with ``short`` said (the rest find
room elsewhere); a pool short while its subnet is full is ``stuck`` (a Degraded condition).
Neighbour: ``replacement``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodewright.api.acn.v1alpha import NETWORK_CONTAINER_STATUS_SUBNET_FULL
from nodewright.controllers.node_image.grouping import MIRROR_POD_ANNOTATION
from nodewright.ipam import PoolScaler, address_count, incoming_need

__all__ = [
    "HeirPoolVerdict",
    "heir_pool_shortfall",
    "heir_pool_verdict",
    "incoming_pods",
    "pods_needing_addresses",
    "pool_size",
]


def _holds_address(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not spec.get("hostNetwork") and phase not in ("Succeeded", "Failed")


def pods_needing_addresses(pods: Iterable[Mapping[str, Any]], *, moving: bool) -> int:
    """Pods that hold a pod-network IP; with ``moving``, only those a drain moves (not DaemonSet or
    mirror pods, which stay with their node, nor pods already terminating, which go nowhere)."""
    count = 0
    for pod in pods:
        if not _holds_address(pod):
            continue
        metadata = pod.get("metadata") or {}
        if moving:
            if MIRROR_POD_ANNOTATION in (metadata.get("annotations") or {}):
                continue
            if metadata.get("deletionTimestamp"):
                continue
            owners = metadata.get("ownerReferences") or []
            if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
                continue
        count += 1
    return count


def incoming_pods(donor_pods: Iterable[Mapping[str, Any]]) -> int:
    """The donor's pods a drain will move to its heir: what the heir expects and the gate needs."""
    return pods_needing_addresses(donor_pods, moving=True)


def pool_size(node_network_config: Mapping[str, Any]) -> int:
    """The IPs a NodeNetworkConfig's status says the node holds (a /28 block counts 16)."""
    containers = (node_network_config.get("status") or {}).get("networkContainers") or []
    entries = [
        str(assignment.get("ip") or "")
        for container in containers
        for assignment in container.get("ipAssignments") or []
    ]
    try:
        return address_count(entry for entry in entries if entry)
    except ValueError:
        return len(entries)  # an address that does not parse still names one IP configuration


def _scaler(node_network_config: Mapping[str, Any]) -> PoolScaler:
    """The pool's scaler as its status publishes it (normalised as Azure CNS reads it)."""
    scaler = (node_network_config.get("status") or {}).get("scaler") or {}

    def number(key: str) -> int:
        value = scaler.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return PoolScaler.normalized(
        batch_size=number("batchSize"),
        request_threshold_percent=number("requestThresholdPercent"),
        max_ip_count=number("maxIPCount"),
    )


def _subnet_full(node_network_config: Mapping[str, Any]) -> bool:
    containers = (node_network_config.get("status") or {}).get("networkContainers") or []
    return any(c.get("status") == NETWORK_CONTAINER_STATUS_SUBNET_FULL for c in containers)


@dataclass(frozen=True)
class HeirPoolVerdict:
    """What the gate says of one pair (see the module docstring)."""

    waits: str | None = None
    """Why the donor waits for its heir's pool; ``None``: it may be cordoned."""
    short: str | None = None
    """The heir cannot hold every pod that moves, even with a full pool (said once it goes)."""
    stuck: bool = False
    """The wait cannot end by itself (the heir's subnet is full): it needs a human."""


def heir_pool_verdict(
    donor_config: Mapping[str, Any] | None,
    heir_config: Mapping[str, Any] | None,
    *,
    incoming: int,
    resident: int,
) -> HeirPoolVerdict:
    """The gate for ``incoming`` pods moving to a heir whose own pods hold ``resident`` IPs."""
    if donor_config is None:
        return HeirPoolVerdict()
    if heir_config is None:
        return HeirPoolVerdict(waits=f"no NodeNetworkConfig for the heir yet ({incoming} pods to move)")
    need = incoming_need(resident=resident, incoming=incoming, scaler=_scaler(heir_config))
    short = None
    if not need.fits:
        short = (
            f"the heir holds at most {need.capacity} IPs: {resident} used on it, {incoming} pods to move; "
            "the rest must find room elsewhere"
        )
    held = pool_size(heir_config)
    if held >= need.pool:
        return HeirPoolVerdict(short=short)
    free = max(held - resident, 0)
    why = f"the heir's pool has {free} free IPs, {need.free} needed ({incoming} pods plus the buffer)"
    if not need.fits:
        why += f", capped at its maximum of {need.capacity}"
    stuck = _subnet_full(heir_config)
    if stuck:
        why += "; the heir's subnet is full"
    return HeirPoolVerdict(waits=why, short=short, stuck=stuck)


def heir_pool_shortfall(
    donor_config: Mapping[str, Any] | None,
    heir_config: Mapping[str, Any] | None,
    *,
    donor_pods: Iterable[Mapping[str, Any]],
    heir_pods: Iterable[Mapping[str, Any]],
) -> str | None:
    """Why the heir cannot take the donor's pods yet, or ``None`` when it can (the pods read)."""
    verdict = heir_pool_verdict(
        donor_config,
        heir_config,
        incoming=incoming_pods(donor_pods),
        resident=pods_needing_addresses(heir_pods, moving=False),
    )
    return verdict.waits
