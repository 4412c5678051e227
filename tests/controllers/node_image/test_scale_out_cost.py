"""What a rollout's scale-outs cost at ARM (issue 32): one capacity PATCH per scale set per wave,
whatever the wave's size, and two lists of the scale set's instances per PATCH (one recorded for
a restart before the capacity changes, one after its operation ended to find the new
instances), counted in the ARM emulator's request log over a whole rollout. Real API server,
kwok, the ARM emulator and the node simulator."""

from __future__ import annotations

import time

import pytest

from tests.controllers.node_image.support import RolloutBench

pytestmark = pytest.mark.slow

NODES = 4
LISTS_PER_SCALE_OUT = 2


def _roll_out(bench: RolloutBench, scale_set_name: str) -> tuple[str, float]:
    """A scale set of ``NODES`` rolled at maxSurge 2 without a canary, to the end; its name and
    when the rollout started (``time.monotonic()``, for the request log)."""
    scale_set = bench.add_scale_set(scale_set_name, NODES)
    bench.start_simulator()
    since = time.monotonic()
    bench.create_node_image(max_surge=2, canary=0)
    bench.create_scaling_group(scale_set)
    bench.start()
    bench.wait_for(
        lambda: bench.condition() == ("True", "AllNodesUpToDate") and not bench.pending_nodes(),
        90,
        "the rollout to finish",
    )
    bench.stop()
    return scale_set.rsplit("/", 1)[-1], since


def test_each_scale_out_is_one_capacity_patch_and_two_instance_lists(bench: RolloutBench) -> None:
    """A rollout of four nodes with maxSurge 2 (no canary) adds four machines in fewer PATCHes than machines
    (the first wave is one PATCH of +2), and lists the scale set's instances at most twice per
    PATCH (it was one PATCH and two lists per machine)."""
    name, since = _roll_out(bench, "cost")
    updates = bench.emulator.requests.entries(
        "VirtualMachineScaleSets.update", path_contains=name, since=since
    )
    scale_outs = [entry for entry in updates if isinstance(entry.body, dict) and "sku" in entry.body]
    lists = bench.emulator.requests.count("VirtualMachineScaleSetVMs.list", path_contains=name, since=since)
    capacities = [int(entry.body["sku"]["capacity"]) for entry in scale_outs]
    assert capacities[0] == NODES + 2, f"the first wave of two is one PATCH: {capacities}"
    assert len(scale_outs) < NODES, f"one PATCH per machine: {capacities}"
    assert lists <= LISTS_PER_SCALE_OUT * len(scale_outs), (
        f"{lists} instance lists for {len(scale_outs)} capacity PATCHes"
    )


def test_each_new_machine_is_read_once(bench: RolloutBench) -> None:
    """The pass that makes a new machine's Join reads it (its provider ID and image), and its Node
    is then annotated from that read: one instance GET per new machine, where it was two (the
    Join's, then the Node's for its image)."""
    name, since = _roll_out(bench, "reads")
    gets = bench.emulator.requests.entries("VirtualMachineScaleSetVMs.get", path_contains=name, since=since)
    new_machines = {f"/virtualMachines/{index}" for index in range(NODES, 2 * NODES)}
    reads = {machine: sum(1 for e in gets if e.path.endswith(machine)) for machine in new_machines}
    assert reads == dict.fromkeys(new_machines, 1), f"instance GETs per new machine: {reads}"
