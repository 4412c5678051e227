"""Heirs in the making: a new Node a node image rollout created to replace another, whose pool
is sized once, for its donor's pods too, instead of twice.

Owns ``pairing_wait``. A Node is a heir in the making while it carries no donor annotation and
either a Join PendingNode names it (the rollout tracks its machine until pairing) or its scale
set's ScalingGroup holds a scale-out record that does not list its instance (the machine is the
scale-out under way; the record is written before the capacity changes and cleared only once the
Join exists, so one of the two names the machine from before its Node registers until it is
paired). The NodeImage reconciler writes the donor annotation and the incoming-pods announcement
in one patch, so once the donor annotation is there the first sizing already counts the donor's
pods. The wait is bounded by the Node's age: past ``wait_seconds`` (a rollout that is off, stuck
or not pairing this node, as when the mint is not needed) the Node is sized like any other. Any
other Node, or one whose rollout marks are not read (``stores`` without them), waits for nothing.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from nodewright.api.nodewright.v1alpha1 import (
    DONOR_ANNOTATION,
    SCALE_OUT_ANNOTATION,
    PendingNodeGoal,
    ScaleOutRecord,
)
from nodewright.cloud.resource_ids import InvalidResourceIdError, ScaleSetInstanceId, parse_provider_id
from nodewright.runtime import parse_time

__all__ = ["pairing_wait"]


def _named_by_join(node: Mapping[str, Any], join: Mapping[str, Any] | None) -> bool:
    spec = (join or {}).get("spec") or {}
    return spec.get("goal") == PendingNodeGoal.JOIN.value and spec.get("nodeName") == node["metadata"]["name"]


def _scaled_out(provider_id: str, scaling_groups: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a scale-out under way in the machine's scale set created it (its instance is not in
    the record of the instances before)."""
    try:
        machine = parse_provider_id(provider_id)
    except InvalidResourceIdError:
        return False
    if not isinstance(machine, ScaleSetInstanceId):
        return False
    scale_set = str(machine.scale_set).lower()
    for group in scaling_groups:
        if str((group.get("spec") or {}).get("groupID") or "").lower() != scale_set:
            continue
        annotations = (group.get("metadata") or {}).get("annotations") or {}
        record = ScaleOutRecord.parse(annotations.get(SCALE_OUT_ANNOTATION))
        if record is None:
            continue
        return machine.instance_id not in record.before  # unreadable: nothing before; bounded
    return False


def pairing_wait(
    node: Mapping[str, Any],
    join: Mapping[str, Any] | None,
    scaling_groups: Iterable[Mapping[str, Any]],
    *,
    now: datetime | None,
    wait_seconds: float,
) -> float:
    """Seconds the Node's first sizing still waits for its pairing (0: size it now). ``join`` is
    the PendingNode named after the Node, if any; ``scaling_groups`` every ScalingGroup."""
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if wait_seconds <= 0 or now is None or DONOR_ANNOTATION in annotations:
        return 0.0
    created = parse_time(metadata.get("creationTimestamp"))
    if created is None:
        return 0.0
    left = wait_seconds - (now - created).total_seconds()
    if left <= 0:
        return 0.0
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    if _named_by_join(node, join) or (provider_id and _scaled_out(provider_id, scaling_groups)):
        return left
    return 0.0
