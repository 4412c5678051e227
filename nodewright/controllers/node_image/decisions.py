"""Pure decisions of the node image rollout: what to do, never doing it.

The NodeImage, ScalingGroup and PendingNode reconcilers in this package read the cluster and the
cloud, call these functions, and write what they return. Nothing here does I/O or reads a clock:
time comes in as ``now``. The algorithm follows constellation's node operator (facts in
shared/REFERENCE.md) and closes its gaps:

- nodes whose scaling-group or image annotation is not written yet get their own bucket
  (``awaiting_annotation``) instead of being counted as heirs or up to date;
- the number of extra nodes is ``NodeImage.spec.maxSurge`` instead of a fixed 1;
- draining is planned here (Eviction API, PodDisruptionBudgets, DaemonSet and mirror pods
  skipped, a timeout after which the drain is reported stuck) instead of by a separate
  maintenance operator;
- autoscaling is put back to the value it had before the rollout, not forced on;
- a join that failed at the cloud gives up at once, and a leave that misses its deadline has its
  deletion requested again.

Neighbours: ``nodewright.api.nodewright.v1alpha1`` (the CRD models read and written) and
``nodewright.cloud.models`` (``ImageReference`` parsing and the cloud's ``NodeState``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from nodewright.api.meta import ObjectReference
from nodewright.api.nodewright.v1alpha1 import (
    CONDITION_DEGRADED,
    CONDITION_IMAGE_APPLIED,
    CONDITION_PROGRESSING,
    CONDITION_UP_TO_DATE,
    CloudNodeState,
    NodeImageStatus,
    NodeRole,
    PendingNode,
    PendingNodeGoal,
    ScalingGroup,
)
from nodewright.cloud.models import ImageReference, NodeState
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_resource_id

__all__ = [
    "BLOCKING_PROBLEMS",
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
    "AutoscalingChange",
    "ClusterNode",
    "ConditionState",
    "DrainPlan",
    "InvalidImageError",
    "Mint",
    "NodeGroups",
    "PairingPlan",
    "PendingNodeAction",
    "PendingNodeDecision",
    "PodKey",
    "ReplacementPair",
    "ReplacementStep",
    "RolloutTimeouts",
    "ScaleOut",
    "ScaleOutBlocker",
    "ScaleOutPlan",
    "SkipReason",
    "cloud_state_of",
    "decide_autoscaling",
    "decide_pending_node",
    "extra_nodes",
    "group_nodes",
    "is_reserved_label",
    "labels_to_copy",
    "new_node_budget",
    "node_image_status",
    "nodes_to_restore",
    "pair_nodes",
    "parse_desired_image",
    "plan_drain",
    "plan_scale_out",
    "removal_step",
    "replacement_step",
    "rollout_conditions",
    "rollout_in_progress",
    "same_image",
    "selector_matches",
    "settled_joins",
]

# ---- names on the wire ------------------------------------------------------------------------

SCALING_GROUP_ANNOTATION = "nodewright.io/scaling-group-id"
"""On a Node: the ARM ID of the scale set its machine belongs to (from the cloud)."""
NODE_IMAGE_ANNOTATION = "nodewright.io/node-image"
"""On a Node: the image its machine booted (from the cloud), as ``ImageReference.format()``."""
DONOR_ANNOTATION = "nodewright.io/donor"
"""On a heir: the name of the outdated node it replaces."""
HEIR_ANNOTATION = "nodewright.io/heir"
"""On a donor: the name of the new node replacing it."""
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

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ClusterNode:
        """Read a Node as the API server returns it."""
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return cls(
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            provider_id=str(spec.get("providerID") or ""),
            annotations=dict(metadata.get("annotations") or {}),
            labels=dict(metadata.get("labels") or {}),
            ready=ready,
            unschedulable=bool(spec.get("unschedulable", False)),
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
        ]


def _same_machine(node: ClusterNode, pending_node: PendingNode) -> bool:
    """A PendingNode names a node by node name or by providerID (case-insensitive)."""
    if pending_node.spec.node_name and pending_node.spec.node_name == node.name:
        return True
    return bool(node.provider_id) and pending_node.spec.provider_id.lower() == node.provider_id.lower()


def _joins(pending_nodes: Iterable[PendingNode]) -> list[PendingNode]:
    return [p for p in pending_nodes if p.spec.goal is PendingNodeGoal.JOIN]


def group_nodes(
    nodes: Iterable[ClusterNode],
    pending_nodes: Iterable[PendingNode],
    desired_image: ImageReference,
    *,
    invalid: Collection[str] = (),
) -> NodeGroups:
    """Sort nodes into groups; the first rule that matches wins:

    1. no providerID, or named in ``invalid`` (the cloud could not place it) -> invalid;
    2. obsolete annotation -> obsolete;
    3. scaling-group or image annotation missing -> awaiting annotation;
    4. image differs from ``desired_image`` -> donor if it has a heir, else outdated;
    5. donor annotation -> heir;
    6. named by a Join PendingNode -> mint;
    7. otherwise up to date.
    Each list is sorted by node name.
    """
    joins = _joins(pending_nodes)
    groups = NodeGroups()
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.provider_id or node.name in invalid:
            groups.invalid.append(node)
        elif node.obsolete:
            groups.obsolete.append(node)
        elif not node.scaling_group_id or not node.image:
            groups.awaiting_annotation.append(node)
        elif not same_image(node.image, desired_image):
            (groups.donors if node.heir else groups.outdated).append(node)
        elif node.donor:
            groups.heirs.append(node)
        elif (join := next((p for p in joins if _same_machine(node, p)), None)) is not None:
            groups.mints.append(Mint(node=node, pending_node=join))
        else:
            groups.up_to_date.append(node)
    return groups


def _joins_without_node(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> list[PendingNode]:
    nodes = groups.all_nodes()
    return [p for p in _joins(pending_nodes) if not any(_same_machine(node, p) for node in nodes)]


def settled_joins(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> list[PendingNode]:
    """Join PendingNodes whose node exists but is no longer a mint: a heir whose record was not
    deleted before a restart, or a node that came up outdated because the image changed while it
    joined. They are done and should be deleted, or they would hold the surge forever."""
    settled_nodes = [*groups.outdated, *groups.donors, *groups.heirs, *groups.up_to_date]
    return [p for p in _joins(pending_nodes) if any(_same_machine(node, p) for node in settled_nodes)]


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


def new_node_budget(max_surge: int, groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> int:
    """How many new nodes may be created now: ``max(0, max_surge - extra_nodes)``."""
    return max(0, max_surge - extra_nodes(groups, pending_nodes))


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


# ---- pairing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplacementPair:
    """An outdated node (donor) and the new node (heir) that replaces it. ``pending_node`` is the
    heir's Join PendingNode when the pair is new (deleted once both annotations are written)."""

    donor: ClusterNode
    heir: ClusterNode
    pending_node: PendingNode | None = None


@dataclass
class PairingPlan:
    """What pairing decides, for the reconciler to write in this order: annotate ``to_annotate``
    (the heir's donor annotation first, then the donor's heir annotation, then delete the heir's
    Join PendingNode), mark ``unneeded_mints`` obsolete, clear stale annotations."""

    existing: list[ReplacementPair] = field(default_factory=list)
    to_annotate: list[ReplacementPair] = field(default_factory=list)
    unneeded_mints: list[Mint] = field(default_factory=list)
    clear_donor_annotation: list[ClusterNode] = field(default_factory=list)
    clear_heir_annotation: list[ClusterNode] = field(default_factory=list)

    @property
    def pairs(self) -> list[ReplacementPair]:
        """Every pair to work on, existing and new."""
        return [*self.existing, *self.to_annotate]


def _same_group(first: str, second: str) -> bool:
    return bool(first) and first.lower() == second.lower()


def pair_nodes(groups: NodeGroups) -> PairingPlan:
    """Pair donors with heirs and mints with outdated nodes of the same scaling group.

    - A donor and a heir that name each other are an existing pair.
    - A heir whose donor annotation names an outdated node of its group (a restart came between
      the two annotation writes) completes that pair.
    - Other heirs lost their donor (it was removed: the replacement is done, or it vanished): their
      donor annotation is cleared and they count as up to date. Donors without their heir get
      their heir annotation cleared and become outdated again.
    - Each mint, by name, takes the first outdated node of its scaling group, by name; a mint with
      none left is not needed and becomes obsolete (it is removed like any other node).
    """
    plan = PairingPlan()
    donors_by_name = {node.name: node for node in groups.donors}
    outdated_by_name = {node.name: node for node in groups.outdated}
    paired_donors: set[str] = set()
    taken_outdated: set[str] = set()
    for heir in groups.heirs:
        donor = donors_by_name.get(heir.donor)
        if donor is not None and donor.heir == heir.name and donor.name not in paired_donors:
            plan.existing.append(ReplacementPair(donor=donor, heir=heir))
            paired_donors.add(donor.name)
            continue
        outdated = outdated_by_name.get(heir.donor)
        if (
            outdated is not None
            and outdated.name not in taken_outdated
            and _same_group(outdated.scaling_group_id, heir.scaling_group_id)
        ):
            plan.to_annotate.append(ReplacementPair(donor=outdated, heir=heir))
            taken_outdated.add(outdated.name)
            continue
        plan.clear_donor_annotation.append(heir)
    plan.clear_heir_annotation = [donor for donor in groups.donors if donor.name not in paired_donors]
    available = [node for node in groups.outdated if node.name not in taken_outdated]
    for mint in groups.mints:
        match = next(
            (
                node
                for node in available
                if _same_group(node.scaling_group_id, mint.pending_node.spec.group_id)
            ),
            None,
        )
        if match is None:
            plan.unneeded_mints.append(mint)
            continue
        available.remove(match)
        plan.to_annotate.append(ReplacementPair(donor=match, heir=mint.node, pending_node=mint.pending_node))
    return plan


def nodes_to_restore(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> list[ClusterNode]:
    """Nodes that an abandoned replacement left marked: cordoned by us (drain-started annotation)
    but no longer being taken out (a donor whose heir vanished, or any node once the NodeImage
    names its image again), or up to date with a heir annotation. They get their marks removed
    and, if we cordoned them, are made schedulable again. Nodes with a Leave are left alone."""
    leaving = {p.spec.node_name for p in pending_nodes if p.spec.goal is PendingNodeGoal.LEAVE}
    return [
        node
        for node in [*groups.outdated, *groups.up_to_date]
        if node.name not in leaving
        and (DRAIN_STARTED_ANNOTATION in node.annotations or HEIR_ANNOTATION in node.annotations)
    ]


# ---- labels -------------------------------------------------------------------------------------


def is_reserved_label(key: str) -> bool:
    """Whether a label key belongs to Kubernetes (``kubernetes.io``, ``k8s.io`` and their
    subdomains, with or without a name part) and so is never copied to a heir."""
    return RESERVED_LABEL_PATTERN.match(key) is not None


def labels_to_copy(donor_labels: Mapping[str, str], heir_labels: Mapping[str, str]) -> dict[str, str]:
    """The donor's labels the heir lacks or has with another value, reserved keys excluded. Labels
    only the heir has are left alone."""
    return {
        key: value
        for key, value in sorted(donor_labels.items())
        if not is_reserved_label(key) and heir_labels.get(key) != value
    }


# ---- steps of one replacement -------------------------------------------------------------------


class ReplacementStep(enum.Enum):
    """Where one replacement (or removal of an obsolete node) stands; the value is the reason
    shown on the Progressing condition."""

    COPY_LABELS = "CopyingLabels"
    WAIT_FOR_HEIR_READY = "WaitingForHeirReady"
    CORDON = "Cordoning"
    DRAIN = "Draining"
    REMOVE = "RemovingNodes"


def removal_step(node: ClusterNode, drain: DrainPlan | None = None) -> ReplacementStep:
    """The next step to take a node out: cordon it, drain it (``drain`` is the latest plan, if one
    was made), then remove it (Leave PendingNode, machine and Node deleted)."""
    if not node.unschedulable:
        return ReplacementStep.CORDON
    if drain is None or not drain.done:
        return ReplacementStep.DRAIN
    return ReplacementStep.REMOVE


def replacement_step(pair: ReplacementPair, drain: DrainPlan | None = None) -> ReplacementStep:
    """The next step of a replacement: copy labels to the heir, wait until the heir is Ready,
    then take the donor out (``removal_step``). The heir's readiness is checked on every call, so
    a donor is never removed while its heir is not Ready."""
    if labels_to_copy(pair.donor.labels, pair.heir.labels):
        return ReplacementStep.COPY_LABELS
    if not pair.heir.ready:
        return ReplacementStep.WAIT_FOR_HEIR_READY
    return removal_step(pair.donor, drain)


# ---- scale-out ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleOut:
    """Add ``count`` machines to a scale set (one at a time, each tracked by a Join PendingNode)."""

    group_id: str
    scaling_group: str
    count: int


@dataclass(frozen=True)
class ScaleOutBlocker:
    """Why outdated nodes of a scale set get no replacement now. ``reason`` is a condition
    reason. Problems a human must fix (``BLOCKING_PROBLEMS``): ScalingGroupMissing,
    ScalingGroupFailed (its reconciler could not apply the image). Waits that end by themselves:
    ScalingGroupImageNotApplied (not applied yet), AutoscalerRunning, WaitingForControlPlane."""

    group_id: str
    reason: str
    message: str
    outdated: int


BLOCKING_PROBLEMS = frozenset({"ScalingGroupMissing", "ScalingGroupFailed"})
"""Scale-out blockers that make the NodeImage Degraded (and get a Warning Event)."""


@dataclass
class ScaleOutPlan:
    scale_outs: list[ScaleOut] = field(default_factory=list)
    blockers: list[ScaleOutBlocker] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(scale_out.count for scale_out in self.scale_outs)


def _roles(groups: NodeGroups, groups_by_id: Mapping[str, ScalingGroup]) -> dict[str, NodeRole]:
    """Each scale set's role (keyed by lowercased ID): its ScalingGroup's, or, for a scale set
    without one, ControlPlane when any of its nodes has the control-plane role label."""
    roles = {key: scaling_group.spec.role for key, scaling_group in groups_by_id.items()}
    for node in groups.all_nodes():
        key = node.scaling_group_id.lower()
        if key in groups_by_id:
            continue
        if CONTROL_PLANE_LABEL in node.labels:
            roles[key] = NodeRole.CONTROL_PLANE
        else:
            roles.setdefault(key, NodeRole.WORKER)
    return roles


def _count_by_group(group_ids: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for group_id in group_ids:
        counts[group_id.lower()] = counts.get(group_id.lower(), 0) + 1
    return counts


def _scale_out_blocker(
    key: str,
    outdated: int,
    scaling_group: ScalingGroup | None,
    desired_image: ImageReference,
    *,
    autoscaler_running: bool,
    waiting_for_control_plane: bool,
) -> ScaleOutBlocker | None:
    """Why a scale set with unreplaced outdated nodes may not get machines now, if it may not."""
    if scaling_group is None:
        return ScaleOutBlocker(key, "ScalingGroupMissing", f"No ScalingGroup has groupID {key}", outdated)
    applied = scaling_group.status.image_reference
    if not applied or not same_image(applied, desired_image):
        failed = next(
            (
                c
                for c in scaling_group.status.conditions
                if c.type == CONDITION_IMAGE_APPLIED
                and c.status == "False"
                and c.observed_generation in (None, scaling_group.metadata.get("generation"))
            ),
            None,
        )
        if failed is not None:
            return ScaleOutBlocker(
                key,
                "ScalingGroupFailed",
                f"ScalingGroup {scaling_group.name}: {failed.reason}: {failed.message}",
                outdated,
            )
        return ScaleOutBlocker(
            key,
            "ScalingGroupImageNotApplied",
            f"ScalingGroup {scaling_group.name} still creates machines from {applied or 'no image yet'}",
            outdated,
        )
    if autoscaler_running:
        return ScaleOutBlocker(
            key, "AutoscalerRunning", "Waiting for the cluster autoscaler to stop", outdated
        )
    if waiting_for_control_plane:
        return ScaleOutBlocker(
            key, "WaitingForControlPlane", "Control-plane nodes are replaced first", outdated
        )
    return None


def plan_scale_out(
    groups: NodeGroups,
    pairing: PairingPlan,
    pending_nodes: Sequence[PendingNode],
    scaling_groups: Iterable[ScalingGroup],
    *,
    desired_image: ImageReference,
    budget: int,
    autoscaler_running: bool = False,
) -> ScaleOutPlan:
    """Which scale sets get new machines now, and how many, within ``budget``.

    A scale set needs one machine per outdated node that has no heir (after ``pairing``), less the
    machines already joining for it (Join PendingNodes whose node has not registered or awaits
    annotation). It gets none while its ScalingGroup is missing, while the scale set's model does
    not yet name the desired image, or while the cluster autoscaler runs. Control-plane groups
    come first and one machine at a time (``CONTROL_PLANE_SURGE``); workers get nothing while any
    control-plane node is outdated or being replaced, then share the budget round-robin (scale sets
    in ID order) so that several scale sets progress together.
    """
    groups_by_id = {g.spec.group_id.lower(): g for g in scaling_groups}
    roles = _roles(groups, groups_by_id)

    def is_control_plane(group_id: str) -> bool:
        return roles.get(group_id.lower(), NodeRole.WORKER) is NodeRole.CONTROL_PLANE

    paired_donors = {pair.donor.name for pair in pairing.to_annotate}
    unreplaced = _count_by_group(
        node.scaling_group_id for node in groups.outdated if node.name not in paired_donors
    )
    awaiting = groups.awaiting_annotation
    joining = _count_by_group(
        join.spec.group_id
        for join in [
            *_joins_without_node(groups, pending_nodes),
            *(j for j in _joins(pending_nodes) if any(_same_machine(node, j) for node in awaiting)),
        ]
    )
    new_nodes = [*groups.heirs, *(mint.node for mint in groups.mints)]
    control_plane_in_flight = sum(count for key, count in joining.items() if is_control_plane(key)) + sum(
        1 for node in new_nodes if is_control_plane(node.scaling_group_id)
    )
    control_plane_unfinished = (
        control_plane_in_flight > 0
        or any(is_control_plane(key) for key in unreplaced)
        or any(is_control_plane(node.scaling_group_id) for node in groups.donors)
    )

    plan = ScaleOutPlan()
    needs: dict[str, int] = {}
    for key in sorted(unreplaced, key=lambda k: (not is_control_plane(k), k)):
        need = unreplaced[key] - joining.get(key, 0)
        if need <= 0:
            continue
        blocker = _scale_out_blocker(
            key,
            unreplaced[key],
            groups_by_id.get(key),
            desired_image,
            autoscaler_running=autoscaler_running,
            waiting_for_control_plane=not is_control_plane(key) and control_plane_unfinished,
        )
        if blocker is not None:
            plan.blockers.append(blocker)
        else:
            needs[key] = need

    remaining = budget
    counts: dict[str, int] = {}
    control_plane_room = max(0, CONTROL_PLANE_SURGE - control_plane_in_flight)
    for key, need in needs.items():
        if is_control_plane(key):
            take = min(need, remaining, control_plane_room)
            if take > 0:
                counts[key] = take
                remaining -= take
                control_plane_room -= take
    workers = [key for key in needs if not is_control_plane(key)]
    while remaining > 0 and any(counts.get(key, 0) < needs[key] for key in workers):
        for key in workers:
            if remaining > 0 and counts.get(key, 0) < needs[key]:
                counts[key] = counts.get(key, 0) + 1
                remaining -= 1
    for key, count in counts.items():
        plan.scale_outs.append(ScaleOut(groups_by_id[key].spec.group_id, groups_by_id[key].name, count))
    return plan


# ---- draining -----------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class PodKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class SkipReason(enum.Enum):
    """Why a pod on a draining node is not evicted."""

    DAEMON_SET = "DaemonSet"
    """Its DaemonSet would put it straight back; it goes with the node."""
    MIRROR_POD = "MirrorPod"
    """A static pod's mirror: the Eviction API cannot remove it."""
    TERMINATING = "Terminating"
    """Already being deleted and past its grace period: nothing more to wait for."""
    FINISHED = "Finished"
    """Succeeded or Failed: no workload left to move."""


@dataclass
class DrainPlan:
    """What to do with a draining node's pods now. ``blocked`` pods wait for a
    PodDisruptionBudget to allow a disruption; ``terminating`` pods are within their grace period."""

    evict: list[PodKey] = field(default_factory=list)
    blocked: dict[PodKey, str] = field(default_factory=dict)
    terminating: list[PodKey] = field(default_factory=list)
    skipped: dict[PodKey, SkipReason] = field(default_factory=dict)
    stuck: bool = False

    @property
    def done(self) -> bool:
        """Nothing left to evict or wait for: the node can be removed."""
        return not self.evict and not self.blocked and not self.terminating


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics as policy/v1 PodDisruptionBudgets use them: a missing
    selector matches nothing, an empty one matches every pod of the namespace."""
    if selector is None:
        return False
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _skip_reason(pod: Mapping[str, Any], now: datetime) -> SkipReason | Literal["wait"] | None:
    metadata = pod.get("metadata") or {}
    if MIRROR_POD_ANNOTATION in (metadata.get("annotations") or {}):
        return SkipReason.MIRROR_POD
    owners = metadata.get("ownerReferences") or []
    if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
        return SkipReason.DAEMON_SET
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return SkipReason.FINISHED
    if metadata.get("deletionTimestamp"):
        deletion = _parse_time(metadata.get("deletionTimestamp"))
        if deletion is not None and deletion > now:
            return "wait"
        return SkipReason.TERMINATING
    return None


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def plan_drain(
    pods: Iterable[Mapping[str, Any]],
    pod_disruption_budgets: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    drain_started: datetime | None,
    timeout: timedelta,
) -> DrainPlan:
    """Decide which pods of a cordoned node to evict now, as the Eviction API would allow it.

    Skipped: DaemonSet pods, mirror pods, finished pods, and pods being deleted whose grace period
    is over (those within it are waited for). Pending pods are evicted whatever their budget says
    (the API server deletes pods that are not running without consulting budgets). A running pod
    covered by one PodDisruptionBudget is evicted while that budget's ``disruptionsAllowed`` lasts,
    counting the evictions planned in this call; a pod that is not Ready is evicted when the budget
    lets unhealthy pods go (``AlwaysAllow``, or enough healthy pods). A pod under two budgets, or a
    budget whose status is older than its spec, waits: the API server would refuse it. The drain is
    ``stuck`` when it is not done ``timeout`` after ``drain_started``.
    """
    budgets = list(pod_disruption_budgets)
    allowed: dict[PodKey, int] = {}
    for budget in budgets:
        metadata = budget.get("metadata") or {}
        status = budget.get("status") or {}
        key = PodKey(metadata.get("namespace", ""), metadata.get("name", ""))
        current = int(status.get("observedGeneration", 0)) >= int(metadata.get("generation", 0))
        allowed[key] = int(status.get("disruptionsAllowed", 0)) if current else 0

    plan = DrainPlan()
    for pod in sorted(pods, key=_pod_key):
        key = _pod_key(pod)
        reason = _skip_reason(pod, now)
        if reason == "wait":
            plan.terminating.append(key)
            continue
        if isinstance(reason, SkipReason):
            plan.skipped[key] = reason
            continue
        if (pod.get("status") or {}).get("phase") == "Pending":
            plan.evict.append(key)
            continue
        labels = (pod.get("metadata") or {}).get("labels") or {}
        covering = [
            b
            for b in budgets
            if (b.get("metadata") or {}).get("namespace", "") == key.namespace
            and selector_matches((b.get("spec") or {}).get("selector"), labels)
        ]
        if not covering:
            plan.evict.append(key)
            continue
        if len(covering) > 1:
            names = ", ".join(sorted((b.get("metadata") or {}).get("name", "") for b in covering))
            plan.blocked[key] = f"covered by more than one PodDisruptionBudget ({names})"
            continue
        budget = covering[0]
        budget_key = PodKey(key.namespace, (budget.get("metadata") or {}).get("name", ""))
        if not _pod_ready(pod) and _unhealthy_may_go(budget):
            plan.evict.append(key)
        elif allowed[budget_key] > 0:
            allowed[budget_key] -= 1
            plan.evict.append(key)
        else:
            plan.blocked[key] = f"PodDisruptionBudget {budget_key.name} allows no disruption now"
    plan.stuck = not plan.done and drain_started is not None and now - drain_started >= timeout
    return plan


def _pod_key(pod: Mapping[str, Any]) -> PodKey:
    metadata = pod.get("metadata") or {}
    return PodKey(metadata.get("namespace", ""), metadata.get("name", ""))


def _unhealthy_may_go(budget: Mapping[str, Any]) -> bool:
    """Whether the API server evicts a not-Ready pod under this budget regardless of
    disruptionsAllowed (policy/v1 unhealthyPodEvictionPolicy)."""
    if (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = budget.get("status") or {}
    return int(status.get("currentHealthy", 0)) >= int(status.get("desiredHealthy", 0)) > 0


# ---- pending nodes ------------------------------------------------------------------------------


def cloud_state_of(state: NodeState) -> CloudNodeState:
    """The cloud layer's node state as ``PendingNode.status.cspState``."""
    return CloudNodeState(state.value)


class PendingNodeAction(enum.Enum):
    WAIT = "Wait"
    """Nothing to do but look again later (or the goal is reached and the record is kept)."""
    DELETE_RECORD = "DeleteRecord"
    """The PendingNode is done: a leave reached Terminated, or a join's machine is gone."""
    GIVE_UP_JOIN = "GiveUpJoin"
    """Delete the machine and turn the record into a Leave with ``deadline``."""
    DELETE_MACHINE = "DeleteMachine"
    """(Re)request the machine's deletion; a leave past its deadline also gets a new ``deadline``."""


@dataclass(frozen=True)
class PendingNodeDecision:
    """The status to record and what to do. ``reason`` is for logs and Events."""

    cloud_state: CloudNodeState
    reached_goal: bool
    action: PendingNodeAction
    reason: str
    deadline: datetime | None = None
    requeue_after: timedelta | None = None


_ALIVE = {NodeState.CREATING, NodeState.READY, NodeState.STOPPED, NodeState.FAILED}


def decide_pending_node(
    pending_node: PendingNode,
    cloud_state: NodeState,
    *,
    node_exists: bool,
    now: datetime,
    timeouts: RolloutTimeouts,
) -> PendingNodeDecision:
    """What the PendingNode reconciler does with one record.

    Join: reached when the machine is Ready at the cloud and its Node exists (the record is then
    kept for the NodeImage reconciler to pair). A machine that Failed, or a join past its
    deadline, is given up: the machine is deleted and the record becomes a Leave due
    ``timeouts.leave`` from now. A machine already gone ends the record.
    Leave: reached when the machine is Terminated, which ends the record. While the machine is
    still alive its deletion is requested (idempotent, so a restart between creating the record
    and deleting the machine loses nothing); past the deadline the deletion is requested again
    with a new deadline.
    """
    state = cloud_state_of(cloud_state)
    deadline = pending_node.spec.deadline_time
    overdue = deadline is not None and now >= deadline
    wait = timeouts.poll if deadline is None or overdue else min(timeouts.poll, deadline - now)
    if pending_node.spec.goal is PendingNodeGoal.JOIN:
        if cloud_state is NodeState.TERMINATED:
            return PendingNodeDecision(state, False, PendingNodeAction.DELETE_RECORD, "MachineGone")
        if cloud_state is NodeState.READY and node_exists:
            return PendingNodeDecision(state, True, PendingNodeAction.WAIT, "Joined")
        if cloud_state is NodeState.FAILED:
            return PendingNodeDecision(
                state, False, PendingNodeAction.GIVE_UP_JOIN, "MachineFailed", deadline=now + timeouts.leave
            )
        if overdue:
            return PendingNodeDecision(
                state, False, PendingNodeAction.GIVE_UP_JOIN, "JoinTimedOut", deadline=now + timeouts.leave
            )
        return PendingNodeDecision(state, False, PendingNodeAction.WAIT, "Joining", requeue_after=wait)
    if cloud_state is NodeState.TERMINATED:
        return PendingNodeDecision(state, True, PendingNodeAction.DELETE_RECORD, "Left")
    if overdue:
        return PendingNodeDecision(
            state,
            False,
            PendingNodeAction.DELETE_MACHINE,
            "LeaveTimedOut",
            deadline=now + timeouts.leave,
            requeue_after=timeouts.leave,
        )
    if cloud_state in _ALIVE:
        return PendingNodeDecision(
            state, False, PendingNodeAction.DELETE_MACHINE, "DeletingMachine", requeue_after=wait
        )
    return PendingNodeDecision(state, False, PendingNodeAction.WAIT, "Leaving", requeue_after=wait)


# ---- autoscaling --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AutoscalingChange:
    """Write ``spec.enabled = enabled`` on the AutoscalingStrategy and set its
    ENABLED_BEFORE_ROLLOUT annotation to ``remembered`` (``None``: remove it)."""

    enabled: bool
    remembered: bool | None


def decide_autoscaling(
    spec_enabled: bool, remembered: bool | None, *, in_progress: bool
) -> AutoscalingChange | None:
    """Keep autoscaling off during a rollout and put back what was there before.

    Starting a rollout remembers ``spec.enabled`` and turns it off. If someone turns it on while
    the rollout runs, that wish is remembered instead and it is turned off again. When the rollout
    is over the remembered value is written back and forgotten. ``None``: nothing to change.
    """
    if in_progress:
        if remembered is None:
            return AutoscalingChange(enabled=False, remembered=spec_enabled)
        if spec_enabled:
            return AutoscalingChange(enabled=False, remembered=True)
        return None
    if remembered is None:
        return None
    return AutoscalingChange(enabled=remembered, remembered=None)


# ---- status and conditions ----------------------------------------------------------------------


def _references(nodes: Iterable[ClusterNode]) -> list[ObjectReference]:
    return [node.reference() for node in sorted(nodes, key=lambda n: n.name)]


def node_image_status(
    groups: NodeGroups,
    pending_nodes: Iterable[PendingNode],
    *,
    budget: int,
    observed_generation: int,
) -> NodeImageStatus:
    """The NodeImage status lists (sorted by name, so an unchanged rollout writes an unchanged
    status), budget and counts; conditions are set by the caller from ``rollout_conditions``."""
    pending = sorted(pending_nodes, key=lambda p: p.name)
    total = len(groups.all_nodes())
    return NodeImageStatus(
        outdated=_references(groups.outdated),
        up_to_date=_references(groups.up_to_date),
        donors=_references(groups.donors),
        heirs=_references(groups.heirs),
        mints=_references(mint.node for mint in groups.mints),
        pending=[
            ObjectReference(
                api_version=p.API_VERSION, kind=p.KIND, name=p.name, uid=str(p.metadata.get("uid", ""))
            )
            for p in pending
        ],
        obsolete=_references(groups.obsolete),
        invalid=_references(groups.invalid),
        awaiting_annotation=_references(groups.awaiting_annotation),
        budget=budget,
        total_nodes=total,
        up_to_date_nodes=len(groups.up_to_date) + len(groups.heirs) + len(groups.mints),
        observed_generation=observed_generation,
    )


@dataclass(frozen=True)
class ConditionState:
    """A condition's type, status, reason and message; the caller stamps times and generation."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


_STEP_ORDER = [
    ReplacementStep.DRAIN,
    ReplacementStep.CORDON,
    ReplacementStep.WAIT_FOR_HEIR_READY,
    ReplacementStep.COPY_LABELS,
    ReplacementStep.REMOVE,
]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def rollout_conditions(
    groups: NodeGroups,
    pending_nodes: Sequence[PendingNode],
    *,
    image: str,
    image_error: str | None = None,
    steps: Iterable[ReplacementStep] = (),
    scale_out: ScaleOutPlan | None = None,
    stuck_drains: Sequence[str] = (),
) -> list[ConditionState]:
    """UpToDate, Progressing and Degraded for the NodeImage, worded for a human.

    ``steps`` are the current steps of the replacements and removals under way; Progressing's
    reason is the most telling of them (Draining before Cordoning before WaitingForHeirReady ...),
    else JoiningNodes, LeavingNodes, CreatingNodes, a wait (ScalingGroupImageNotApplied,
    AutoscalerRunning, WaitingForControlPlane), WaitingForBudget; Blocked when nothing can move.
    Degraded names the first problem needing a human: InvalidImageReference, a scale-out blocker
    in ``BLOCKING_PROBLEMS``, DrainStuck, InvalidNodes.
    """
    if image_error is not None:
        return [
            ConditionState(CONDITION_UP_TO_DATE, "Unknown", "InvalidImageReference", image_error),
            ConditionState(CONDITION_PROGRESSING, "False", "InvalidImageReference", "Nothing is replaced"),
            ConditionState(CONDITION_DEGRADED, "True", "InvalidImageReference", image_error),
        ]
    blockers = scale_out.blockers if scale_out is not None else []
    total = len(groups.all_nodes())
    current = len(groups.up_to_date) + len(groups.heirs) + len(groups.mints)
    joins = [p for p in pending_nodes if p.spec.goal is PendingNodeGoal.JOIN]
    leaves = [p for p in pending_nodes if p.spec.goal is PendingNodeGoal.LEAVE]
    in_progress = rollout_in_progress(groups, pending_nodes)

    conditions: list[ConditionState] = []
    if not in_progress:
        conditions.append(
            ConditionState(
                CONDITION_UP_TO_DATE, "True", "AllNodesUpToDate", f"All {_plural(total, 'node')} run {image}"
            )
        )
        conditions.append(
            ConditionState(CONDITION_PROGRESSING, "False", "RolloutComplete", "Nothing to replace")
        )
    else:
        details = [
            text
            for count, text in (
                (len(groups.outdated), f"{len(groups.outdated)} outdated"),
                (len(groups.donors), f"{len(groups.donors)} being replaced"),
                (len(joins), f"{len(joins)} joining"),
                (len(leaves), f"{len(leaves)} leaving"),
                (len(groups.obsolete), f"{len(groups.obsolete)} obsolete"),
                (len(groups.awaiting_annotation), f"{len(groups.awaiting_annotation)} awaiting annotation"),
            )
            if count
        ]
        conditions.append(
            ConditionState(
                CONDITION_UP_TO_DATE,
                "False",
                "NodesOutdated",
                f"{current} of {_plural(total, 'node')} run {image}; " + ", ".join(details),
            )
        )
        waits = [b for b in blockers if b.reason not in BLOCKING_PROBLEMS]
        step_set = set(steps)
        step = next((s for s in _STEP_ORDER if s in step_set), None)
        created = scale_out.total if scale_out is not None else 0
        if step is not None:
            reason, message = step.value, _step_message(step_set)
        elif joins:
            reason, message = "JoiningNodes", f"Waiting for {_plural(len(joins), 'new node')} to join"
        elif leaves:
            reason, message = "LeavingNodes", f"Waiting for {_plural(len(leaves), 'machine')} to be deleted"
        elif created:
            reason, message = "CreatingNodes", f"Creating {_plural(created, 'node')}"
        elif waits:
            reason, message = waits[0].reason, "; ".join(dict.fromkeys(b.message for b in waits))
        elif groups.outdated and not blockers:
            reason, message = "WaitingForBudget", "No budget for new nodes yet"
        elif groups.awaiting_annotation:
            reason, message = "AnnotatingNodes", "Reading nodes' scaling groups and images from the cloud"
        else:
            reason, message = "Blocked", "; ".join(b.message for b in blockers) or "Nothing can move"
        conditions.append(
            ConditionState(CONDITION_PROGRESSING, "False" if reason == "Blocked" else "True", reason, message)
        )

    problems: list[tuple[str, str]] = []
    for blocker in blockers:
        if blocker.reason in BLOCKING_PROBLEMS:
            problems.append(
                (blocker.reason, f"{blocker.message} ({_plural(blocker.outdated, 'outdated node')})")
            )
    if stuck_drains:
        problems.append(("DrainStuck", "Drain not finished in time on " + ", ".join(sorted(stuck_drains))))
    if groups.invalid:
        names = ", ".join(node.name for node in groups.invalid)
        problems.append(("InvalidNodes", f"Nodes without providerID or unknown to the cloud: {names}"))
    if problems:
        conditions.append(
            ConditionState(CONDITION_DEGRADED, "True", problems[0][0], "; ".join(m for _, m in problems))
        )
    else:
        conditions.append(
            ConditionState(CONDITION_DEGRADED, "False", "AsExpected", "Nothing needs attention")
        )
    return conditions


def _step_message(steps: set[ReplacementStep]) -> str:
    words = {
        ReplacementStep.DRAIN: "draining",
        ReplacementStep.CORDON: "cordoning",
        ReplacementStep.WAIT_FOR_HEIR_READY: "waiting for the new node to be Ready",
        ReplacementStep.COPY_LABELS: "copying labels",
        ReplacementStep.REMOVE: "removing the old node",
    }
    return "Replacing nodes: " + ", ".join(words[s] for s in _STEP_ORDER if s in steps)
