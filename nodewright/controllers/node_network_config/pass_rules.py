"""Small shapes of a node_network_config pass, kept apart from the reconciler: the cached stores
it reads (``NodeNetworkConfigStores``), the spread of periodic passes (``resync_jitter``) and where
an ended write's request goes when nothing listens (``ignore_request``). No I/O. (The check of a
requested count against the node's usable maximum is ``ipam.requested_count``'s.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nodewright.runtime import Request, StoreReader

__all__ = ["NodeNetworkConfigStores", "ignore_request", "resync_jitter"]

RESYNC_JITTER = 0.1


def resync_jitter() -> float:
    """A factor in [0.9, 1.1] that spreads the periodic passes of many nodes."""
    return random.uniform(1 - RESYNC_JITTER, 1 + RESYNC_JITTER)  # noqa: S311 - spreading, not security


@dataclass(frozen=True)
class NodeNetworkConfigStores:
    """The cached reads: selected Nodes, NodeNetworkConfigs in our namespace, pods indexed by node;
    with the node-image reconciler beside us, its PendingNodes and ScalingGroups (``heirs``)."""

    nodes: StoreReader
    node_network_configs: StoreReader
    pods: StoreReader
    pending_nodes: StoreReader | None = None
    scaling_groups: StoreReader | None = None


def ignore_request(request: Request) -> None:
    """Where an ended write's request goes when nothing listens (tests driving passes by hand)."""
    del request
