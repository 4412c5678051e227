"""Whether a heir's IP pool can take its donor's pods (pure), read from the NodeNetworkConfigs the
IPAM side publishes (their ``status``), never from IPAM code.

A donor whose NodeNetworkConfig does not exist is not on pod-subnet networking: nothing to wait
for. Otherwise the heir's pool (the IPs in its NodeNetworkConfig's ``status.networkContainers``)
less the IPs its own pods hold must cover the donor's pods that will move (not DaemonSet, mirror,
finished or host-network pods) plus the buffer its scaler keeps spare (``batchSize`` times
``requestThresholdPercent``). Until it does, the donor is not cordoned. Neighbour: ``node_image``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from nodewright.controllers.node_image.grouping import MIRROR_POD_ANNOTATION

__all__ = ["heir_pool_shortfall", "pods_needing_addresses", "pool_size"]


def _holds_address(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not spec.get("hostNetwork") and phase not in ("Succeeded", "Failed")


def pods_needing_addresses(pods: Iterable[Mapping[str, Any]], *, moving: bool) -> int:
    """Pods that hold a pod-network IP; with ``moving``, only those a drain moves (not DaemonSet or
    mirror pods, which stay with their node)."""
    count = 0
    for pod in pods:
        if not _holds_address(pod):
            continue
        metadata = pod.get("metadata") or {}
        if moving:
            if MIRROR_POD_ANNOTATION in (metadata.get("annotations") or {}):
                continue
            owners = metadata.get("ownerReferences") or []
            if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
                continue
        count += 1
    return count


def pool_size(node_network_config: Mapping[str, Any]) -> int:
    """The IPs a NodeNetworkConfig's status says the node holds."""
    containers = (node_network_config.get("status") or {}).get("networkContainers") or []
    return sum(len(container.get("ipAssignments") or []) for container in containers)


def _buffer(node_network_config: Mapping[str, Any]) -> int:
    scaler = (node_network_config.get("status") or {}).get("scaler") or {}
    batch = int(scaler.get("batchSize") or 0)
    threshold = int(scaler.get("requestThresholdPercent") or 0)
    return math.ceil(batch * threshold / 100)


def heir_pool_shortfall(
    donor_config: Mapping[str, Any] | None,
    heir_config: Mapping[str, Any] | None,
    *,
    donor_pods: Iterable[Mapping[str, Any]],
    heir_pods: Iterable[Mapping[str, Any]],
) -> str | None:
    """Why the heir cannot take the donor's pods yet, or ``None`` when it can (see the module
    docstring)."""
    if donor_config is None:
        return None
    moving = pods_needing_addresses(donor_pods, moving=True)
    if heir_config is None:
        return f"no NodeNetworkConfig for the heir yet ({moving} pods to move)"
    needed = moving + _buffer(heir_config)
    free = pool_size(heir_config) - pods_needing_addresses(heir_pods, moving=False)
    if free < needed:
        return f"the heir's pool has {max(free, 0)} free IPs, {needed} needed ({moving} pods plus the buffer)"
    return None
