"""The pure decisions composed the way the NodeImage and PendingNode reconcilers compose them,
run against an in-memory cluster and cloud: a whole rollout converges, never has more extra
machines than maxSurge (control plane: one), never removes a donor before its heir is Ready, and
moves labels. No I/O; the cluster tests check the same against a real API server and emulator."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from nodewright.api.nodewright.v1alpha1 import (
    NodeRole,
    PendingNode,
    PendingNodeGoal,
    PendingNodeSpec,
    ScalingGroup,
    ScalingGroupSpec,
    ScalingGroupStatus,
)
from nodewright.cloud.models import ImageReference, NodeState
from nodewright.controllers.node_image.draining import DrainPlan
from nodewright.controllers.node_image.grouping import (
    CONTROL_PLANE_SURGE,
    DONOR_ANNOTATION,
    HEIR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    OBSOLETE_ANNOTATION,
    SCALING_GROUP_ANNOTATION,
    SERVED_AS_HEIR_ANNOTATION,
    ClusterNode,
    RolloutTimeouts,
    group_nodes,
    new_node_budget,
    rollout_in_progress,
    settled_joins,
    stale_joins,
)
from nodewright.controllers.node_image.pairing import (
    ReplacementStep,
    labels_to_copy,
    pair_nodes,
    removal_step,
    replacement_step,
)
from nodewright.controllers.node_image.pending_node_decisions import PendingNodeAction, decide_pending_node
from nodewright.controllers.node_image.scale_out import plan_scale_out

PREFIX = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
OLD = "/communityGalleries/g/images/node/versions/1.0.0"
NEW = "/communityGalleries/g/images/node/versions/2.0.0"
DESIRED = ImageReference.parse(NEW)
START = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)


@dataclass
class Machine:
    name: str
    group: str
    image: str
    created: int
    deleted: int | None = None


@dataclass
class World:
    """An in-memory cluster (Nodes, PendingNodes) and cloud (machines), advanced tick by tick."""

    max_surge: int
    join_ticks: int
    ready_ticks: int
    groups: dict[str, NodeRole]
    tick: int = 0
    machines: dict[str, Machine] = field(default_factory=dict)
    nodes: dict[str, ClusterNode] = field(default_factory=dict)
    pending: dict[str, PendingNode] = field(default_factory=dict)
    counter: int = 0
    original: dict[NodeRole, int] = field(default_factory=dict)
    removed_heirs: list[str] = field(default_factory=list)
    """Nodes removed although they had served as a heir (must stay empty)."""

    def add_original(self, group: str, count: int) -> None:
        for _ in range(count):
            machine = self._machine(group, OLD)
            self.nodes[machine.name] = ClusterNode(
                name=machine.name,
                provider_id=self._provider_id(machine),
                annotations={SCALING_GROUP_ANNOTATION: PREFIX + group, NODE_IMAGE_ANNOTATION: OLD},
                labels={"example.com/slot": machine.name, "kubernetes.io/hostname": machine.name},
                ready=True,
            )
            role = self.groups[group]
            self.original[role] = self.original.get(role, 0) + 1

    def _machine(self, group: str, image: str) -> Machine:
        self.counter += 1
        machine = Machine(name=f"{group}-{self.counter:03d}", group=group, image=image, created=self.tick)
        self.machines[machine.name] = machine
        return machine

    @staticmethod
    def _provider_id(machine: Machine) -> str:
        return f"azure://{PREFIX}{machine.group}/virtualMachines/{machine.name}"

    def now(self) -> datetime:
        return START + timedelta(seconds=10 * self.tick)

    def scaling_groups(self) -> list[ScalingGroup]:
        return [
            ScalingGroup(
                metadata={"name": name},
                spec=ScalingGroupSpec(group_id=PREFIX + name, node_image="cluster", role=role),
                status=ScalingGroupStatus(image_reference=NEW),
            )
            for name, role in self.groups.items()
        ]

    # ---- the cloud and the kubelets ------------------------------------------------------------

    def advance_cloud(self) -> None:
        """New machines register a Node after ``join_ticks`` (unannotated, not Ready) and become
        Ready ``ready_ticks`` later; deleted machines vanish one tick after deletion."""
        for machine in list(self.machines.values()):
            if machine.deleted is not None:
                if self.tick > machine.deleted:
                    del self.machines[machine.name]
                continue
            node = self.nodes.get(machine.name)
            if node is None and machine.image == NEW and self.tick - machine.created >= self.join_ticks:
                self.nodes[machine.name] = ClusterNode(
                    name=machine.name, provider_id=self._provider_id(machine), ready=False
                )
            elif (
                node is not None
                and not node.ready
                and self.tick - machine.created >= self.join_ticks + self.ready_ticks
            ):
                self.nodes[machine.name] = dataclasses.replace(node, ready=True)

    def cloud_state(self, name: str) -> NodeState:
        machine = self.machines.get(name)
        if machine is None:
            return NodeState.TERMINATED
        if machine.deleted is not None:
            return NodeState.TERMINATING
        return NodeState.READY if self.tick - machine.created >= self.join_ticks else NodeState.CREATING

    # ---- the reconcilers -----------------------------------------------------------------------

    def annotate(self, name: str, **changes: str | None) -> None:
        node = self.nodes[name]
        annotations = dict(node.annotations)
        for key, value in changes.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        self.nodes[name] = dataclasses.replace(node, annotations=annotations)

    def reconcile_node_image(self) -> None:
        for name, node in list(self.nodes.items()):
            if not node.annotations.get(NODE_IMAGE_ANNOTATION):
                machine = self.machines[name]
                self.annotate(
                    name,
                    **{
                        SCALING_GROUP_ANNOTATION: PREFIX + machine.group,
                        NODE_IMAGE_ANNOTATION: machine.image,
                    },
                )
        pending_nodes = list(self.pending.values())
        groups = group_nodes(self.nodes.values(), pending_nodes, DESIRED)
        for join in settled_joins(groups, pending_nodes):
            del self.pending[join.name]
        for stale in stale_joins(groups, pending_nodes):
            del self.pending[stale.pending_node.name]
        pending_nodes = list(self.pending.values())
        budget = new_node_budget(self.max_surge, groups, pending_nodes)
        pairing = pair_nodes(groups)
        for pair in pairing.to_annotate:
            self.annotate(
                pair.heir.name,
                **{DONOR_ANNOTATION: pair.donor.name, SERVED_AS_HEIR_ANNOTATION: pair.donor.name},
            )
            self.annotate(pair.donor.name, **{HEIR_ANNOTATION: pair.heir.name})
            if pair.pending_node is not None:
                del self.pending[pair.pending_node.name]
        for mint in pairing.unneeded_mints:
            self.annotate(mint.node.name, **{OBSOLETE_ANNOTATION: "true"})
            del self.pending[mint.pending_node.name]
        for heir in pairing.clear_donor_annotation:
            self.annotate(
                heir.name, **{DONOR_ANNOTATION: None, SERVED_AS_HEIR_ANNOTATION: heir.served_as_heir}
            )
        for donor in pairing.clear_heir_annotation:
            self.annotate(donor.name, **{HEIR_ANNOTATION: None})
        for pair in pairing.pairs:
            donor, heir = self.nodes[pair.donor.name], self.nodes[pair.heir.name]
            step = replacement_step(dataclasses.replace(pair, donor=donor, heir=heir), DrainPlan())
            if step is ReplacementStep.COPY_LABELS:
                self.nodes[heir.name] = dataclasses.replace(
                    heir, labels={**heir.labels, **labels_to_copy(donor.labels, heir.labels)}
                )
            elif step is ReplacementStep.CORDON:
                self.nodes[donor.name] = dataclasses.replace(donor, unschedulable=True)
            elif step is ReplacementStep.REMOVE:
                assert self.nodes[heir.name].ready, (
                    f"donor {donor.name} removed before heir {heir.name} Ready"
                )
                self.remove(donor)
        for obsolete in groups.obsolete:
            step = removal_step(self.nodes[obsolete.name], DrainPlan())
            if step is ReplacementStep.CORDON:
                self.nodes[obsolete.name] = dataclasses.replace(obsolete, unschedulable=True)
            elif step is ReplacementStep.REMOVE:
                self.remove(self.nodes[obsolete.name])
        plan = plan_scale_out(
            groups, pairing, pending_nodes, self.scaling_groups(), desired_image=DESIRED, budget=budget
        )
        for scale_out in plan.scale_outs:
            for _ in range(scale_out.count):
                machine = self._machine(scale_out.scaling_group, NEW)
                self.pending[machine.name] = PendingNode(
                    metadata={"name": machine.name},
                    spec=PendingNodeSpec(
                        provider_id=self._provider_id(machine),
                        group_id=scale_out.group_id,
                        node_name=machine.name,
                        goal=PendingNodeGoal.JOIN,
                        deadline=(self.now() + timedelta(minutes=30)).isoformat(),
                    ),
                )

    def replay_join(self) -> None:
        """A Join for the first node that served as a heir lands again, as a create from a deposed
        leader would (named after the node, as every Join is)."""
        heir = next((n for n in sorted(self.nodes.values(), key=lambda n: n.name) if n.served_as_heir), None)
        if heir is None or heir.name in self.pending:
            return
        self.pending[heir.name] = PendingNode(
            metadata={"name": heir.name},
            spec=PendingNodeSpec(
                provider_id=heir.provider_id,
                group_id=heir.scaling_group_id,
                node_name=heir.name,
                goal=PendingNodeGoal.JOIN,
                deadline=(self.now() + timedelta(minutes=30)).isoformat(),
            ),
        )

    def remove(self, node: ClusterNode) -> None:
        if node.served_as_heir:
            self.removed_heirs.append(node.name)
        self.pending[node.name] = PendingNode(
            metadata={"name": node.name},
            spec=PendingNodeSpec(
                provider_id=node.provider_id,
                group_id=node.scaling_group_id,
                node_name=node.name,
                goal=PendingNodeGoal.LEAVE,
                deadline=(self.now() + timedelta(minutes=1)).isoformat(),
            ),
        )
        self.machines[node.name].deleted = self.tick
        del self.nodes[node.name]

    def reconcile_pending_nodes(self) -> None:
        for pending_node in list(self.pending.values()):
            decision = decide_pending_node(
                pending_node,
                self.cloud_state(pending_node.name),
                node_exists=pending_node.name in self.nodes,
                now=self.now(),
                timeouts=RolloutTimeouts(),
                node_served_as_heir=pending_node.name in self.nodes
                and bool(self.nodes[pending_node.name].served_as_heir),
            )
            if decision.action is PendingNodeAction.DELETE_RECORD:
                del self.pending[pending_node.name]
            assert decision.action is not PendingNodeAction.GIVE_UP_JOIN

    # ---- invariants ----------------------------------------------------------------------------

    def extra_machines(self, role: NodeRole | None = None) -> int:
        """Machines alive at the cloud beyond the cluster's size (of one role, if given)."""
        alive = [m for m in self.machines.values() if m.deleted is None]
        if role is None:
            return len(alive) - sum(self.original.values())
        return sum(1 for m in alive if self.groups[m.group] is role) - self.original.get(role, 0)


@settings(max_examples=40, deadline=None)
@given(
    max_surge=st.integers(min_value=1, max_value=4),
    join_ticks=st.integers(min_value=0, max_value=3),
    ready_ticks=st.integers(min_value=0, max_value=4),
    control_plane=st.integers(min_value=0, max_value=3),
    workers=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=3),
    replays=st.sets(st.integers(min_value=1, max_value=80), max_size=12),
)
def test_rollout_converges_within_the_surge(
    *,
    max_surge: int,
    join_ticks: int,
    ready_ticks: int,
    control_plane: int,
    workers: list[int],
    replays: set[int],
) -> None:
    """Every outdated node is replaced by one on the desired image, with its labels; at no tick are
    there more than maxSurge extra machines (control plane: one); no PendingNode is left over. A
    Join for a node that already served as a heir, replayed at the ``replays`` ticks (a late
    create from a deposed leader), changes none of that and removes no heir."""
    groups = {"control-plane": NodeRole.CONTROL_PLANE} | {
        f"workers{i}": NodeRole.WORKER for i in range(len(workers))
    }
    world = World(max_surge=max_surge, join_ticks=join_ticks, ready_ticks=ready_ticks, groups=groups)
    world.add_original("control-plane", control_plane)
    for index, count in enumerate(workers):
        world.add_original(f"workers{index}", count)
    originals = {name: dict(node.labels) for name, node in world.nodes.items()}
    size = sum(world.original.values())
    limit = 40 * (size + 1) * (join_ticks + ready_ticks + 3)
    while world.tick < limit:
        world.tick += 1
        world.advance_cloud()
        if world.tick in replays:
            world.replay_join()
        world.reconcile_node_image()
        world.reconcile_pending_nodes()
        assert world.extra_machines() <= max_surge
        assert world.extra_machines(NodeRole.CONTROL_PLANE) <= CONTROL_PLANE_SURGE
        pending_nodes = list(world.pending.values())
        settled = not rollout_in_progress(
            group_nodes(world.nodes.values(), pending_nodes, DESIRED), pending_nodes
        )
        if settled and world.machines.keys() == world.nodes.keys():
            break
    assert world.tick < limit, "rollout did not converge"
    assert world.removed_heirs == [], "a node that served as a heir was removed"
    assert len(world.nodes) == size
    assert all(node.image == NEW for node in world.nodes.values())
    assert not world.pending
    assert set(world.machines) == set(world.nodes), "orphan machine"
    slots = sorted(node.labels["example.com/slot"] for node in world.nodes.values())
    assert slots == sorted(originals), "every donor's custom label moved to exactly one heir"
    for node in world.nodes.values():
        assert node.labels.get("kubernetes.io/hostname") != node.labels["example.com/slot"], (
            "reserved label copied"
        )
