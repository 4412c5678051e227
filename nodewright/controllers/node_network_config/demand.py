"""The demand side of a NodeNetworkConfig: the pods a node is about to receive.

Owns ``incoming_pods``. In both modes that compute demand (consumer ``nodesubnet``, and consumer
``crd`` with ``demandFromPods: true``), the node's pods include those its
``nodewright.io/incoming-pods`` annotation announces: a heir's pool is sized for its donor's pods
before the drain sends them, the rule the NodeImage reconciler's heir-network gate waits on
(``ipam.incoming``); a lapsed or unreadable announcement counts for nothing. What the pool should
hold for that demand, per consumer mode, is ``ipam.requested_count``'s (through
``plan.plan_spec``); the spec is written by ``spec_writer.SpecWriter`` (``apply``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nodewright.api.nodewright.v1alpha1 import INCOMING_PODS_ANNOTATION, IncomingPods

__all__ = ["incoming_pods"]


def incoming_pods(node: Mapping[str, Any], now: datetime | None) -> int:
    """The pods the Node's incoming-pods annotation says are about to arrive (0 when it has none,
    it does not parse, it has lapsed, or the time is unknown). Pure."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    announced = IncomingPods.parse(annotations.get(INCOMING_PODS_ANNOTATION))
    if announced is None or now is None:
        return 0
    return announced.count_at(now)
