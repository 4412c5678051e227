"""Machines that do not join: a join past its deadline is deleted and becomes a leave, and a
scale-out whose operation failed leaves a Failed machine that is tracked and deleted too. In both
cases every machine stays accounted for (a Node or a PendingNode) and the old node stays."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from nodewright.api.nodewright.v1alpha1 import PendingNodeGoal
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import parse_provider_id, parse_scale_set_id
from nodewright.controllers.node_image.grouping import RolloutTimeouts
from nodewright.controllers.node_image.resources import SCALING_GROUP
from nodewright.controllers.node_image.rollout_writes import SCALE_OUT_ANNOTATION
from tests.controllers.node_image.support import NEW_IMAGE, RolloutBench

pytestmark = pytest.mark.slow


def _accounted_for(bench: RolloutBench) -> None:
    """Every live machine is a Node, is tracked by a PendingNode, or was made by a scale-out the
    manager recorded before sending it (the next start adopts those, as test_restarts shows; the
    manager may be stopped between a scale-out and its records). No orphan."""
    tracked = {p.spec.node_name for p in bench.pending_nodes()}
    nodes = {n["metadata"]["name"] for n in bench.nodes()}
    recorded_before: set[str] | None = None
    for group in bench.client.list(SCALING_GROUP).items:
        record = (group["metadata"].get("annotations") or {}).get(SCALE_OUT_ANNOTATION)
        if record is not None:
            recorded_before = (recorded_before or set()) | {str(i) for i in json.loads(record)}
    orphans = [
        m["name"]
        for m in bench.live_machines()
        if m["name"] not in nodes | tracked
        and (recorded_before is None or m["id"].rsplit("/", 1)[1] in recorded_before)
    ]
    assert orphans == [], f"orphans {orphans}; scale-out record (instances before it): {recorded_before}"


def test_join_past_its_deadline_is_deleted_and_becomes_a_leave(bench: RolloutBench) -> None:
    """A new machine that never registers a Node: after the join timeout its record turns into a
    Leave (Warning Event JoinTimedOut), the machine is deleted, the record goes; the outdated
    node is never touched."""
    scale_set = bench.add_scale_set("j", 1)
    bench.start_simulator()
    (original,) = [n["metadata"]["name"] for n in bench.nodes()]
    bench.start_simulator(join_delay=3600)  # from now on machines never become Nodes
    bench.create_node_image()
    bench.create_scaling_group(scale_set)
    timeouts = RolloutTimeouts(
        join=timedelta(seconds=2), leave=timedelta(seconds=5), poll=timedelta(seconds=0.5)
    )
    bench.start(bench.settings(timeouts=timeouts))

    join = bench.wait_for(
        lambda: next((p for p in bench.pending_nodes() if p.spec.goal is PendingNodeGoal.JOIN), None),
        30,
        "a join",
    )
    bench.wait_for(lambda: bench.events(join.name, "JoinTimedOut"), 20, "JoinTimedOut Event")
    bench.wait_for(lambda: all(m["name"] != join.name for m in bench.machines()), 20, "the machine deleted")
    bench.wait_for(lambda: all(p.name != join.name for p in bench.pending_nodes()), 20, "the record finished")
    bench.stop()

    assert bench.events(join.name, "JoinTimedOut")[0]["type"] == "Warning"
    nodes = bench.nodes()
    assert [n["metadata"]["name"] for n in nodes] == [original]
    assert not nodes[0]["spec"].get("unschedulable")
    _accounted_for(bench)


def test_failed_scale_out_is_retried_and_a_failed_machine_is_given_up(bench: RolloutBench) -> None:
    """A scale-out whose operation fails (ARM rolls it back) is retried; a new machine whose
    provisioning then fails is given up at once (Warning Event MachineFailed) and deleted; the
    next machine completes the rollout, with no orphan machine or PendingNode."""
    scale_set = bench.add_scale_set("f", 1)
    bench.start_simulator()
    bench.start_simulator(join_delay=3600)  # new machines do not register until the test says so
    # The scale set's model already names the new image, so the first scale-set update is the scale-out.
    bench.cloud.compute.set_scale_set_image(parse_scale_set_id(scale_set), ImageReference.parse(NEW_IMAGE))
    bench.emulator.faults.fail_operation("VirtualMachineScaleSets.update", times=1)
    bench.create_node_image()
    bench.create_scaling_group(scale_set)
    bench.start()

    join = bench.wait_for(
        lambda: next((p for p in bench.pending_nodes() if p.spec.goal is PendingNodeGoal.JOIN), None),
        30,
        "a join",
    )
    assert bench.emulator.requests.count("VirtualMachineScaleSets.update") >= 2, (
        "the failed scale-out was not retried"
    )
    machine = next(m for m in bench.machines() if m["name"] == join.spec.node_name)
    bench.emulator.state.set_provisioning_state(machine["id"], "Failed")
    bench.wait_for(lambda: bench.events(join.name, "MachineFailed"), 20, "MachineFailed Event")
    bench.wait_for(
        lambda: all(m["name"] != join.name for m in bench.machines()), 20, "the failed machine deleted"
    )
    bench.start_simulator(join_delay=0)
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "the rollout done")
    bench.wait_for(lambda: not bench.pending_nodes(), 30, "no PendingNode left")
    bench.wait_for(lambda: len(bench.live_machines()) == 1, 30, "the old machine gone")
    assert len(bench.nodes()) == 1
    _accounted_for(bench)


def test_new_node_with_nothing_left_to_replace_is_obsolete_and_removed(bench: RolloutBench) -> None:
    """The outdated node disappears (someone deleted its machine) while its replacement joins: the
    new node has no one to replace, is marked obsolete, drained and removed; nothing is left."""
    scale_set = bench.add_scale_set("o", 1)
    bench.start_simulator()
    (original,) = bench.machines()
    bench.start_simulator(join_delay=2.0)
    bench.create_node_image()
    bench.create_scaling_group(scale_set)
    bench.start()

    bench.wait_for(bench.pending_nodes, 30, "a join")
    bench.cloud.compute.delete_instance(parse_provider_id("azure://" + original["id"]))
    bench.desired_capacity[scale_set.lower()] = 0  # the pool's one machine deleted on purpose
    bench.wait_for(lambda: "mark-obsolete" in bench.switch.seen, 30, "the new node marked obsolete")
    bench.wait_for(lambda: not bench.machines() and not bench.nodes(), 30, "the obsolete node removed")
    bench.wait_for(lambda: not bench.pending_nodes(), 30, "no PendingNode left")
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 30, "nothing left to do")
    assert bench.node_image().status.total_nodes == 0
