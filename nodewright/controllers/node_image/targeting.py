"""Which nodes a NodeImage acts on (pure): the instances of its own ScalingGroups' scale sets
(or, for a group of standalone VMs, the resource group's VMs that are in no scale set), never
every node under the reconciler's label selector.

A scale set is claimed by the NodeImage of the oldest ScalingGroup naming it (creation time, then
name); a later ScalingGroup of another NodeImage naming the same scale set is a conflict: that
NodeImage gets a ``Conflict`` condition and leaves the scale set alone. Two NodeImages therefore
never claim one node. No I/O. Neighbours: ``node_image`` (reads the stores, applies the claims),
``grouping`` (sorts the claimed nodes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nodewright.api.nodewright.v1alpha1 import ScalingGroup
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ResourceGroupId,
    ScaleSetInstanceId,
    parse_provider_id,
)
from nodewright.controllers.node_image.grouping import ClusterNode

__all__ = ["Claims", "claim_scaling_groups", "node_scale_set", "nodes_claimed"]


@dataclass(frozen=True)
class Claims:
    """What one NodeImage may act on: ``scaling_groups`` (its own, not in conflict), their scale
    sets by lowercased ID, and a message per ScalingGroup left out because another NodeImage
    claims its scale set."""

    scaling_groups: list[ScalingGroup] = field(default_factory=list)
    scale_set_ids: frozenset[str] = frozenset()
    conflicts: list[str] = field(default_factory=list)


def _age(scaling_group: ScalingGroup) -> tuple[str, str]:
    return (str(scaling_group.metadata.get("creationTimestamp") or ""), scaling_group.name)


def claim_scaling_groups(all_scaling_groups: Iterable[ScalingGroup], node_image: str) -> Claims:
    """The ScalingGroups ``node_image`` may act on, and its conflicts (see the module docstring)."""
    every = sorted(all_scaling_groups, key=_age)
    first_claimant: dict[str, ScalingGroup] = {}
    for scaling_group in every:
        first_claimant.setdefault(scaling_group.spec.group_id.lower(), scaling_group)
    own: list[ScalingGroup] = []
    conflicts: list[str] = []
    for scaling_group in sorted((g for g in every if g.spec.node_image == node_image), key=lambda g: g.name):
        claimant = first_claimant[scaling_group.spec.group_id.lower()]
        if claimant.spec.node_image == node_image:
            own.append(scaling_group)
        else:
            what = "resource group" if scaling_group.spec.standalone else "scale set"
            conflicts.append(
                f"ScalingGroup {scaling_group.name}: {what} {scaling_group.spec.group_id} is claimed by "
                f"NodeImage {claimant.spec.node_image} (ScalingGroup {claimant.name})"
            )
    return Claims(
        scaling_groups=own,
        scale_set_ids=frozenset(g.spec.group_id.lower() for g in own),
        conflicts=conflicts,
    )


def node_scale_set(node: ClusterNode) -> str:
    """The lowercased ID of the group a node's machine belongs to: its annotation when written
    (a Flexible member's is written from the cloud, see ``node_image``), else read from its
    providerID: a Uniform instance's scale set, or for a VM (placed in no Flexible scale set by
    then) its resource group, the groupID of a group of standalone VMs; empty otherwise."""
    if node.scaling_group_id:
        return node.scaling_group_id.lower()
    try:
        machine = parse_provider_id(node.provider_id)
    except InvalidResourceIdError:
        return ""
    if isinstance(machine, ScaleSetInstanceId):
        return str(machine.scale_set).lower()
    return str(ResourceGroupId(machine.subscription_id, machine.resource_group)).lower()


def nodes_claimed(nodes: Iterable[ClusterNode], claims: Claims) -> list[ClusterNode]:
    """The nodes whose machine belongs to one of the claimed scale sets."""
    return [node for node in nodes if node_scale_set(node) in claims.scale_set_ids]
