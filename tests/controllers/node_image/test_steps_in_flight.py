"""A capacity step still in flight, in the pure planning code: its machines count against the
canary's size and maxSurge and keep the rollout in flight, and a node of one of them that
registered before the step ended (no Join yet) is not taken for an up-to-date node.

Issue 32: with the scale-out left to the operation tracker, a pass can run while the step's
machine already has a Node. Grouped as up to date, that node was marked Ready-seen and made the
canary look placed and finished, so the rollout passed the canary and a second machine came up
on the new image (``test_canary_rollback``: "2 machines ran the bad image at once")."""

from __future__ import annotations

from nodewright.api.nodewright.v1alpha1 import ScaleOutRecord
from nodewright.controllers.node_image.grouping import group_nodes, new_node_budget
from nodewright.controllers.node_image.pairing import pair_nodes
from nodewright.controllers.node_image.scale_out import (
    ScaleOut,
    ScaleOutPlan,
    StepsInFlight,
    canary_placed,
    cap_scale_out,
    plan_scale_out,
)
from tests.controllers.node_image.test_decisions import DESIRED, NEW, OTHERS, WORKERS, node, scaling_group

OUTDATED = [node("0"), node("1"), node("2")]
"""Three instances of the workers scale set on the old image."""
EARLY = node("3", image=NEW)
"""The instance a capacity step adds, whose Node registered (Ready) before the step ended."""
STEP = StepsInFlight({WORKERS.lower(): ScaleOutRecord(frozenset({"0", "1", "2"}), 1)})


def test_a_node_of_a_step_in_flight_is_left_to_its_step() -> None:
    """The early node is not grouped at all (no up-to-date node to mark Ready-seen or to count
    as a finished canary); the nodes there before the step are."""
    nodes = STEP.without_their_machines([*OUTDATED, EARLY])
    assert [n.name for n in nodes] == ["0", "1", "2"]
    groups = group_nodes(nodes, [], DESIRED)
    assert groups.up_to_date == []
    assert [n.name for n in groups.outdated] == ["0", "1", "2"]
    # without the step, the same node passes for an up-to-date node
    assert [n.name for n in group_nodes([*OUTDATED, EARLY], [], DESIRED).up_to_date] == ["3"]


def test_an_unannotated_uniform_node_is_placed_by_its_provider_id() -> None:
    """A uniform instance's scale set is in its providerID: a node of the step is left out
    before the scale set annotation is written; a node of another scale set is kept."""
    early = node("3", group="", image="", provider_id=f"azure://{WORKERS.upper()}/virtualMachines/3")
    other = node("3", group=OTHERS, image=NEW)
    assert STEP.without_their_machines([early, other]) == [other]


def test_a_flexible_vm_of_a_step_is_known_by_its_name() -> None:
    """A Flexible member is a VM, listed by its name: placed by the node's annotation."""
    vms = "azure:///subscriptions/0000/resourceGroups/nodes-rg/providers/Microsoft.Compute/virtualMachines/"
    there = node("workers_aaaa", provider_id=vms + "workers_aaaa")
    new = node("workers_bbbb", image=NEW, provider_id=vms + "workers_bbbb")
    step = StepsInFlight({WORKERS.lower(): ScaleOutRecord(frozenset({"WORKERS_AAAA"}), 1)})
    assert step.without_their_machines([there, new]) == [there]


def test_the_machines_of_a_step_count_against_the_canary_and_the_surge() -> None:
    """Canary 1, maxSurge 2, one machine coming: the canary is placed, the cap leaves no room for a
    second machine on the new image, and the surge budget has one slot left."""
    groups = group_nodes(STEP.without_their_machines([*OUTDATED, EARLY]), [], DESIRED)
    assert canary_placed(groups, [], 1, STEP.counts)
    assert not canary_placed(groups, [], 1)
    asked = ScaleOutPlan(scale_outs=[ScaleOut(WORKERS, "workers", 1)])
    assert cap_scale_out(asked, groups, [], 1, STEP.counts).scale_outs == []
    assert cap_scale_out(asked, groups, [], 2, STEP.counts).scale_outs == [ScaleOut(WORKERS, "workers", 1)]
    assert new_node_budget(2, groups, [], coming=STEP.total) == 1
    assert new_node_budget(1, groups, [], coming=STEP.total) == 0


def test_a_step_in_flight_gets_no_second_step_beside_it() -> None:
    """maxSurge 3 with one machine coming on the workers: the workers wait for their step
    (ScaleOutInProgress); the budget's rest goes to the other scale set."""
    nodes = STEP.without_their_machines([*OUTDATED, EARLY, node("9", group=OTHERS)])
    groups = group_nodes(nodes, [], DESIRED)
    budget = new_node_budget(3, groups, [], coming=STEP.total)
    plan = plan_scale_out(
        groups,
        pair_nodes(groups),
        [],
        [scaling_group("workers", WORKERS), scaling_group("others", OTHERS)],
        desired_image=DESIRED,
        budget=budget,
        in_progress=STEP.counts,
    )
    assert [(s.scaling_group, s.count) for s in plan.scale_outs] == [("others", 1)]
    assert [b.reason for b in plan.blockers] == ["ScaleOutInProgress"]


def test_a_node_the_cloud_cannot_place_is_no_steps_machine() -> None:
    """A Node naming an instance of the scale set that the cloud does not know stays in the
    grouping (it is invalid) while a step runs: left out, it would drop from the invalid list and
    come back after the step, a second InvalidNodes Event for one problem."""
    ghost = node("99")
    assert STEP.without_their_machines([ghost], unknown={ghost.name}) == [ghost]
    assert STEP.without_their_machines([ghost]) == []
