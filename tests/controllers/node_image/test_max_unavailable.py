"""``maxUnavailable`` against the real API server, the ARM emulator and the node simulator.

- With ``maxUnavailable: 1`` and every heir held NotReady (its machine stopped), exactly one donor
  is cordoned and drained ahead of its heir, never two, and it does not leave while its heir is
  not Ready; once the heirs run, the rollout completes. (With the default 0 no donor is cordoned
  before its heir is Ready: ``test_rollout``.)
- A bad value (``"half"``) is reported with Degraded InvalidMaxUnavailable and a Warning Event and
  nothing is replaced; fixing it lets the rollout run."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_image.grouping import HEIR_ANNOTATION
from nodewright.controllers.node_image.resources import NODE_IMAGE
from nodewright.runtime.kube.kinds import POD
from nodewright.runtime.kube.objects import condition_is_true as node_ready
from tests.controllers.node_image.support import NEW_IMAGE, RolloutBench

pytestmark = pytest.mark.slow


class HoldNewNodes(threading.Thread):
    """Stops every new-image machine as soon as its Node exists, until ``release``; records the
    most original nodes seen cordoned at once while their heir was not Ready (unavailable)."""

    def __init__(self, bench: RolloutBench, originals: set[str]) -> None:
        super().__init__(daemon=True, name="hold-new-nodes")
        self.bench, self.originals = bench, originals
        self.stopped: dict[str, str] = {}
        self.most_cordoned = 0
        self.holding = True
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            new = {m["name"] for m in self.bench.live_machines() if _on_new(m)}
            nodes = self.bench.nodes()
            by_name = {n["metadata"]["name"]: n for n in nodes}
            cordoned = [
                n
                for n in nodes
                if n["metadata"]["name"] in self.originals
                and n["spec"].get("unschedulable")
                and not node_ready(
                    by_name.get((n["metadata"].get("annotations") or {}).get(HEIR_ANNOTATION, ""))
                )
            ]
            self.most_cordoned = max(self.most_cordoned, len(cordoned))
            for node in nodes:
                name = node["metadata"]["name"]
                if self.holding and name in new and name not in self.stopped:
                    machine = str(parse_provider_id(node["spec"]["providerID"]))
                    self.bench.emulator.state.set_power_state(machine, "stopped")
                    self.stopped[name] = machine
            time.sleep(0.05)

    def release(self) -> None:
        self.holding = False
        time.sleep(0.2)
        for machine in self.stopped.values():
            self.bench.emulator.state.set_power_state(machine, "running")

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _pair_only_held_heirs(bench: RolloutBench, hold: HoldNewNodes, originals: set[str]) -> None:
    """While ``hold`` holds, each pairing waits until every new Node is NotReady. The hold stops a
    machine once its Node exists, and the Node turns NotReady a moment later: a pass in between
    would see a Ready heir and rightly cordon its donor, which this test must not race with. The
    pairing's own patch then reads the heir NotReady, and so does the rest of that pass."""

    def wait_for_held_heirs() -> None:
        if not hold.holding:
            return
        bench.wait_for(
            lambda: all(not node_ready(n) for n in bench.nodes() if n["metadata"]["name"] not in originals),
            30,
            "new nodes held NotReady",
        )
        bench.switch.pauses["pair-heir"] = wait_for_held_heirs  # a pause runs once: the next pairing

    bench.switch.pauses["pair-heir"] = wait_for_held_heirs


def _on_new(machine: dict[str, Any]) -> bool:
    return bool(machine["image"].get("communityGalleryImageId") == NEW_IMAGE)


def _cordoned(bench: RolloutBench, originals: set[str]) -> list[str]:
    return sorted(
        n["metadata"]["name"]
        for n in bench.nodes()
        if n["metadata"]["name"] in originals and n["spec"].get("unschedulable")
    )


def test_one_donor_drains_ahead_of_its_heir_and_leaves_only_after_it(bench: RolloutBench) -> None:
    """maxUnavailable 1, heirs held NotReady: one donor is cordoned and its pod evicted, no second
    donor is cordoned, no Leave PendingNode exists and every original machine lives; released, the
    three nodes are replaced."""
    bench.add_scale_set("u", 3)
    bench.start_simulator()
    originals = {n["metadata"]["name"] for n in bench.nodes()}
    for name in sorted(originals):
        body = {"nodeName": name, "containers": [{"name": "c", "image": "busybox"}]}
        bench.client.create(
            POD, {"metadata": {"name": f"p-{name}", "namespace": bench.namespace}, "spec": body}
        )
    hold = HoldNewNodes(bench, originals)
    hold.start()
    _pair_only_held_heirs(bench, hold, originals)
    bench.create_node_image(max_surge=3, canary=0, maxUnavailable=1)
    bench.create_scaling_group(bench.scale_sets[0])
    bench.start()
    try:
        bench.wait_for(lambda: len(hold.stopped) == 3, 60, "three heirs held NotReady")
        (donor,) = bench.wait_for(lambda: _cordoned(bench, originals), 30, "a donor cordoned early")
        bench.wait_for(
            lambda: (
                not any(
                    p["metadata"]["name"] == f"p-{donor}"
                    for p in bench.client.list(POD, bench.namespace).items
                )
            ),
            30,
            "the early donor drained",
        )
        with bench.watched(passes=3):  # passes that see the held heirs NotReady
            pass
        assert _cordoned(bench, originals) == [donor]
        assert not [p for p in bench.pending_nodes() if p.spec.goal.value == "Leave"], "a donor left early"
        assert originals <= {m["name"] for m in bench.live_machines()}
        assert bench.condition(kind="Progressing") == ("True", "WaitingForHeirReady")
        hold.release()
        bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 120, "rollout finished")
    finally:
        hold.stop()
    assert hold.most_cordoned == 1, hold.most_cordoned
    nodes = bench.nodes()
    assert len(nodes) == 3
    assert not originals & {n["metadata"]["name"] for n in nodes}


def test_a_bad_max_unavailable_is_reported_and_nothing_is_replaced(bench: RolloutBench) -> None:
    """maxUnavailable "half": Degraded and Progressing say InvalidMaxUnavailable, one Warning
    Event, no machine is added and no node cordoned; with 1 the rollout runs."""
    bench.add_scale_set("v", 1)
    bench.start_simulator()
    before = sorted(m["name"] for m in bench.live_machines())
    name = bench.create_node_image(maxUnavailable="half")
    bench.create_scaling_group(bench.scale_sets[0])
    bench.start()
    bench.wait_for(
        lambda: bench.condition(kind="Degraded") == ("True", "InvalidMaxUnavailable"), 30, "Degraded"
    )
    assert bench.condition(kind="Progressing") == ("False", "InvalidMaxUnavailable")
    bench.wait_for(lambda: bench.events(name, "InvalidMaxUnavailable"), 10, "Warning Event")
    with bench.watched(passes=2):  # resyncs of the invalid NodeImage
        pass
    (event,) = bench.events(name, "InvalidMaxUnavailable")
    assert event["type"] == "Warning"
    assert "half" in event["message"]
    assert sorted(m["name"] for m in bench.live_machines()) == before
    assert not bench.pending_nodes()
    assert all(not n["spec"].get("unschedulable") for n in bench.nodes())

    bench.client.patch(NODE_IMAGE, name, {"spec": {"maxUnavailable": 1}})
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "rollout after the fix")
    assert bench.condition(kind="Degraded") == ("False", "AsExpected")
