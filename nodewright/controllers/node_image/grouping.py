"""Names on the wire, images, and sorting nodes into the rollout's groups (pure).

Owns the node annotations the rollout writes, ``ClusterNode`` (what the rollout knows of a Node),
``NodeGroups`` and ``group_nodes``, which Join PendingNodes are done or stale (``settled_joins``,
``stale_joins``), the surge arithmetic (``extra_nodes``, ``new_node_budget``)
and ``rollout_in_progress``. No I/O. Neighbours: ``pairing``, ``scale_out``, ``conditions``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nodewright.api.meta import ObjectReference
from nodewright.api.nodewright.v1alpha1 import (
    DONOR_ANNOTATION,
    QUARANTINE_LABEL,
    PendingNode,
    PendingNodeGoal,
)
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_resource_id
from nodewright.runtime import condition_is_true, parse_time

__all__ = [
    "CONTROL_PLANE_LABEL",
    "CONTROL_PLANE_SURGE",
    "DONOR_ANNOTATION",
    "DRAIN_STARTED_ANNOTATION",
    "HEIR_ANNOTATION",
    "MIRROR_POD_ANNOTATION",
    "NODE_IMAGE_ANNOTATION",
    "OBSOLETE_ANNOTATION",
    "RESERVED_LABEL_PATTERN",
    "SCALING_GROUP_ANNOTATION",
    "SERVED_AS_HEIR_ANNOTATION",
    "ClusterNode",
    "InvalidImageError",
    "Mint",
    "NodeGroups",
    "RolloutTimeouts",
    "StaleJoin",
    "extra_nodes",
    "group_nodes",
    "new_node_budget",
    "parse_desired_image",
    "rollout_in_progress",
    "same_image",
    "settled_joins",
    "stale_joins",
]

# ---- names on the wire ------------------------------------------------------------------------

SCALING_GROUP_ANNOTATION = "nodewright.io/scaling-group-id"
"""On a Node: the ARM ID of the scale set its machine belongs to (from the cloud)."""
NODE_IMAGE_ANNOTATION = "nodewright.io/node-image"
"""On a Node: the image its machine booted (from the cloud), as ``ImageReference.format()``."""
HEIR_ANNOTATION = "nodewright.io/heir"
"""On a donor: the name of the new node replacing it."""
SERVED_AS_HEIR_ANNOTATION = "nodewright.io/served-as-heir"
"""On a node paired as a heir: the donor it was paired with. Written with the donor annotation
and kept once the replacement is done (the donor annotation is not), so the cluster itself says
that the node is no longer new: it is never paired again, and a Join PendingNode naming it (a
late write from a deposed leader, or a record a restart left) is stale."""
OBSOLETE_ANNOTATION = "nodewright.io/obsolete"
"""On a new node that was not needed (value ``true``): it is drained and removed."""
DRAIN_STARTED_ANNOTATION = "nodewright.io/drain-started"
"""On a node being removed: when it was cordoned (RFC 3339), to tell when its drain is stuck."""
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
"""On a static pod's mirror: such pods cannot be evicted and are skipped by a drain."""
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
"""The control-plane role label; used when a node's ScalingGroup is unknown."""
RESERVED_LABEL_PATTERN = re.compile(r"^(.+\.|)(kubernetes|k8s)\.io(/.*)?$")
"""Label keys in the kubernetes.io and k8s.io namespaces belong to Kubernetes; never copied."""

CONTROL_PLANE_SURGE = 1
"""Control-plane nodes are replaced one at a time whatever maxSurge says: etcd members are
added and removed one by one to keep quorum."""


@dataclass(frozen=True)
class RolloutTimeouts:
    """How long each step may take. ``join`` and ``leave`` are PendingNode deadlines
    (constellation's 30 min and 1 min); after ``drain`` a drain is reported stuck (an Event and
    the Degraded condition) but never forced; ``poll`` is how often a PendingNode is re-read."""

    join: timedelta = timedelta(minutes=30)
    leave: timedelta = timedelta(minutes=1)
    drain: timedelta = timedelta(minutes=10)
    poll: timedelta = timedelta(seconds=30)


# ---- images -------------------------------------------------------------------------------------


class InvalidImageError(ValueError):
    """``NodeImage.spec.image`` is not an image reference we can compare or apply."""


def parse_desired_image(text: str) -> ImageReference:
    """Parse the NodeImage's image: an image or gallery image version ID (an ARM resource ID), a
    community or shared gallery image ID, or ``publisher:offer:sku:version``. Raises
    ``InvalidImageError`` naming what is wrong."""
    try:
        image = ImageReference.parse(text)
    except ValueError:
        raise InvalidImageError(
            f"{text!r} is not an image ID, a gallery image ID or publisher:offer:sku:version"
        ) from None
    if image.id is not None:
        try:
            parse_resource_id(image.id)
        except InvalidResourceIdError:
            raise InvalidImageError(f"{text!r} is not an ARM resource ID of an image") from None
    return image


def same_image(node_image: str, desired: ImageReference) -> bool:
    """Whether a node's image annotation names ``desired`` (case-insensitive, as ARM compares; a
    community gallery ID matches whatever the case of ``/communityGalleries/``). An annotation that
    does not parse names no image we want."""
    try:
        return ImageReference.parse(node_image).same_image(desired)
    except ValueError:
        return False


# ---- nodes and grouping -------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterNode:
    """What the rollout needs to know of a Kubernetes Node."""

    name: str
    uid: str = ""
    provider_id: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    ready: bool = False
    unschedulable: bool = False
    created: datetime | None = None
    """When the Node registered (its creationTimestamp)."""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ClusterNode:
        """Read a Node as the API server returns it."""
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        ready = condition_is_true(obj)
        return cls(
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            provider_id=str(spec.get("providerID") or ""),
            annotations=dict(metadata.get("annotations") or {}),
            labels=dict(metadata.get("labels") or {}),
            ready=ready,
            unschedulable=bool(spec.get("unschedulable", False)),
            created=parse_time(metadata.get("creationTimestamp")),
        )

    @property
    def scaling_group_id(self) -> str:
        return self.annotations.get(SCALING_GROUP_ANNOTATION, "")

    @property
    def image(self) -> str:
        return self.annotations.get(NODE_IMAGE_ANNOTATION, "")

    @property
    def donor(self) -> str:
        return self.annotations.get(DONOR_ANNOTATION, "")

    @property
    def heir(self) -> str:
        return self.annotations.get(HEIR_ANNOTATION, "")

    @property
    def served_as_heir(self) -> str:
        """The donor this node was paired with as its heir ("" if it never was): the durable mark,
        or the donor annotation of a heir paired before the mark existed."""
        return self.annotations.get(SERVED_AS_HEIR_ANNOTATION, "") or self.donor

    @property
    def obsolete(self) -> bool:
        return self.annotations.get(OBSOLETE_ANNOTATION, "").lower() == "true"

    def reference(self) -> ObjectReference:
        """A reference for the NodeImage status. No resourceVersion: it changes with every node
        heartbeat and would make the status change when nothing in the rollout did."""
        return ObjectReference(api_version="v1", kind="Node", name=self.name, uid=self.uid)


@dataclass(frozen=True)
class Mint:
    """A new node that joined on the desired image, with the Join PendingNode that created it."""

    node: ClusterNode
    pending_node: PendingNode


@dataclass
class NodeGroups:
    """Every node in exactly one list (constellation's nodeGroups, plus ``awaiting_annotation``
    and ``invalid``)."""

    outdated: list[ClusterNode] = field(default_factory=list)
    up_to_date: list[ClusterNode] = field(default_factory=list)
    donors: list[ClusterNode] = field(default_factory=list)
    heirs: list[ClusterNode] = field(default_factory=list)
    mints: list[Mint] = field(default_factory=list)
    obsolete: list[ClusterNode] = field(default_factory=list)
    awaiting_annotation: list[ClusterNode] = field(default_factory=list)
    invalid: list[ClusterNode] = field(default_factory=list)
    quarantined: list[ClusterNode] = field(default_factory=list)
    """Nodes left cordoned after a drain timed out (``nodewright.io/upgrade-status=Quarantined``):
    a human decides; the rollout neither replaces nor counts them."""

    def all_nodes(self) -> list[ClusterNode]:
        return [
            *self.outdated,
            *self.up_to_date,
            *self.donors,
            *self.heirs,
            *(mint.node for mint in self.mints),
            *self.obsolete,
            *self.awaiting_annotation,
            *self.invalid,
            *self.quarantined,
        ]


def _same_machine(node: ClusterNode, pending_node: PendingNode) -> bool:
    """A PendingNode names a node by node name or by providerID (case-insensitive)."""
    if pending_node.spec.node_name and pending_node.spec.node_name == node.name:
        return True
    return bool(node.provider_id) and pending_node.spec.provider_id.lower() == node.provider_id.lower()


def _joins(pending_nodes: Iterable[PendingNode]) -> list[PendingNode]:
    return [p for p in pending_nodes if p.spec.goal is PendingNodeGoal.JOIN]


def _joining(node: ClusterNode, joins: Iterable[PendingNode]) -> PendingNode | None:
    """The Join PendingNode that makes ``node`` new, if any. A node that served as a heir is
    not new whatever a Join says: such a Join is stale (``stale_joins``)."""
    if node.served_as_heir:
        return None
    return next((p for p in joins if _same_machine(node, p)), None)


def group_nodes(
    nodes: Iterable[ClusterNode],
    pending_nodes: Iterable[PendingNode],
    desired_image: ImageReference,
    *,
    invalid: Collection[str] = (),
) -> NodeGroups:
    """Sort nodes into groups; the first rule that matches wins:

    1. no providerID, or named in ``invalid`` (the cloud could not place it) -> invalid;
    2. quarantined label -> quarantined; obsolete annotation -> obsolete;
    3. scaling-group or image annotation missing -> awaiting annotation;
    4. image differs from ``desired_image`` -> donor if it has a heir; obsolete if it is named by a
       Join PendingNode (a machine created for a replacement that came up on an image no longer
       desired, as after a rollback or a spec change mid-join: it is removed, not replaced, or the
       pool would grow by one); else outdated;
    5. donor annotation -> heir;
    6. named by a Join PendingNode -> mint;
    7. otherwise up to date.
    A Join naming a node that already served as a heir (``ClusterNode.served_as_heir``) is
    ignored by rules 4 and 6: that node is not new, so it is neither made obsolete nor paired
    again (``stale_joins`` lists such Joins).
    Then an outdated node that was the heir of a donor now on ``desired_image`` is obsolete.
    Each list is sorted by node name.
    """
    joins = _joins(pending_nodes)
    groups = NodeGroups()
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.provider_id or node.name in invalid:
            groups.invalid.append(node)
        elif node.labels.get(QUARANTINE_LABEL) == "Quarantined":
            groups.quarantined.append(node)
        elif node.obsolete:
            groups.obsolete.append(node)
        elif not node.scaling_group_id or not node.image:
            groups.awaiting_annotation.append(node)
        elif not same_image(node.image, desired_image):
            if node.heir:
                groups.donors.append(node)
            elif _joining(node, joins) is not None:
                groups.obsolete.append(node)
            else:
                groups.outdated.append(node)
        elif node.donor:
            groups.heirs.append(node)
        elif (join := _joining(node, joins)) is not None:
            groups.mints.append(Mint(node=node, pending_node=join))
        else:
            groups.up_to_date.append(node)
    _abandoned_heirs_are_obsolete(groups)
    return groups


def _abandoned_heirs_are_obsolete(groups: NodeGroups) -> None:
    """A heir whose image is no longer the desired one while its donor, still there, is on it (the
    NodeImage went back mid-replacement, as a rollback does) is not needed: its donor stays. It is
    removed like an obsolete node instead of being replaced."""
    on_desired = {node.name: node for node in groups.up_to_date}
    abandoned = [
        node
        for node in groups.outdated
        if node.donor in on_desired and on_desired[node.donor].heir in (node.name, "")
    ]
    if abandoned:
        groups.outdated = [node for node in groups.outdated if node not in abandoned]
        groups.obsolete = sorted([*groups.obsolete, *abandoned], key=lambda n: n.name)


def _joins_without_node(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> list[PendingNode]:
    nodes = groups.all_nodes()
    return [p for p in _joins(pending_nodes) if not any(_same_machine(node, p) for node in nodes)]


@dataclass(frozen=True)
class StaleJoin:
    """A Join PendingNode naming ``node``, which already served as a heir."""

    pending_node: PendingNode
    node: ClusterNode


def stale_joins(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> list[StaleJoin]:
    """Join PendingNodes naming a node that already served as a heir: a create from a leader
    deposed before its write landed, or the record of a heir that a restart kept from being
    deleted after pairing. The node is not new; the Join is ignored (grouping never lets it make
    a mint or an obsolete node), reported, and should be deleted."""
    served = [node for node in groups.all_nodes() if node.served_as_heir]
    return [
        StaleJoin(pending_node=join, node=node)
        for join in _joins(pending_nodes)
        if (node := next((n for n in served if _same_machine(n, join)), None)) is not None
    ]


def settled_joins(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> list[PendingNode]:
    """Join PendingNodes whose node exists but is no longer a mint, other than ``stale_joins``: a
    node that came up outdated because the image changed while it joined and has been marked
    obsolete (the mark is written first, so a restart still knows it), or a node that is up to
    date or outdated without having been paired. They are done and should be deleted, or they
    would hold the surge forever."""
    marked = [node for node in groups.obsolete if node.obsolete]
    settled_nodes = [*groups.outdated, *groups.donors, *groups.heirs, *groups.up_to_date, *marked]
    stale = {stale.pending_node.name for stale in stale_joins(groups, pending_nodes)}
    return [
        p
        for p in _joins(pending_nodes)
        if p.name not in stale and any(_same_machine(node, p) for node in settled_nodes)
    ]


def extra_nodes(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> int:
    """How many machines exist beyond the cluster's size: heirs and mints (new nodes that have not
    yet taken a donor's place), obsolete nodes (until removed), nodes awaiting annotation (most
    likely new; counting them is the safe side), and Join PendingNodes whose node has not
    registered yet. Leaving machines do not count: their Node is gone and they carry no work.

    In the ordinary flow this is constellation's heirs + pending joins (a mint's join is counted
    once, through the mint)."""
    return (
        len(groups.heirs)
        + len(groups.mints)
        + len(groups.obsolete)
        + len(groups.awaiting_annotation)
        + len(_joins_without_node(groups, pending_nodes))
    )


def new_node_budget(
    max_surge: int,
    groups: NodeGroups,
    pending_nodes: Iterable[PendingNode],
    *,
    finished_heirs: int = 0,
    coming: int = 0,
) -> int:
    """How many new nodes may be created now: ``max(0, max_surge - extra_nodes - coming)``.
    ``finished_heirs`` are heirs whose donor is gone (``pairing.pair_nodes`` releases them in this
    very pass): they have taken their donor's place, so their slot is free now, not one pass later.
    ``coming``: machines of capacity steps in flight, not yet tracked by Joins (their nodes are
    left out of ``groups``, so they are counted here once)."""
    extra = extra_nodes(groups, pending_nodes) + coming
    return max(0, max_surge - extra + finished_heirs)


def rollout_in_progress(groups: NodeGroups, pending_nodes: Sequence[PendingNode]) -> bool:
    """Whether anything is left to do or in flight (autoscaling stays off until this is false)."""
    return bool(
        groups.outdated
        or groups.donors
        or groups.heirs
        or groups.mints
        or groups.obsolete
        or groups.awaiting_annotation
        or pending_nodes
    )
