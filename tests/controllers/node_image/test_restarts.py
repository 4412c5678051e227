"""Kill the manager at every step boundary of a rollout and start it again: the rollout ends in
the same state as an uninterrupted one, with no orphan machine and no orphan PendingNode.

The checkpoint hook raises at the chosen step (and at every step after it) so nothing more is
written, exactly as if the process had died there; then a fresh manager, with fresh caches and
reconcilers, takes over. Each restart crashes at the first step reached that has not crashed
before, so one rollout walks through every boundary."""

from __future__ import annotations

import json

import pytest

from nodewright.controllers.node_image.grouping import (
    DONOR_ANNOTATION,
    HEIR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
)
from nodewright.controllers.node_image.node_image import SCALE_OUT_ANNOTATION
from nodewright.controllers.node_image.resources import AUTOSCALING_STRATEGY, SCALING_GROUP
from nodewright.runtime.kube.kinds import POD
from tests.controllers.node_image.support import CUSTOM_LABEL, NEW_IMAGE, RolloutBench

pytestmark = pytest.mark.slow

BOUNDARIES = {
    "set-image",
    "scaling-group-status",
    "annotate-node",
    "autoscaling",
    "status",
    "record-scale-out",
    "scale-out",
    "scale-out-sent",
    "create-join",
    "adopt-machine",
    "clear-scale-out-record",
    "pending-node-status",
    "pair-heir",
    "pair-donor",
    "delete-mint-record",
    "copy-labels",
    "cordon",
    "evict",
    "create-leave",
    "delete-machine",
    "delete-node",
    "delete-record",
    "release-heir",
    "mark-ready-seen",
}
"""Every write of an ordinary rollout (and of the recovery after a crash at create-join)."""
SOMETIMES = {"delete-node"}
"""Boundaries a rollout may skip: the node simulator can delete the Node of a deleted machine
before the PendingNode reconciler does."""


def _done(bench: RolloutBench) -> bool:
    return bench.condition() == ("True", "AllNodesUpToDate") and not bench.pending_nodes()


def crash_at_each_boundary(bench: RolloutBench, boundaries: set[str]) -> list[str]:
    """Start the manager armed to crash before the next write of any boundary not yet crashed at,
    again and again, until each has crashed once (``SOMETIMES`` may never come up) or the rollout
    is done; asserts that each crashed. Returns the boundaries in the order they crashed."""
    crashed: list[str] = []
    left = set(boundaries)
    for _ in range(3 * len(boundaries)):
        if not left - SOMETIMES or _done(bench):
            break
        bench.switch.arm_any(left)
        bench.start()
        bench.wait_for(lambda: bench.switch.crashed.is_set() or _done(bench), 60, "a crash or the end")
        bench.stop()
        if bench.switch.crashed_at is not None:
            crashed.append(bench.switch.crashed_at)
            left.discard(bench.switch.crashed_at)
    assert not left - SOMETIMES, f"never crashed at {sorted(left)}; crashed at {crashed}"
    return crashed


def test_killed_at_every_step_boundary_the_rollout_resumes_to_the_same_end(bench: RolloutBench) -> None:
    """A crash before each kind of write, one after another, still ends with every node replaced,
    labels moved, autoscaling restored, no orphan machine and no orphan PendingNode."""
    scale_set = bench.add_scale_set("r", 3)
    bench.start_simulator()
    originals = bench.label_nodes()
    strategy = bench.create_autoscaling_strategy(enabled=True)
    bench.create_node_image(max_surge=1)
    group = bench.create_scaling_group(scale_set)
    for name in originals:
        bench.client.create(
            POD,
            {
                "metadata": {"name": f"web-{name}", "namespace": bench.namespace},
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )

    crash_at_each_boundary(bench, BOUNDARIES)

    bench.switch.arm_any(set())
    bench.start()
    bench.wait_for(lambda: _done(bench), 90, "the rollout to finish after the last restart")
    bench.wait_for(lambda: len(bench.nodes()) == len(originals), 30, "donor nodes gone")
    # Autoscaling is restored in the pass after the status says no rollout runs: wait for it.
    bench.wait_for(
        lambda: bench.client.get(AUTOSCALING_STRATEGY, strategy)["spec"]["enabled"] is True,
        30,
        "autoscaling restored",
    )
    bench.stop()

    nodes = bench.nodes()
    assert len(nodes) == len(originals)
    for node in nodes:
        annotations = node["metadata"]["annotations"]
        assert annotations[NODE_IMAGE_ANNOTATION] == NEW_IMAGE
        assert DONOR_ANNOTATION not in annotations
        assert HEIR_ANNOTATION not in annotations
    assert sorted(n["metadata"]["labels"][CUSTOM_LABEL] for n in nodes) == sorted(originals)
    machines = bench.machines()
    assert sorted(m["name"] for m in machines) == sorted(n["metadata"]["name"] for n in nodes), (
        "orphan machine"
    )
    assert not bench.pending_nodes(), "orphan PendingNode"
    record = (bench.client.get(SCALING_GROUP, group)["metadata"].get("annotations") or {}).get(
        SCALE_OUT_ANNOTATION
    )
    assert record is None, f"scale-out record left: {json.loads(record)}"
    assert bench.client.get(AUTOSCALING_STRATEGY, strategy)["spec"]["enabled"] is True
