"""The evicted-pods health gate against the real cluster (API server, controller manager,
scheduler, kwok), the ARM emulator and the node simulator: the pods evicted from a donor must be
Running and Ready elsewhere within ``evictedPodsReadyTimeout``.

- Held: the heir is tainted before the donor is cordoned, so the Deployment's replacements cannot
  be scheduled; the canary stays in flight (no soak, not Complete) with Progressing
  WaitingForEvictedPods until the taint goes, then the pods are Ready and the rollout completes.
  The passes that check the record read only the pods of the controllers it names (and the
  donor's), never a bystander Deployment's in the same namespace (issue 32: a namespace may hold
  every pod of the cluster).
- Failed: each original node runs a Deployment pinned to it by hostname; the canary's donor goes
  and its pod's replacement can run nowhere: after the deadline the rollout rolls back (reason
  EvictedPodsNotReady, Degraded, a Warning Event), with at most the canary on the new image and
  the manager killed and restarted at random steps on the way."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from nodewright.controllers.node_image.evicted_pods import EVICTED_PODS_ANNOTATION
from nodewright.controllers.node_image.grouping import NODE_IMAGE_ANNOTATION
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.runtime.kube.kinds import NODE, POD, Kind
from nodewright.runtime.process.manager import Manager
from tests.controllers.node_image.support import NEW_IMAGE, OLD_IMAGE, RolloutBench

pytestmark = pytest.mark.slow

DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
HOLD_TAINT = {"key": "example.com/hold", "value": "true", "effect": "NoSchedule"}
CRASH_STEPS = [
    "scale-out",
    "pair-heir",
    "cordon",
    "record-evictions",
    "evict",
    "create-leave",
    "clear-evictions",
]
"""Steps of the failed canary and its rollback that a restart may hit."""


def _deploy(bench: RolloutBench, name: str, replicas: int, node_selector: dict[str, str]) -> None:
    labels = {"app": name}
    template = {
        "metadata": {"labels": labels},
        "spec": {"nodeSelector": node_selector, "containers": [{"name": "c", "image": "busybox"}]},
    }
    spec = {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template}
    bench.client.create(DEPLOYMENT, {"metadata": {"name": name, "namespace": bench.namespace}, "spec": spec})


def _ready_pods(bench: RolloutBench, app: str) -> list[dict[str, Any]]:
    pods = bench.client.list(POD, bench.namespace, label_selector=f"app={app}").items
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]


class PodReads:
    """The pods the reconcilers read through the Pod store's indexes (a spy on the shared store:
    every call still answers from the cache)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def attach(self, manager: Manager) -> None:
        store = manager.cache.informer(POD).store
        real = store.by_index

        def counted(index_name: str, value: str) -> list[dict[str, Any]]:
            found = real(index_name, value)
            self.names.update(str(pod["metadata"]["name"]) for pod in found)
            return found

        setattr(store, "by_index", counted)  # noqa: B010 - an instance attribute over the method


def _records(bench: RolloutBench) -> list[str]:
    return [
        n["metadata"]["name"]
        for n in bench.nodes()
        if EVICTED_PODS_ANNOTATION in (n["metadata"].get("annotations") or {})
    ]


def test_the_canary_waits_for_the_evicted_pods_to_be_ready_elsewhere(bench: RolloutBench) -> None:
    """Replacements held Pending by a taint on the heir: the canary neither soaks nor completes and
    Progressing says WaitingForEvictedPods; once the taint goes, they are Ready on the heir, the
    record goes, and the rollout completes."""
    bench.add_scale_set("w", 1)
    bench.start_simulator()
    _deploy(bench, "web", 2, {SIMULATED_LABEL: bench.owner})
    _deploy(bench, "bystander", 6, {SIMULATED_LABEL: "nowhere"})  # Pending, same namespace
    bench.wait_for(lambda: len(_ready_pods(bench, "web")) == 2, 60, "web Ready")
    bystanders = {
        p["metadata"]["name"]
        for p in bench.client.list(POD, bench.namespace, label_selector="app=bystander").items
    }
    assert len(bystanders) == 6
    (donor,) = [n["metadata"]["name"] for n in bench.nodes()]
    held: dict[str, str] = {}

    def taint_heir() -> None:
        (heir,) = [n["metadata"]["name"] for n in bench.nodes() if n["metadata"]["name"] != donor]
        bench.client.patch(NODE, heir, {"spec": {"taints": [HOLD_TAINT]}})
        held["heir"] = heir

    bench.switch.pauses["cordon"] = taint_heir
    bench.create_node_image(canary=1, evictedPodsReadyTimeout="5m")
    bench.create_scaling_group(bench.scale_sets[0])
    reads = PodReads()
    bench.start(also=reads.attach)
    bench.wait_for(
        lambda: bench.condition(kind="Progressing") == ("True", "WaitingForEvictedPods"), 60, "wait"
    )
    bench.wait_for(lambda: donor not in {n["metadata"]["name"] for n in bench.nodes()}, 60, "donor gone")
    with bench.watched(passes=3):  # passes that wait for the evicted pods
        pass
    assert bench.node_image().status.rollout_state == "Canary", "the canary went on without its pods"
    assert bench.condition(kind="Progressing") == ("True", "WaitingForEvictedPods")
    assert _records(bench) == [held["heir"]]
    assert not _ready_pods(bench, "web")
    assert reads.names, "no pod read through the cache's indexes"
    assert not reads.names & bystanders, f"passes read a bystander's pods: {sorted(reads.names & bystanders)}"

    bench.client.patch(NODE, held["heir"], {"spec": {"taints": None}})
    bench.wait_for(lambda: bench.node_image().status.rollout_state == "Complete", 60, "rollout Complete")
    assert {p["spec"]["nodeName"] for p in _ready_pods(bench, "web")} == {held["heir"]}
    assert len(_ready_pods(bench, "web")) == 2
    assert _records(bench) == []
    assert bench.condition(kind="Degraded") == ("False", "AsExpected")


class NewImageCensus(threading.Thread):
    """The most live machines on the new image seen at once."""

    def __init__(self, bench: RolloutBench) -> None:
        super().__init__(daemon=True, name="census")
        self.bench, self.most = bench, 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            on_new = [
                m
                for m in self.bench.live_machines()
                if m["image"].get("communityGalleryImageId") == NEW_IMAGE
            ]
            self.most = max(self.most, len(on_new))
            time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _rolled_back(bench: RolloutBench) -> bool:
    nodes = bench.nodes()
    return (
        bench.node_image().status.rollout_state == "RolledBack"
        and not bench.pending_nodes()
        and len(nodes) == 2
        and all(n["metadata"]["annotations"].get(NODE_IMAGE_ANNOTATION) == OLD_IMAGE for n in nodes)
        and not _records(bench)
    )


def _run_with_random_restarts(bench: RolloutBench, seed: int) -> list[str]:
    chooser = random.Random(seed)
    crashed: list[str] = []
    for _ in range(3):
        bench.switch.arm_any({chooser.choice(CRASH_STEPS)})
        bench.start()
        bench.wait_for(lambda: bench.switch.crashed.is_set() or _rolled_back(bench), 90, "a crash or the end")
        bench.stop()
        if bench.switch.crashed_at is None:
            break
        crashed.append(bench.switch.crashed_at)
    bench.switch.arm_any(set())
    bench.start()
    bench.wait_for(lambda: _rolled_back(bench), 180, f"the rollback to finish (crashed at {crashed})")
    bench.stop()
    return crashed


@pytest.mark.parametrize("seed", [5, 11])
def test_pods_that_cannot_run_elsewhere_roll_the_canary_back(bench: RolloutBench, seed: int) -> None:
    """The canary's donor runs a pod pinned to it by hostname: its replacement stays Pending, so
    evictedPodsReadyTimeout after the eviction the gate fails and the rollout rolls back; the
    other original node is never cordoned; killed and restarted at random steps, it ends the same."""
    bench.add_scale_set("p", 2)
    bench.start_simulator()
    originals = sorted(n["metadata"]["name"] for n in bench.nodes())
    for index, name in enumerate(originals):
        _deploy(bench, f"pinned-{index}", 1, {"kubernetes.io/hostname": name})
    bench.wait_for(
        lambda: all(len(_ready_pods(bench, f"pinned-{i}")) == 1 for i in range(2)), 60, "pinned pods Ready"
    )
    name = bench.create_node_image(max_surge=1, canary=1, evictedPodsReadyTimeout="4s")
    bench.create_scaling_group(bench.scale_sets[0])
    census = NewImageCensus(bench)
    census.start()
    try:
        crashed = _run_with_random_restarts(bench, seed)
    finally:
        census.stop()
    assert crashed, "the manager was never killed"
    assert census.most == 1, f"{census.most} machines on the new image (canary 1); crashed at {crashed}"
    status = bench.node_image().status
    assert (status.rollout_state, status.failure_reason) == ("RolledBack", "EvictedPodsNotReady")
    assert "not Ready elsewhere" in status.failure_message
    assert bench.condition(kind="Degraded")[1] == "EvictedPodsNotReady"
    assert bench.events(name, "RollingBack"), "no Warning Event for the rollback"
    survivors = set(originals) & {n["metadata"]["name"] for n in bench.nodes()}
    assert len(survivors) == 1, "a second original node was replaced"
    assert all(not n["spec"].get("unschedulable") for n in bench.nodes()), "a node left cordoned"
    (survivor,) = survivors
    index = originals.index(survivor)
    assert len(_ready_pods(bench, f"pinned-{index}")) == 1, "the other node's pod was disturbed"
