"""What a rollout's scale-outs cost in ARM reads (issue 32): each new machine costs two lists of
its scale set's instances (one recorded for a restart before the capacity changes, one after to
find the new instance), counted in the ARM emulator's request log over a whole rollout. Real API
server, kwok, the ARM emulator and the node simulator."""

from __future__ import annotations

import time

import pytest

from tests.controllers.node_image.support import RolloutBench

pytestmark = pytest.mark.slow

NODES = 4
LISTS_PER_NEW_MACHINE = 2


def test_each_new_machine_costs_two_instance_lists(bench: RolloutBench) -> None:
    """A rollout of four nodes with maxSurge 2 adds four machines and lists the scale set's
    instances at most twice per machine (it was three times: the restart record's list, then the
    scale-out's own before and after)."""
    scale_set = bench.add_scale_set("cost", NODES)
    name = scale_set.rsplit("/", 1)[-1]
    bench.start_simulator()
    since = time.monotonic()
    bench.create_node_image(max_surge=2)
    bench.create_scaling_group(scale_set)
    bench.start()
    bench.wait_for(
        lambda: bench.condition() == ("True", "AllNodesUpToDate") and not bench.pending_nodes(),
        90,
        "the rollout to finish",
    )
    bench.stop()

    updates = bench.emulator.requests.entries(
        "VirtualMachineScaleSets.update", path_contains=name, since=since
    )
    scale_outs = [entry for entry in updates if isinstance(entry.body, dict) and "sku" in entry.body]
    lists = bench.emulator.requests.count("VirtualMachineScaleSetVMs.list", path_contains=name, since=since)
    assert len(scale_outs) == NODES
    assert lists <= LISTS_PER_NEW_MACHINE * len(scale_outs), (
        f"{lists} instance lists for {len(scale_outs)} new machines"
    )
