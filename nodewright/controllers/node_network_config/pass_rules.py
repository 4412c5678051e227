"""Small pure rules and shapes of a node_network_config pass, kept apart from the reconciler:
the cached stores it reads (``NodeNetworkConfigStores``), the spread of periodic passes
(``resync_jitter``) and the check of a requested count against the node's usable maximum
(``usable_maximum``, ``check_requested``). No I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.ipam import MAX_SECONDARY_IPS_PER_NIC
from nodewright.runtime.cache import StoreReader
from nodewright.runtime.reconcile import Request

__all__ = ["NodeNetworkConfigStores", "check_requested", "ignore_request", "resync_jitter", "usable_maximum"]

RESYNC_JITTER = 0.1


def resync_jitter() -> float:
    """A factor in [0.9, 1.1] that spreads the periodic passes of many nodes."""
    return random.uniform(1 - RESYNC_JITTER, 1 + RESYNC_JITTER)  # noqa: S311 - spreading, not security


@dataclass(frozen=True)
class NodeNetworkConfigStores:
    """The cached reads: selected Nodes, NodeNetworkConfigs in our namespace, pods indexed by node."""

    nodes: StoreReader
    node_network_configs: StoreReader
    pods: StoreReader


def usable_maximum(settings: NodeNetworkConfigSettings) -> int:
    """The most secondary IPs a node may hold: the scaler's maximum, within one NIC's capacity."""
    return min(settings.scaler.max_ip_count, MAX_SECONDARY_IPS_PER_NIC)


def check_requested(requested: int, maximum: int) -> tuple[int | None, tuple[str, str] | None]:
    """The count to allocate to and the problem to report (reason, message). Pure. A negative
    count (possible only against a CRD without our minimum) changes nothing on the NIC; one above
    the node's usable maximum is served up to that maximum."""
    if requested < 0:
        return None, ("InvalidRequestedIPCount", f"requestedIPCount {requested} is negative")
    if requested > maximum:
        message = f"requestedIPCount {requested} is above this node's usable maximum of {maximum} IPs"
        return maximum, ("RequestedIPCountAboveMaximum", message)
    return requested, None


def ignore_request(request: Request) -> None:
    """Where an ended write's request goes when nothing listens (tests driving passes by hand)."""
    del request
