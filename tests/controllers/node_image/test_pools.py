"""One NodeImage per node pool, as AKS users run them, against the real API server, the ARM emulator
and the node simulator: two NodeImages on two pools roll independently, the autoscaler is off
while either rolls and restored exactly once after both, and a third NodeImage naming a claimed
scale set gets a Conflict condition and touches nothing."""

from __future__ import annotations

import threading
import time

import pytest

from nodewright.api.nodewright.v1alpha1 import ENABLED_BEFORE_ROLLOUT_ANNOTATION
from nodewright.controllers.node_image.grouping import NODE_IMAGE_ANNOTATION
from nodewright.controllers.node_image.resources import AUTOSCALING_STRATEGY, NODE_IMAGE, SCALING_GROUP
from tests.controllers.node_image.support import NEW_IMAGE, OLD_IMAGE, RolloutBench

pytestmark = pytest.mark.slow


class AutoscalingWatch(threading.Thread):
    """Samples the AutoscalingStrategy's spec.enabled every 50 ms and keeps the distinct runs."""

    def __init__(self, bench: RolloutBench, strategy: str) -> None:
        super().__init__(daemon=True, name="autoscaling-watch")
        self.bench, self.strategy = bench, strategy
        self.runs: list[bool] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            enabled = bool(self.bench.client.get(AUTOSCALING_STRATEGY, self.strategy)["spec"]["enabled"])
            if not self.runs or self.runs[-1] != enabled:
                self.runs.append(enabled)
            time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _pool_nodes(bench: RolloutBench, scale_set: str) -> dict[str, str]:
    """Node name -> image annotation for the nodes of one scale set."""
    prefix = scale_set.rsplit("/", 1)[-1].lower()
    return {
        n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(NODE_IMAGE_ANNOTATION, "")
        for n in bench.nodes()
        if n["metadata"]["name"].startswith(prefix)
    }


def test_two_node_images_on_two_pools_roll_independently(bench: RolloutBench) -> None:
    """Pool a rolls to the new image while pool b stays on the old one, untouched; then both roll
    at once (a back to the old image, b to the new one with a longer soak): autoscaling stays off
    until the later of the two is done and comes back to exactly its earlier value, once per phase.
    A third NodeImage naming pool b's scale set gets Conflict and changes nothing."""
    scale_a, scale_b = bench.add_scale_set("a", 2), bench.add_scale_set("b", 2)
    bench.start_simulator()
    strategy = bench.create_autoscaling_strategy(enabled=True)
    pool_a = bench.create_node_image(NEW_IMAGE, name=f"pool-a-{bench.suffix}")
    pool_b = bench.create_node_image(OLD_IMAGE, name=f"pool-b-{bench.suffix}")
    bench.create_scaling_group(scale_a, node_image=pool_a)
    bench.create_scaling_group(scale_b, node_image=pool_b)
    b_before = _pool_nodes(bench, scale_b)
    assert len(b_before) == 2
    watch = AutoscalingWatch(bench, strategy)
    watch.start()
    bench.start()
    try:
        bench.wait_for(lambda: bench.condition(pool_a) == ("True", "AllNodesUpToDate"), 120, "pool a rolled")
        assert set(_pool_nodes(bench, scale_a).values()) == {NEW_IMAGE}
        b_during = _pool_nodes(bench, scale_b)
        assert set(b_during) == set(b_before), "pool b's nodes were replaced by pool a's rollout"
        assert set(b_during.values()) <= {OLD_IMAGE, ""}
        assert (bench.node_image(pool_a).status.total_nodes, bench.node_image(pool_b).status.total_nodes) == (
            2,
            2,
        )
        bench.wait_for(lambda: watch.runs[-1] is True, 30, "autoscaling back on after pool a")

        bench.client.patch(NODE_IMAGE, pool_a, {"spec": {"image": OLD_IMAGE}})
        bench.client.patch(NODE_IMAGE, pool_b, {"spec": {"image": NEW_IMAGE, "soakDuration": "8s"}})
        bench.wait_for(
            lambda: (
                bench.condition(pool_a) == ("True", "AllNodesUpToDate")
                and bench.node_image(pool_a).status.rollout_state == "Complete"
                and bench.node_image(pool_a).status.target_image == OLD_IMAGE  # not the last rollout's
            ),
            150,
            "pool a rolled back to the old image",
        )
        bench.wait_for(
            lambda: (
                bench.condition(pool_b) == ("True", "AllNodesUpToDate")
                and bench.node_image(pool_b).status.rollout_state == "Complete"
                and bench.node_image(pool_b).status.target_image == NEW_IMAGE
            ),
            150,
            "pool b rolled",
        )
        bench.wait_for(lambda: watch.runs[-1] is True, 30, "autoscaling back on after both")
        assert set(_pool_nodes(bench, scale_a).values()) == {OLD_IMAGE}, (
            _pool_nodes(bench, scale_a),
            bench.node_image(pool_a).status,
        )
        assert set(_pool_nodes(bench, scale_b).values()) == {NEW_IMAGE}
        assert not set(_pool_nodes(bench, scale_b)) & set(b_before)
    finally:
        watch.stop()
    assert watch.runs == [True, False, True, False, True], watch.runs
    restored = bench.client.get(AUTOSCALING_STRATEGY, strategy)
    assert restored["spec"]["enabled"] is True
    assert ENABLED_BEFORE_ROLLOUT_ANNOTATION not in (restored["metadata"].get("annotations") or {})

    b_now = _pool_nodes(bench, scale_b)
    intruder = bench.create_node_image(OLD_IMAGE, name=f"intruder-{bench.suffix}")
    spec = {"groupID": scale_b, "nodeImage": intruder}
    bench.create(SCALING_GROUP, {"metadata": {"name": f"intruder-{bench.suffix}"}, "spec": spec})
    bench.wait_for(
        lambda: bench.condition(intruder, "Conflict") == ("True", "ScaleSetClaimed"), 20, "Conflict"
    )
    with bench.watched(passes=6):  # resyncs of the NodeImages, the intruder's among them
        pass
    assert _pool_nodes(bench, scale_b) == b_now, "the intruder touched pool b"
    assert bench.node_image(intruder).status.total_nodes == 0
    assert not bench.pending_nodes()
