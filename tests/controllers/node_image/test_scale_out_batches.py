"""A wave's scale-out is one capacity step per scale set, and no reconcile worker waits for its
operation (issue 32): one PATCH for a wave of three, its machines joined as ARM accepts it (or,
when ARM did not list them then, once it ended, with passes that run while the operation does),
a canary whose Node registers before its step ends and stays the canary, a failed operation
reported once and tried again, and a kill between the PATCH and the Joins that still ends with
one Join per machine and no extra machine. Real API server, kwok, the ARM emulator and the node
simulator."""

from __future__ import annotations

import time

import pytest

from nodewright.api.nodewright.v1alpha1 import SCALE_OUT_ANNOTATION
from nodewright.controllers.node_image.resources import SCALING_GROUP
from nodewright.controllers.node_image.rollout_state import READY_SEEN_ANNOTATION
from nodewright.runtime.control.reconcile import Request
from tests.controllers.node_image.support import NEW_IMAGE, RolloutBench
from tests.waiting import requested_passes

pytestmark = pytest.mark.slow

NODES = 3
OPERATION_SECONDS = 10.0
LATE_NEWS_SECONDS = 20.0
"""A Retry-After long enough for the simulator to register a new machine's Node before the
operation tracker hears that its capacity step ended."""


def _done(bench: RolloutBench) -> bool:
    return bench.condition() == ("True", "AllNodesUpToDate") and not bench.pending_nodes()


def _capacity_patches(bench: RolloutBench, scale_set: str, since: float) -> list[int]:
    """The capacities the scale set's capacity PATCHes asked for, in order."""
    name = scale_set.rsplit("/", 1)[-1]
    updates = bench.emulator.requests.entries(
        "VirtualMachineScaleSets.update", path_contains=name, since=since
    )
    return [
        int(entry.body["sku"]["capacity"])
        for entry in updates
        if isinstance(entry.body, dict) and "sku" in entry.body
    ]


def _start_wave(bench: RolloutBench, nodes: int = NODES) -> tuple[str, str, float]:
    """A scale set of ``nodes`` outdated machines and a NodeImage replacing them all in one wave
    (maxSurge = nodes, no canary); returns the scale set, the NodeImage and the start time."""
    bench.emulator.state.operation_retry_after = 1  # the tracker hears each end within a second
    scale_set = bench.add_scale_set("wave", nodes)
    bench.start_simulator()
    since = time.monotonic()
    node_image = bench.create_node_image(max_surge=nodes, canary=0)
    bench.create_scaling_group(scale_set)
    return scale_set, node_image, since


def _assert_replaced(bench: RolloutBench, nodes: int) -> None:
    machines = bench.machines()
    assert len(machines) == nodes, f"extra machines: {sorted(m['name'] for m in machines)}"
    assert all(m["image"].get("communityGalleryImageId") == NEW_IMAGE for m in machines)
    assert len(bench.nodes()) == nodes


def test_a_wave_of_three_is_one_capacity_patch_and_three_joins(bench: RolloutBench) -> None:
    """maxSurge 3 on one scale set of three: one PATCH to capacity 6, three Joins (one
    ScaledOut Event each), and the rollout ends with the three replaced."""
    scale_set, node_image, since = _start_wave(bench)
    bench.start()
    bench.wait_for(lambda: _done(bench), 90, "the rollout to finish")
    bench.wait_for(lambda: len(bench.machines()) == NODES, 30, "donor machines deleted")
    bench.stop()

    assert _capacity_patches(bench, scale_set, since) == [2 * NODES]
    assert bench.switch.seen.count("create-join") == NODES
    assert len(bench.events(node_image, "ScaledOut")) == NODES
    _assert_replaced(bench, NODES)


def _unlisted_after_the_patch(bench: RolloutBench) -> None:
    """The scale-out's list right after ARM accepted its PATCH fails (a 500), so the process does
    not learn the step's machines then: it finds them once the operation ended."""
    bench.emulator.faults.server_error("VirtualMachineScaleSetVMs.list", times=1)


def test_a_steps_machines_are_joined_as_arm_accepts_it(bench: RolloutBench) -> None:
    """With a capacity operation of 10 s, the pass that sends the PATCH tracks the three new
    machines, which ARM lists at once (Creating), with their Joins and clears the record: while
    the operation still runs (the scale set Updating) the Joins exist, the NodeImage's requests
    are reconciled and no second PATCH is sent (issue 32: a step's Joins waited for its end, and
    the scale set's next step for that)."""
    scale_set, node_image, since = _start_wave(bench)

    # Slow only the capacity step (the model image PATCH before it stays quick): armed when the
    # pass records its scale-out, just before the PATCH.
    def slow_capacity_step() -> None:
        bench.emulator.faults.slow_operations(OPERATION_SECONDS, "VirtualMachineScaleSets.update", times=1)

    bench.switch.pauses["record-scale-out"] = slow_capacity_step
    bench.start()
    bench.wait_for(lambda: _capacity_patches(bench, scale_set, since), 60, "the capacity PATCH")
    sent = time.monotonic()
    bench.wait_for(lambda: len(bench.pending_nodes()) == NODES, OPERATION_SECONDS, "the step's Joins")
    assert bench.running is not None
    requested_passes(bench.running.manager, "nodeimage", [Request("", node_image)], rounds=3)
    during = time.monotonic() - sent
    document = bench.emulator.state.render(scale_set)
    assert document is not None
    state_during = document["properties"]["provisioningState"]
    group = bench.client.get(SCALING_GROUP, scale_set.rsplit("/", 1)[-1].lower())
    record_during = (group["metadata"].get("annotations") or {}).get(SCALE_OUT_ANNOTATION)
    patches_during = _capacity_patches(bench, scale_set, since)
    bench.wait_for(lambda: _done(bench), 90, "the rollout to finish")
    bench.wait_for(lambda: len(bench.machines()) == NODES, 30, "donor machines deleted")
    bench.stop()

    assert state_during == "Updating", f"the operation ended before the passes ({during:.1f} s)"
    assert record_during is None, "the record outlived the Joins"
    assert patches_during == [2 * NODES]
    assert bench.switch.seen.count("create-join") == NODES
    assert _capacity_patches(bench, scale_set, since) == [2 * NODES]
    assert len(bench.events(node_image, "ScaledOut")) == NODES
    _assert_replaced(bench, NODES)


def test_machines_arm_did_not_list_at_once_are_joined_once_the_step_ended(bench: RolloutBench) -> None:
    """The same 10 s step, but the list after its PATCH fails: the worker is free all the same
    (passes run while the operation does, the scale set still Updating, no Join yet, Progressing
    says ScaleOutInProgress, no second PATCH), and the Joins come once it ended."""
    scale_set, node_image, since = _start_wave(bench)

    def slow_capacity_step() -> None:
        bench.emulator.faults.slow_operations(OPERATION_SECONDS, "VirtualMachineScaleSets.update", times=1)
        _unlisted_after_the_patch(bench)

    bench.switch.pauses["record-scale-out"] = slow_capacity_step
    bench.start()
    bench.wait_for(lambda: _capacity_patches(bench, scale_set, since), 60, "the capacity PATCH")
    sent = time.monotonic()
    assert bench.running is not None
    requested_passes(bench.running.manager, "nodeimage", [Request("", node_image)], rounds=3)
    bench.wait_for(
        lambda: bench.condition(kind="Progressing")[1] == "ScaleOutInProgress",
        OPERATION_SECONDS,
        "a pass that finds the scale-out in flight",
    )
    during = time.monotonic() - sent
    document = bench.emulator.state.render(scale_set)
    assert document is not None
    state_during = document["properties"]["provisioningState"]
    joins_during = "create-join" in bench.switch.seen
    patches_during = _capacity_patches(bench, scale_set, since)
    bench.wait_for(lambda: _done(bench), 90, "the rollout to finish")
    bench.wait_for(lambda: len(bench.machines()) == NODES, 30, "donor machines deleted")
    bench.stop()

    assert state_during == "Updating", f"the operation ended before the passes ({during:.1f} s)"
    assert not joins_during, "a Join before the operation ended"
    assert patches_during == [2 * NODES]
    assert _capacity_patches(bench, scale_set, since) == [2 * NODES]
    assert len(bench.events(node_image, "ScaledOut")) == NODES
    _assert_replaced(bench, NODES)


def test_a_canary_whose_node_registers_before_its_step_ends_stays_the_canary(bench: RolloutBench) -> None:
    """Canary 1, maxSurge 2; the canary's capacity step takes 2 s but ARM answers its PATCH with a
    Retry-After of 20 s and the list after it fails, so the process learns the machine only when
    the operation tracker hears of its end that long after: meanwhile the new
    machine's Node registers, Ready. Until this process saw the step end and the Join exists, that
    node is the step's: passes that run meanwhile keep the rollout in Canary, give the node no
    Ready-seen mark, and ask for no other machine (before the fix it passed for an up-to-date
    node: Ready-seen, a finished canary, the rollout past its canary while its step ran)."""
    bench.emulator.state.operation_retry_after = 1
    scale_set = bench.add_scale_set("early", NODES)
    bench.start_simulator()
    since = time.monotonic()
    node_image = bench.create_node_image(max_surge=2, canary=1)
    bench.create_scaling_group(scale_set)

    def late_news_of_the_step() -> None:  # a step of 2 s, its first poll 20 s after the PATCH
        bench.emulator.faults.slow_operations(2.0, "VirtualMachineScaleSets.update", times=1)
        bench.emulator.state.operation_retry_after = int(LATE_NEWS_SECONDS)
        _unlisted_after_the_patch(bench)  # only the step's end tells its machines

    bench.switch.pauses["record-scale-out"] = late_news_of_the_step
    bench.start()
    bench.wait_for(lambda: _capacity_patches(bench, scale_set, since), 60, "the canary's capacity PATCH")
    sent = time.monotonic()
    bench.wait_for(lambda: len(bench.nodes()) == NODES + 1, LATE_NEWS_SECONDS, "the canary's Node")
    registered = time.monotonic() - sent
    assert bench.running is not None
    requested_passes(bench.running.manager, "nodeimage", [Request("", node_image)], rounds=3)
    during = time.monotonic() - sent
    progressing_during = bench.condition(kind="Progressing")[1]
    rollout_during = bench.node_image().status.rollout_state
    marked_during = [
        n["metadata"]["name"] for n in bench.nodes() if READY_SEEN_ANNOTATION in n["metadata"]["annotations"]
    ]
    joins_during = "create-join" in bench.switch.seen
    patches_during = _capacity_patches(bench, scale_set, since)
    bench.emulator.state.operation_retry_after = 1
    bench.wait_for(lambda: _done(bench), 120, "the rollout to finish")
    bench.wait_for(lambda: len(bench.machines()) == NODES, 30, "donor machines deleted")
    bench.stop()

    timing = f"Node after {registered:.1f} s, passes done after {during:.1f} s"
    assert not joins_during, f"the tracker heard of the step's end before the passes ({timing})"
    assert progressing_during == "ScaleOutInProgress", timing
    assert rollout_during == "Canary", timing
    assert not marked_during, f"marked Ready-seen before its Join existed: {marked_during}"
    assert patches_during == [NODES + 1]
    assert _capacity_patches(bench, scale_set, since)[0] == NODES + 1
    _assert_replaced(bench, NODES)


def test_a_failed_scale_out_is_reported_once_and_tried_again(bench: RolloutBench) -> None:
    """The capacity operation ends Failed (ARM removes the instances it was creating): one
    Warning Event with ARM's error, no Join for a machine that does not exist, and a later pass
    scales out again and finishes the rollout with no extra machine."""
    nodes = 2
    scale_set, node_image, since = _start_wave(bench, nodes)

    def fail_capacity_step() -> None:
        bench.emulator.faults.fail_operation(
            "VirtualMachineScaleSets.update", code="AllocationFailed", message="No capacity left", times=1
        )

    bench.switch.pauses["record-scale-out"] = fail_capacity_step
    bench.start()
    bench.wait_for(lambda: _done(bench), 120, "the rollout to finish")
    bench.wait_for(lambda: len(bench.machines()) == nodes, 30, "donor machines deleted")
    bench.stop()

    failed = bench.events(node_image, "ScaleOutFailed")
    assert len(failed) == 1
    assert failed[0]["type"] == "Warning"
    assert "AllocationFailed" in failed[0]["message"] or "No capacity left" in failed[0]["message"]
    assert _capacity_patches(bench, scale_set, since) == [2 * nodes, 2 * nodes]
    assert len(bench.events(node_image, "ScaledOut")) == nodes, "a Join for a machine ARM removed"
    assert not bench.events(node_image, "AdoptedMachine")
    _assert_replaced(bench, nodes)


def test_a_kill_between_the_patch_and_the_joins_ends_with_one_join_per_machine(
    bench: RolloutBench,
) -> None:
    """The manager dies right after ARM accepted the capacity PATCH, its operation still
    running; the next one finds the record, tracks the three new machines (AdoptedMachine, no
    ScaledOut) without a second PATCH, and the rollout ends with no extra machine."""
    scale_set, node_image, since = _start_wave(bench)
    bench.emulator.faults.slow_operations(3.0, "VirtualMachineScaleSets.update")
    bench.switch.arm_any({"scale-out-sent"})
    bench.start()
    bench.wait_for(bench.switch.crashed.is_set, 60, "the crash after the PATCH")
    bench.stop()
    assert bench.switch.crashed_at == "scale-out-sent"
    assert "create-join" not in bench.switch.seen

    bench.switch.arm_any(set())
    bench.start()
    bench.wait_for(lambda: _done(bench), 90, "the rollout to finish after the restart")
    bench.wait_for(lambda: len(bench.machines()) == NODES, 30, "donor machines deleted")
    bench.stop()

    assert _capacity_patches(bench, scale_set, since) == [2 * NODES]
    assert len(bench.events(node_image, "AdoptedMachine")) == NODES
    assert not bench.events(node_image, "ScaledOut")
    _assert_replaced(bench, NODES)
