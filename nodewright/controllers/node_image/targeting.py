"""Which nodes a NodeImage acts on (pure): the instances of its own ScalingGroups' scale sets
(or, for a group of standalone VMs, the resource group's VMs that are in no scale set), never
every node under the reconciler's label selector; and who holds each scale set's claim.

The claim. A scale set (or a resource group of standalone VMs) is held by the oldest ScalingGroup
naming it: by ``creationTimestamp``, then by name (``claim_order``; ScalingGroups are
cluster-scoped, so the order is total and the same in every reconciler). Only the holder's
NodeImage acts on it; a later ScalingGroup naming it is a loser: its NodeImage gets a ``Conflict``
condition and the ScalingGroup an ``ImageApplied=False`` ``ClaimedByOther`` condition, and neither
writes anything to the scale set. Two NodeImages therefore never claim one node. Every writer asks
``claim_holder`` (or ``claim_scaling_groups``, built on it) right before it writes: the
ScalingGroup reconciler before the model image, the NodeImage reconciler before the writes of a
rollout pass (scale-outs, standalone VM creates, cordons, drains and the Leaves that delete
machines), each from a fresh list of the API server, not only the cache.

The race. ``creationTimestamp`` has one-second resolution, so a ScalingGroup created later in the
same second may sort first by name and take the claim from one that was alone a moment before. A
claim therefore counts only once it is settled: when ``now`` is at least ``CLAIM_SETTLE`` past the
holder's timestamp (the timestamp's second, one more second for a clock of the manager up to a
second behind the API server's). Any ScalingGroup the API server has not yet returned then carries
a later second and can never sort first, so a fresh list at write time sees every possible holder;
before that, nobody writes. A claim then moves only when its holder is deleted (or its groupID is
edited): the next ScalingGroup takes it. No I/O. Neighbours: ``node_image`` and ``scaling_group``
(read the ScalingGroups, apply the claims), ``grouping`` (sorts the claimed nodes).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nodewright.api.base import ValidationError
from nodewright.api.nodewright.v1alpha1 import ScalingGroup
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ResourceGroupId,
    ScaleSetInstanceId,
    parse_provider_id,
)
from nodewright.controllers.node_image.grouping import ClusterNode
from nodewright.runtime import parse_time

__all__ = [
    "CLAIM_SETTLE",
    "Claims",
    "claim_holder",
    "claim_order",
    "claim_scaling_groups",
    "claim_settles_at",
    "claimed_by_message",
    "machine_group",
    "node_scale_set",
    "nodes_claimed",
    "parse_scaling_groups",
]

CLAIM_SETTLE = timedelta(seconds=2)
"""How long after its holder's ``creationTimestamp`` a claim counts (see the module docstring)."""


@dataclass(frozen=True)
class Claims:
    """What one NodeImage may act on: ``scaling_groups`` (its own, holding a settled claim), their
    scale sets by lowercased ID, a message per ScalingGroup left out because another ScalingGroup
    holds its scale set, and ``settles_at``: the earliest time one of its own claims settles (None
    when none is waiting)."""

    scaling_groups: list[ScalingGroup] = field(default_factory=list)
    scale_set_ids: frozenset[str] = frozenset()
    conflicts: list[str] = field(default_factory=list)
    settles_at: datetime | None = None


def parse_scaling_groups(objects: Iterable[Mapping[str, Any]]) -> list[ScalingGroup]:
    """The ScalingGroups among ``objects`` (cached or freshly listed) that parse; an invalid one
    names no scale set (the ScalingGroup reconciler reports it) and claims nothing."""
    found: list[ScalingGroup] = []
    for obj in objects:
        try:
            found.append(ScalingGroup.from_object(copy.deepcopy(dict(obj))))
        except ValidationError:
            continue
    return found


def claim_order(scaling_group: ScalingGroup) -> tuple[str, str]:
    """The claim's order: creationTimestamp (the API server's fixed RFC 3339 text, which sorts as
    time does), then name. The one tie-break every writer uses."""
    return (str(scaling_group.metadata.get("creationTimestamp") or ""), scaling_group.name)


def claim_holder(all_scaling_groups: Iterable[ScalingGroup], group_id: str) -> ScalingGroup | None:
    """The ScalingGroup holding ``group_id`` (a scale set's or a resource group's ID, any case):
    the first in ``claim_order`` naming it; None when none does."""
    naming = [g for g in all_scaling_groups if g.spec.group_id.lower() == group_id.lower()]
    return min(naming, key=claim_order, default=None)


def claim_settles_at(holder: ScalingGroup) -> datetime | None:
    """When ``holder``'s claim starts to count: ``CLAIM_SETTLE`` after its creationTimestamp (None:
    no timestamp, as in objects built by hand, which counts at once)."""
    created = parse_time(holder.metadata.get("creationTimestamp"))
    return None if created is None else created + CLAIM_SETTLE


def claimed_by_message(scaling_group: ScalingGroup, holder: ScalingGroup) -> str:
    """What a losing ScalingGroup's status and its NodeImage's Conflict condition say."""
    what = "resource group" if scaling_group.spec.standalone else "scale set"
    return (
        f"ScalingGroup {scaling_group.name}: {what} {scaling_group.spec.group_id} is claimed by "
        f"NodeImage {holder.spec.node_image} (ScalingGroup {holder.name}, the oldest naming it)"
    )


def claim_scaling_groups(
    all_scaling_groups: Iterable[ScalingGroup], node_image: str, *, now: datetime | None = None
) -> Claims:
    """The ScalingGroups ``node_image`` may act on, and its conflicts (see the module docstring).
    With ``now``, a claim it holds that has not settled yet is left out and dated in
    ``settles_at``; without, every claim counts (tables of the pure decisions)."""
    every = list(all_scaling_groups)
    own: list[ScalingGroup] = []
    conflicts: list[str] = []
    settling: list[datetime] = []
    for scaling_group in sorted((g for g in every if g.spec.node_image == node_image), key=lambda g: g.name):
        holder = claim_holder(every, scaling_group.spec.group_id)
        assert holder is not None  # scaling_group itself names it
        if holder.name != scaling_group.name and holder.spec.node_image != node_image:
            conflicts.append(claimed_by_message(scaling_group, holder))
            continue
        settles_at = claim_settles_at(holder)
        if now is not None and settles_at is not None and now < settles_at:
            settling.append(settles_at)
        elif holder.name == scaling_group.name:
            own.append(scaling_group)
    return Claims(
        scaling_groups=own,
        scale_set_ids=frozenset(g.spec.group_id.lower() for g in own),
        conflicts=conflicts,
        settles_at=min(settling, default=None),
    )


def node_scale_set(node: ClusterNode) -> str:
    """The lowercased ID of the group a node's machine belongs to: its annotation when written
    (a Flexible member's is written from the cloud, see ``node_image``), else read from its
    providerID: a Uniform instance's scale set, or for a VM (placed in no Flexible scale set by
    then) its resource group, the groupID of a group of standalone VMs; empty otherwise."""
    return machine_group(node.scaling_group_id, node.provider_id)


def machine_group(annotation: str, provider_id: str) -> str:
    """``node_scale_set``'s rule on a Node's scale-set annotation and providerID (the cache's pool
    index applies it to Nodes not decoded, ``pools``)."""
    if annotation:
        return annotation.lower()
    try:
        machine = parse_provider_id(provider_id)
    except InvalidResourceIdError:
        return ""
    if isinstance(machine, ScaleSetInstanceId):
        return str(machine.scale_set).lower()
    return str(ResourceGroupId(machine.subscription_id, machine.resource_group)).lower()


def nodes_claimed(nodes: Iterable[ClusterNode], claims: Claims) -> list[ClusterNode]:
    """The nodes whose machine belongs to one of the claimed scale sets."""
    return [node for node in nodes if node_scale_set(node) in claims.scale_set_ids]
