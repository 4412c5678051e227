"""Issue 33: a Join PendingNode create for an existing heir lands late, as one sent by a leader
deposed before its write reached the API server would, at every step of a real rollout (canary
joined, soak, each wave's heir Ready, donor drained, donor removed, Complete). The rollout ends
as an undisturbed one: the scale set at its capacity, every node on the new image, no heir
deleted; each replayed Join is reported (StaleJoinIgnored) and deleted."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodewright.controllers.node_image.grouping import (
    DONOR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    SERVED_AS_HEIR_ANNOTATION,
)
from nodewright.controllers.node_image.resources import NODE_IMAGE, PENDING_NODE, controller_reference
from nodewright.runtime import errors
from nodewright.runtime.kube.times import format_time
from tests.controllers.node_image.invariants import assert_complete_means_whole
from tests.controllers.node_image.support import NEW_IMAGE, RolloutBench

pytestmark = pytest.mark.slow

CAPACITY = 3
STEPS = {
    "copy-labels": "canary-joined",
    "cordon": "heir-ready",
    "create-leave": "donor-drained",
    "delete-machine": "donor-removed",
    "release-heir": "donor-gone",
}
"""Checkpoints (the write about to be made) and the rollout step each stands for."""


class Replayer:
    """Creates a Join PendingNode for every node that has served as a heir so far, once per step
    and node: from the reconcilers' checkpoints (held while it writes) and, for the soak and the
    end, from a thread watching the NodeImage status."""

    def __init__(self, bench: RolloutBench) -> None:
        self.bench = bench
        self.heirs: set[str] = set()
        """Every node seen serving as a heir (remembered here, not read from the mark alone)."""
        self.replayed: dict[str, set[str]] = {}
        """Step -> heirs a Join was replayed for (the create was accepted)."""
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="join-replayer")

    def arm(self) -> None:
        for checkpoint in STEPS:
            self._arm(checkpoint)
        self._thread.start()

    def _arm(self, checkpoint: str) -> None:
        def replay() -> None:
            self.replay(STEPS[checkpoint])
            self.bench.switch.pauses[checkpoint] = replay  # again, for the next wave

        self.bench.switch.pauses[checkpoint] = replay

    def _watch(self) -> None:
        while not self._halt.is_set():
            state = self.bench.node_image().status.rollout_state
            if state == "Soaking":
                self.replay("soak")
            elif state == "Complete" and self.heirs:
                self.replay("complete")
            time.sleep(0.05)

    def replay(self, step: str) -> None:
        """The late creates: one Join per heir not yet replayed at this step."""
        owner = self.bench.client.get(NODE_IMAGE, f"cluster-{self.bench.suffix}")
        for node in self.bench.nodes():
            annotations = node["metadata"].get("annotations") or {}
            name = node["metadata"]["name"]
            with self._lock:
                if DONOR_ANNOTATION in annotations or SERVED_AS_HEIR_ANNOTATION in annotations:
                    self.heirs.add(name)
                if name not in self.heirs or name in self.replayed.get(step, set()):
                    continue
            if self._create_join(owner, node):
                with self._lock:
                    self.replayed.setdefault(step, set()).add(name)

    def _create_join(self, owner: dict[str, Any], node: dict[str, Any]) -> bool:
        """A Join as the reconciler writes one (named after the node, owned by the NodeImage);
        False when the name is taken (the real Join, or a replay not yet deleted)."""
        annotations = node["metadata"].get("annotations") or {}
        spec = {
            "providerID": node["spec"]["providerID"],
            "groupID": annotations.get("nodewright.io/scaling-group-id", ""),
            "nodeName": node["metadata"]["name"],
            "goal": "Join",
            "deadline": format_time(datetime.now(UTC) + timedelta(minutes=30)),
        }
        body = {
            "metadata": {"name": node["metadata"]["name"], "ownerReferences": [controller_reference(owner)]},
            "spec": spec,
        }
        try:
            self.bench.client.create(PENDING_NODE, body)
        except errors.AlreadyExists:
            return False
        return True

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(5)
        for checkpoint in STEPS:
            self.bench.switch.pauses.pop(checkpoint, None)


def _settled(bench: RolloutBench) -> bool:
    return bench.node_image().status.rollout_state == "Complete" and not bench.pending_nodes()


def test_a_join_replayed_for_each_heir_at_every_step_loses_no_capacity(bench: RolloutBench) -> None:
    """Three nodes, canary 1 with a 2 s soak, maxSurge 1. At each step, a Join for every node
    that served as a heir so far is created again. The rollout ends Complete with the scale set at
    3 machines, all on the new image, every heir still there, and each replayed Join reported on
    the NodeImage and deleted."""
    scale_set = bench.add_scale_set("j", CAPACITY)
    bench.start_simulator()
    originals = set(bench.label_nodes())  # labels to copy: every pair passes copy-labels
    name = bench.create_node_image(max_surge=1, canary=1, soakDuration="2s")
    bench.create_scaling_group(scale_set)
    replayer = Replayer(bench)
    replayer.arm()
    try:
        bench.start()
        bench.wait_for(lambda: "complete" in replayer.replayed, 120, "a Join replayed after Complete")
        bench.wait_for(lambda: _settled(bench), 60, "Complete again with no PendingNode left")
    finally:
        replayer.stop()

    assert set(replayer.replayed) == {*STEPS.values(), "soak", "complete"}, replayer.replayed
    nodes = {node["metadata"]["name"]: node for node in bench.nodes()}
    assert len(nodes) == CAPACITY
    assert not originals & set(nodes)
    assert all(n["metadata"]["annotations"][NODE_IMAGE_ANNOTATION] == NEW_IMAGE for n in nodes.values())
    assert replayer.heirs == set(nodes), f"heirs {sorted(replayer.heirs)}, nodes {sorted(nodes)}"
    document = bench.emulator.state.scale_sets[scale_set.lower()].resource.document
    assert document["sku"]["capacity"] == CAPACITY
    assert_complete_means_whole(bench)
    messages = " ".join(e["message"] for e in bench.events(name, "StaleJoinIgnored"))
    replayed = set().union(*replayer.replayed.values())
    assert replayed == set(nodes)
    assert all(f"names {heir}," in messages for heir in replayed), messages
