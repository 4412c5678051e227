"""Which scale sets get new machines now, within the surge budget (pure). Control-plane groups
first and one at a time; workers share the budget round-robin. Owns ``StepsInFlight``: the
capacity steps still running, whose machines count for their step (surge, canary, rollout in
flight) until their Joins exist. Neighbours: ``grouping``, ``pairing``, ``scale_out_operations``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from nodewright.api.nodewright.v1alpha1 import (
    CONDITION_IMAGE_APPLIED,
    NodeRole,
    PendingNode,
    ScaleOutRecord,
    ScalingGroup,
)
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import InvalidResourceIdError, ScaleSetInstanceId, parse_provider_id
from nodewright.controllers.node_image.grouping import (
    CONTROL_PLANE_LABEL,
    CONTROL_PLANE_SURGE,
    ClusterNode,
    NodeGroups,
    _joins,
    _joins_without_node,
    _same_machine,
    same_image,
)
from nodewright.controllers.node_image.pairing import PairingPlan

__all__ = [
    "BLOCKING_PROBLEMS",
    "ScaleOut",
    "ScaleOutBlocker",
    "ScaleOutPlan",
    "StepsInFlight",
    "canary_placed",
    "cap_scale_out",
    "plan_scale_out",
]

# ---- scale-out ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleOut:
    """Add ``count`` machines to a scale set (one capacity step; each machine then tracked by a
    Join PendingNode)."""

    group_id: str
    scaling_group: str
    count: int


@dataclass(frozen=True)
class ScaleOutBlocker:
    """Why outdated nodes of a scale set get no replacement now. ``reason`` is a condition
    reason. Problems a human must fix (``BLOCKING_PROBLEMS``): ScalingGroupMissing,
    ScalingGroupFailed (its reconciler could not apply the image). Waits that end by themselves:
    ScalingGroupImageNotApplied (not applied yet), AutoscalerRunning, WaitingForControlPlane,
    ScaleOutInProgress (the scale set's last capacity step has not ended)."""

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


@dataclass(frozen=True)
class StepsInFlight:
    """The capacity steps still running, by lowercased scale set ID, each as recorded on its
    ScalingGroup (the instance IDs before it, the machines it adds). Until its Joins exist, a
    step's machines are counted by the step alone: against the surge budget, the canary's size,
    and as a rollout in flight. A node of one of them that registered before the step ended (its
    instance ID not among those before) is left out of the grouping: without a Join it would pass
    for an up-to-date node (marked Ready-seen, counted as a finished canary)."""

    steps: Mapping[str, ScaleOutRecord] = field(default_factory=dict)
    """By lowercased scale set ID; each record's ``count`` the machines its step adds."""

    @property
    def counts(self) -> dict[str, int]:
        """The machines each step adds, by lowercased scale set ID."""
        return {key: record.count for key, record in self.steps.items()}

    @property
    def total(self) -> int:
        return sum(record.count for record in self.steps.values())

    def without_their_machines(
        self, nodes: Iterable[ClusterNode], unknown: Collection[str] = ()
    ) -> list[ClusterNode]:
        """``nodes`` less those whose machine a step in flight adds. A node named in ``unknown``
        (the cloud cannot place its machine) stays: a step's machine exists in the cloud before
        its Node registers, so a node the cloud does not know is no step's, but invalid."""
        return [node for node in nodes if node.name in unknown or not self.adds(node)]

    def adds(self, node: ClusterNode) -> bool:
        """Whether ``node``'s machine is one a step adds: in its scale set, not there before it."""
        try:
            machine = parse_provider_id(node.provider_id)
        except InvalidResourceIdError:
            return False
        if isinstance(machine, ScaleSetInstanceId):  # uniform: the providerID names the scale set
            key, instance_id = node.scaling_group_id or str(machine.scale_set), machine.instance_id
        else:  # Flexible: a VM, listed by its name, placed by the node's annotation
            key, instance_id = node.scaling_group_id, machine.name
        before = self._before_lowered.get(key.lower())
        return before is not None and instance_id.lower() not in before

    @cached_property
    def _before_lowered(self) -> dict[str, frozenset[str]]:
        """Each step's ``before``, lowercased once per pass rather than once per node asked about."""
        return {key: frozenset(i.lower() for i in record.before) for key, record in self.steps.items()}


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
    coming: int | None,
    autoscaler_running: bool,
    waiting_for_control_plane: bool,
) -> ScaleOutBlocker | None:
    """Why a scale set with unreplaced outdated nodes may not get machines now, if it may not
    (``coming``: the machines of its capacity step in flight, if one is)."""
    if coming is not None:
        message = f"Waiting for {coming} new machines of {key} (their capacity step runs)"
        return ScaleOutBlocker(key, "ScaleOutInProgress", message, outdated)
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
    in_progress: Mapping[str, int] | None = None,
) -> ScaleOutPlan:
    """Which scale sets get new machines now, and how many, within ``budget``.

    A scale set needs one machine per outdated node that has no heir (after ``pairing``), less the
    machines joining for it (Join PendingNodes whose node has not registered or awaits
    annotation, and the machines of its capacity step in flight, ``in_progress`` by group ID). It
    gets none while that step runs (``ScaleOutInProgress``), while its ScalingGroup is missing,
    while the scale set's model does not yet name the desired image, or while the cluster
    autoscaler runs. Control-plane groups come first and one machine at a time
    (``CONTROL_PLANE_SURGE``); workers get nothing while any control-plane node is outdated or
    being replaced, then share the budget round-robin (scale sets in ID order) so that several
    scale sets progress together.
    """
    groups_by_id = {g.spec.group_id.lower(): g for g in scaling_groups}
    roles = _roles(groups, groups_by_id)

    def is_control_plane(group_id: str) -> bool:
        return roles.get(group_id.lower(), NodeRole.WORKER) is NodeRole.CONTROL_PLANE

    unreplaced = _unreplaced_by_group(groups, pairing)
    coming = {key.lower(): count for key, count in (in_progress or {}).items()}
    joining = _joining_by_group(groups, pending_nodes, coming)
    control_plane_in_flight = _control_plane_in_flight(groups, joining, is_control_plane)
    control_plane_unfinished = control_plane_in_flight > 0 or any(
        is_control_plane(key) for key in [*unreplaced, *(node.scaling_group_id for node in groups.donors)]
    )

    plan = ScaleOutPlan()
    needs: dict[str, int] = {}
    for key in sorted(unreplaced, key=lambda k: (not is_control_plane(k), k)):
        need = unreplaced[key] - joining.get(key, 0)
        if need <= 0 and key not in coming:
            continue
        blocker = _scale_out_blocker(
            key,
            unreplaced[key],
            groups_by_id.get(key),
            desired_image,
            coming=coming.get(key),
            autoscaler_running=autoscaler_running,
            waiting_for_control_plane=not is_control_plane(key) and control_plane_unfinished,
        )
        if blocker is not None:
            plan.blockers.append(blocker)
        else:
            needs[key] = need
    counts = _share_budget(needs, is_control_plane, budget, control_plane_in_flight)
    for key, count in counts.items():
        plan.scale_outs.append(ScaleOut(groups_by_id[key].spec.group_id, groups_by_id[key].name, count))
    return plan


def _unreplaced_by_group(groups: NodeGroups, pairing: PairingPlan) -> dict[str, int]:
    """Outdated nodes per scale set that ``pairing`` gives no heir."""
    paired_donors = {pair.donor.name for pair in pairing.to_annotate}
    return _count_by_group(
        node.scaling_group_id for node in groups.outdated if node.name not in paired_donors
    )


def _control_plane_in_flight(
    groups: NodeGroups, joining: Mapping[str, int], is_control_plane: Callable[[str], bool]
) -> int:
    """Control-plane machines joining, and control-plane heirs and mints."""
    new_nodes = [*groups.heirs, *(mint.node for mint in groups.mints)]
    return sum(count for key, count in joining.items() if is_control_plane(key)) + sum(
        1 for node in new_nodes if is_control_plane(node.scaling_group_id)
    )


def _joining_by_group(
    groups: NodeGroups, pending_nodes: Sequence[PendingNode], coming: Mapping[str, int]
) -> dict[str, int]:
    """Machines joining per scale set: Join PendingNodes whose node has not registered or awaits
    annotation, and the machines ``coming`` from capacity steps in flight."""
    awaiting = groups.awaiting_annotation
    joining = _count_by_group(
        join.spec.group_id
        for join in [
            *_joins_without_node(groups, pending_nodes),
            *(j for j in _joins(pending_nodes) if any(_same_machine(node, j) for node in awaiting)),
        ]
    )
    for key, count in coming.items():
        joining[key] = joining.get(key, 0) + count
    return joining


def _share_budget(
    needs: Mapping[str, int],
    is_control_plane: Callable[[str], bool],
    budget: int,
    control_plane_in_flight: int,
) -> dict[str, int]:
    """How many machines each scale set gets: control-plane sets first within the room
    ``CONTROL_PLANE_SURGE`` leaves beside those in flight, then workers round-robin (in the order
    of ``needs``) until the budget or the needs run out."""
    control_plane_room = max(0, CONTROL_PLANE_SURGE - control_plane_in_flight)
    remaining = budget
    counts: dict[str, int] = {}
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
    return counts


def _on_new_image_by_group(
    groups: NodeGroups, pending_nodes: Sequence[PendingNode], coming: Mapping[str, int] | None
) -> dict[str, int]:
    """Machines on the desired image per scale set: joining, heirs (mints count by their join),
    up-to-date nodes, and those ``coming`` from capacity steps in flight."""
    on_new = _count_by_group(
        [
            *(join.spec.group_id for join in _joins(pending_nodes)),
            *(node.scaling_group_id for node in [*groups.heirs, *groups.up_to_date]),
        ]
    )
    for key, count in (coming or {}).items():
        on_new[key.lower()] = on_new.get(key.lower(), 0) + count
    return on_new


def cap_scale_out(
    plan: ScaleOutPlan,
    groups: NodeGroups,
    pending_nodes: Sequence[PendingNode],
    cap: int | None,
    coming: Mapping[str, int] | None = None,
) -> ScaleOutPlan:
    """``plan`` with each scale set's new machines cut so that at most ``cap`` machines of it run
    the desired image (joining, heirs, mints and up-to-date nodes count, so a restart never adds a
    second canary beside a finished one, and so do the machines ``coming`` from its capacity step
    in flight, by lowercased scale set ID): the canary. ``None`` leaves the plan as it is."""
    if cap is None:
        return plan
    on_new = _on_new_image_by_group(groups, pending_nodes, coming)
    capped = ScaleOutPlan(blockers=list(plan.blockers))
    for scale_out in plan.scale_outs:
        room = max(0, cap - on_new.get(scale_out.group_id.lower(), 0))
        if min(room, scale_out.count) > 0:
            capped.scale_outs.append(
                ScaleOut(scale_out.group_id, scale_out.scaling_group, min(room, scale_out.count))
            )
    return capped


def canary_placed(
    groups: NodeGroups,
    pending_nodes: Sequence[PendingNode],
    canary: int,
    coming: Mapping[str, int] | None = None,
) -> bool:
    """Whether every scale set with outdated nodes already has ``canary`` machines on the desired
    image, those ``coming`` from its capacity step in flight included (so the canary batch is
    whatever is there, even if a restart lost its record)."""
    on_new = _on_new_image_by_group(groups, pending_nodes, coming)
    outdated = {node.scaling_group_id.lower() for node in [*groups.outdated, *groups.donors]}
    return all(on_new.get(key, 0) >= canary for key in outdated)
