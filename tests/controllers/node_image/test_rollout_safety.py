"""Table tests of the pure parts of a safe rollout: which scale sets a NodeImage claims, the
canary/soak/rollback state machine, the health gates, the heir IP-pool gate, the canary cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodewright.api.meta import Condition
from nodewright.api.nodewright.v1alpha1 import (
    CONDITION_DEGRADED,
    CONDITION_PROGRESSING,
    NodeImage,
    PendingNode,
    PendingNodeGoal,
    PendingNodeSpec,
    RolloutState,
    ScalingGroup,
)
from nodewright.controllers.node_image.grouping import (
    NODE_IMAGE_ANNOTATION,
    SCALING_GROUP_ANNOTATION,
    ClusterNode,
    NodeGroups,
)
from nodewright.controllers.node_image.heir_network import heir_pool_shortfall
from nodewright.controllers.node_image.rollout_state import (
    READY_SEEN_ANNOTATION,
    GateFailure,
    RolloutMemory,
    any_rollout_running,
    decide_rollout,
    desired_image_of,
    gate_failure,
    overlay_conditions,
)
from nodewright.controllers.node_image.scale_out import ScaleOut, ScaleOutPlan, cap_scale_out
from nodewright.controllers.node_image.targeting import claim_scaling_groups, node_scale_set

PREFIX = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
OLD = "/communityGalleries/g/images/node/versions/1.0.0"
NEW = "/communityGalleries/g/images/node/versions/2.0.0"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def scaling_group(name: str, scale_set: str, node_image: str, created: str) -> ScalingGroup:
    return ScalingGroup.from_object(
        {
            "apiVersion": "nodewright.io/v1alpha1",
            "kind": "ScalingGroup",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"groupID": PREFIX + scale_set, "nodeImage": node_image},
        }
    )


def node_image(**spec: Any) -> NodeImage:
    conditions = spec.pop("conditions", [])
    return NodeImage.from_object(
        {
            "apiVersion": "nodewright.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {"name": "pool"},
            "spec": {"image": NEW, **spec},
            "status": {"conditions": conditions},
        }
    )


def cluster_node(name: str, *, ready: bool = True, seen: bool = False, age: float = 0.0) -> ClusterNode:
    annotations = {SCALING_GROUP_ANNOTATION: PREFIX + "a", NODE_IMAGE_ANNOTATION: NEW}
    if seen:
        annotations[READY_SEEN_ANNOTATION] = "2026-11-30T11:00:00Z"
    return ClusterNode(
        name,
        provider_id="azure://x",
        annotations=annotations,
        ready=ready,
        created=NOW - timedelta(seconds=age),
    )


def test_the_oldest_scaling_group_claims_a_scale_set_and_a_later_one_is_a_conflict() -> None:
    """Each NodeImage claims its own scale sets; a second NodeImage naming a claimed one is told."""
    groups = [
        scaling_group("a", "vmss-a", "first", "2026-11-30T10:00:00Z"),
        scaling_group("b", "vmss-b", "second", "2026-11-30T10:00:00Z"),
        scaling_group("dup", "VMSS-A", "second", "2026-11-30T11:00:00Z"),
    ]
    first = claim_scaling_groups(groups, "first")
    second = claim_scaling_groups(groups, "second")
    assert first.scale_set_ids == {(PREFIX + "vmss-a").lower()}
    assert first.conflicts == []
    assert second.scale_set_ids == {(PREFIX + "vmss-b").lower()}
    assert len(second.conflicts) == 1
    assert "claimed by NodeImage first" in second.conflicts[0]


def test_a_node_is_placed_by_annotation_or_provider_id() -> None:
    """Nodes not yet annotated are placed from their providerID: a Uniform instance in its scale
    set, a VM in no Flexible scale set in its resource group (the groupID of a group of standalone
    VMs); a node without an Azure providerID is nobody's."""
    instance = ClusterNode("n", provider_id="azure://" + PREFIX + "vmss-a/virtualMachines/3")
    assert node_scale_set(instance) == (PREFIX + "vmss-a").lower()
    vm = ClusterNode(
        "v",
        provider_id="azure:///subscriptions/0/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/v",
    )
    assert node_scale_set(vm) == "/subscriptions/0/resourcegroups/rg"
    flexible_member = ClusterNode(
        "f", annotations={SCALING_GROUP_ANNOTATION: PREFIX + "Flex"}, provider_id=vm.provider_id
    )
    assert node_scale_set(flexible_member) == (PREFIX + "flex").lower()
    assert node_scale_set(ClusterNode("none")) == ""
    assert node_scale_set(ClusterNode("kind", provider_id="kind://docker/n")) == ""


@pytest.mark.parametrize(
    ("nodes", "reason"),
    [
        pytest.param([cluster_node("h", ready=True)], None, id="ready-passes"),
        pytest.param([cluster_node("h", ready=False, age=60)], None, id="booting-within-timeout"),
        pytest.param([cluster_node("h", ready=False, age=601)], "HeirNeverReady", id="never-ready"),
        pytest.param([cluster_node("h", ready=False, seen=True)], "NodeNotReady", id="went-not-ready"),
    ],
)
def test_health_gates(nodes: list[ClusterNode], reason: str | None) -> None:
    """A new-image node that was Ready and is not, or never got Ready in time, fails the gate."""
    failure = gate_failure(nodes, now=NOW, heir_ready_timeout=timedelta(minutes=10))
    assert (failure.reason if failure else None) == reason


def test_a_user_gate_set_false_fails_and_one_unset_holds_the_soak() -> None:
    """Gate conditions: False fails the rollout; missing keeps the soak from ending."""
    false = Condition(type="Smoke", status="False", reason="R", last_transition_time="2026-11-30T00:00:00Z")
    failure = gate_failure(
        [], now=NOW, heir_ready_timeout=timedelta(minutes=1), conditions=[false], gate_conditions=["Smoke"]
    )
    assert failure == GateFailure("GateFailed", "Gate conditions False: Smoke")
    memory = RolloutMemory(RolloutState.CANARY, NEW, OLD, batch_in_flight=True)
    held = decide_rollout(
        memory,
        node_image(gateConditions=["Smoke"]),
        outdated_images=[OLD],
        outdated_left=True,
        in_flight=False,
        failure=None,
        now=NOW,
    )
    assert held.memory.state is RolloutState.SOAKING
    assert not held.scale_out


def _step(
    memory: RolloutMemory,
    image: NodeImage,
    *,
    in_flight: bool,
    outdated_left: bool = True,
    failure: GateFailure | None = None,
    now: datetime = NOW,
) -> Any:
    return decide_rollout(
        memory,
        image,
        outdated_images=[OLD, OLD],
        outdated_left=outdated_left,
        in_flight=in_flight,
        failure=failure,
        now=now,
    )


def test_canary_then_soak_then_rolling_then_complete() -> None:
    """A new image starts in Canary with a cap; the finished canary soaks; then the surge rules."""
    image = node_image(canary=1, soakDuration="5m")
    start = _step(RolloutMemory(), image, in_flight=False)
    assert (start.memory.state, start.canary_cap, start.memory.previous_image) == (
        RolloutState.CANARY,
        1,
        OLD,
    )
    flying = _step(start.memory, image, in_flight=True)
    assert flying.memory.batch_in_flight
    soaking = _step(flying.memory, image, in_flight=False)
    assert (soaking.memory.state, soaking.scale_out) == (RolloutState.SOAKING, False)
    assert soaking.requeue_at == NOW + timedelta(minutes=5)
    still = _step(soaking.memory, image, in_flight=False, now=NOW + timedelta(minutes=4))
    assert still.memory.state is RolloutState.SOAKING
    rolling = _step(still.memory, image, in_flight=False, now=NOW + timedelta(minutes=5))
    assert (rolling.memory.state, rolling.memory.canary_passed, rolling.scale_out) == (
        RolloutState.ROLLING,
        True,
        True,
    )
    batch = _step(rolling.memory, image, in_flight=True, now=NOW + timedelta(minutes=6))
    assert not batch.scale_out, "with a soak, a batch is not added to while it is in flight"
    last = _step(batch.memory, image, in_flight=False, outdated_left=False, now=NOW + timedelta(minutes=7))
    assert last.memory.state is RolloutState.SOAKING, "the last batch soaks too"
    done = _step(last.memory, image, in_flight=False, outdated_left=False, now=NOW + timedelta(minutes=12))
    assert done.memory.state is RolloutState.COMPLETE


def test_without_a_soak_later_batches_are_pipelined() -> None:
    """soakDuration 0: past the canary, new machines may be created while others are in flight."""
    image = node_image(canary=1)
    memory = RolloutMemory(RolloutState.ROLLING, NEW, OLD, canary_passed=True)
    assert _step(memory, image, in_flight=True).scale_out


def test_a_failed_gate_rolls_back_to_the_previous_image_and_ends_rolled_back() -> None:
    """A failure while gated turns to RollingBack (once), desired becomes the previous image."""
    image = node_image()
    memory = RolloutMemory(RolloutState.CANARY, NEW, OLD, batch_in_flight=True)
    failed = _step(memory, image, in_flight=True, failure=GateFailure("NodeNotReady", "h"))
    assert (failed.started_rollback, failed.memory.state) == (True, RolloutState.ROLLING_BACK)
    assert desired_image_of(failed.memory, NEW) == OLD
    again = _step(failed.memory, image, in_flight=True)
    assert (again.started_rollback, again.desired_image) == (False, OLD)
    done = _step(again.memory, image, in_flight=False, outdated_left=False)
    assert done.memory.state is RolloutState.ROLLED_BACK
    assert desired_image_of(done.memory, NEW) == OLD
    assert desired_image_of(done.memory, "/other/image") == "/other/image", "a new spec image starts afresh"
    restarted = _step(done.memory, node_image(image="a:b:c:3"), in_flight=False)
    assert restarted.memory.state is RolloutState.CANARY


def test_without_a_previous_image_a_failed_gate_stops_the_rollout() -> None:
    """No node runs another image (none to go back to): the rollout stops, Failed."""
    memory = RolloutMemory(RolloutState.ROLLING, NEW, "", canary_passed=True)
    failed = decide_rollout(
        memory,
        node_image(),
        outdated_images=[],
        outdated_left=False,
        in_flight=True,
        failure=GateFailure("NodeNotReady", "h"),
        now=NOW,
    )
    assert (failed.memory.state, failed.scale_out) == (RolloutState.FAILED, False)


def test_a_rollout_started_before_its_nodes_were_seen_still_rolls_back() -> None:
    """The NodeImage was reconciled before the Nodes reached the cache (no previous image yet);
    once outdated nodes are seen, their image is the rollback target (found by bench.nodeimage:
    a bad canary stopped the rollout as Failed and it hung instead of rolling back)."""
    image = node_image(canary=1)
    early = decide_rollout(
        RolloutMemory(),
        image,
        outdated_images=[],
        outdated_left=False,
        in_flight=False,
        failure=None,
        now=NOW,
    )
    assert early.memory.previous_image == ""
    seen = _step(early.memory, image, in_flight=True)
    assert seen.memory.previous_image == OLD
    failed = _step(seen.memory, image, in_flight=True, failure=GateFailure("NodeNotReady", "h"))
    assert (failed.started_rollback, failed.memory.state) == (True, RolloutState.ROLLING_BACK)
    assert desired_image_of(failed.memory, NEW) == OLD


def test_any_rollout_running_reads_other_node_images_status() -> None:
    assert any_rollout_running([{"status": {"rolloutState": "Soaking"}}])
    assert not any_rollout_running([{"status": {"rolloutState": "Complete"}}, {"status": {}}])


def _config(pool: int, batch: int = 0, threshold: int = 0) -> dict[str, Any]:
    return {
        "status": {
            "scaler": {"batchSize": batch, "requestThresholdPercent": threshold},
            "networkContainers": [
                {"ipAssignments": [{"name": str(i), "ip": f"10.0.0.{i}"} for i in range(pool)]}
            ],
        }
    }


def _pods(count: int, **spec: Any) -> list[dict[str, Any]]:
    return [
        {"metadata": {"name": f"p{i}"}, "spec": dict(spec), "status": {"phase": "Running"}}
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("donor", "heir", "donor_pods", "heir_pods", "short"),
    [
        pytest.param(None, None, 10, 0, False, id="donor-without-pool-no-gate"),
        pytest.param(_config(16), None, 10, 0, True, id="heir-without-pool"),
        pytest.param(_config(16), _config(8), 10, 0, True, id="heir-pool-short"),
        pytest.param(_config(16), _config(16, batch=16, threshold=50), 10, 0, True, id="buffer-counts"),
        pytest.param(
            _config(16), _config(18, batch=16, threshold=50), 10, 0, False, id="pool-covers-pods-and-buffer"
        ),
        pytest.param(_config(16), _config(12), 10, 3, True, id="heir-pods-hold-addresses"),
    ],
)
def test_heir_pool_gate(donor: Any, heir: Any, donor_pods: int, heir_pods: int, short: bool) -> None:
    """The heir's pool must hold the donor's moving pods plus the buffer, less what it uses."""
    moving = _pods(donor_pods) + _pods(5, hostNetwork=True)
    shortfall = heir_pool_shortfall(donor, heir, donor_pods=moving, heir_pods=_pods(heir_pods))
    assert (shortfall is not None) == short, shortfall


def test_canary_cap_counts_machines_in_flight_per_scale_set() -> None:
    """Capped at 1 per scale set: a set with a join in flight gets none, another gets one."""
    join = PendingNode(
        metadata={"name": "j"},
        spec=PendingNodeSpec(
            provider_id="azure://j", group_id=PREFIX + "a", node_name="j", goal=PendingNodeGoal.JOIN
        ),
    )
    plan = ScaleOutPlan(scale_outs=[ScaleOut(PREFIX + "a", "a", 3), ScaleOut(PREFIX + "b", "b", 3)])
    capped = cap_scale_out(plan, NodeGroups(), [join], 1)
    assert capped.scale_outs == [ScaleOut(PREFIX + "b", "b", 1)]
    assert cap_scale_out(plan, NodeGroups(), [join], None) is plan


def test_a_heir_abandoned_by_a_rollback_is_obsolete_not_replaced() -> None:
    """Going back mid-replacement: the new-image heir of a donor on the desired image is removed
    (obsolete), the donor stays; an unrelated outdated node is still replaced."""
    from nodewright.cloud.models import ImageReference  # noqa: PLC0415
    from nodewright.controllers.node_image.grouping import DONOR_ANNOTATION, HEIR_ANNOTATION, group_nodes  # noqa: PLC0415

    def made(name: str, image: str, **extra: str) -> ClusterNode:
        annotations = {SCALING_GROUP_ANNOTATION: PREFIX + "a", NODE_IMAGE_ANNOTATION: image, **extra}
        return ClusterNode(name, provider_id=f"azure://{name}", annotations=annotations, ready=True)

    donor = made("donor", OLD, **{HEIR_ANNOTATION: "heir"})
    heir = made("heir", NEW, **{DONOR_ANNOTATION: "donor"})
    other = made("other", NEW)
    groups = group_nodes([donor, heir, other], [], ImageReference.parse(OLD))
    assert [n.name for n in groups.obsolete] == ["heir"]
    assert [n.name for n in groups.outdated] == ["other"]
    assert [n.name for n in groups.up_to_date] == ["donor"]


def test_a_finished_canary_counts_so_a_restart_never_adds_a_second() -> None:
    """A canary whose donor already left is an up-to-date node: the cap counts it, the canary is
    placed, and a rollout that lost its batch record soaks instead of adding another canary."""
    from nodewright.controllers.node_image.scale_out import canary_placed  # noqa: PLC0415

    done = ClusterNode(
        "canary",
        provider_id="azure://c",
        annotations={SCALING_GROUP_ANNOTATION: PREFIX + "a", NODE_IMAGE_ANNOTATION: NEW},
    )
    old = ClusterNode(
        "old",
        provider_id="azure://o",
        annotations={SCALING_GROUP_ANNOTATION: PREFIX + "a", NODE_IMAGE_ANNOTATION: OLD},
    )
    groups = NodeGroups(up_to_date=[done], outdated=[old])
    plan = ScaleOutPlan(scale_outs=[ScaleOut(PREFIX + "a", "a", 2)])
    assert cap_scale_out(plan, groups, [], 1).scale_outs == []
    assert canary_placed(groups, [], 1)
    assert not canary_placed(NodeGroups(outdated=[old]), [], 1)
    lost = RolloutMemory(RolloutState.CANARY, NEW, OLD)
    decision = decide_rollout(
        lost,
        node_image(soakDuration="1m"),
        outdated_images=[OLD],
        outdated_left=True,
        in_flight=False,
        failure=None,
        now=NOW,
        canary_placed=True,
    )
    assert (decision.memory.state, decision.scale_out) == (RolloutState.SOAKING, False)


def test_quarantined_nodes_keep_a_finished_rollout_from_complete() -> None:
    """Nothing left to replace but quarantined nodes (not drained in time, left for a human): the
    rollout is Quarantined, not Complete (its pool is not whole), and not running (autoscaling
    comes back); Progressing and Degraded name the nodes. Once they are gone it is Complete."""
    image = node_image()
    memory = RolloutMemory(RolloutState.ROLLING, NEW, OLD, canary_passed=True)
    arguments: dict[str, Any] = {
        "outdated_images": [],
        "outdated_left": False,
        "in_flight": False,
        "failure": None,
        "now": NOW,
    }
    held = decide_rollout(memory, image, quarantined=True, **arguments)
    assert held.memory.state is RolloutState.QUARANTINED
    assert not any_rollout_running([{"status": {"rolloutState": held.memory.state.value}}])
    conditions = {
        c.type: (c.status, c.reason, c.message)
        for c in overlay_conditions([], held.memory, quarantined=["node-7"])
    }
    assert conditions[CONDITION_PROGRESSING][:2] == ("False", "NodesQuarantined")
    assert conditions[CONDITION_DEGRADED][:2] == ("True", "NodesQuarantined")
    assert "node-7" in conditions[CONDITION_DEGRADED][2]
    assert decide_rollout(held.memory, image, quarantined=True, **arguments).memory.state is (
        RolloutState.QUARANTINED
    )
    done = decide_rollout(held.memory, image, **arguments)
    assert done.memory.state is RolloutState.COMPLETE
