"""A bad image is caught at the canary and rolled back automatically, against the real API server,
the ARM emulator and the node simulator, with the manager killed and restarted at random steps.

The simulator plays the kubelets; a ``BadImage`` thread plays a kernel that does not boot right:
it stops every machine on the new image (so its Node goes NotReady, as a kubelet that stopped
posting would make it) either as soon as its Node registers (heirs never become Ready) or once the
rollout soaks (heirs go NotReady during the soak). A ``Census`` thread counts the live machines on
the new image. Either way: at most ``canary`` machines ever run the new image, the scale set's
model goes back to the old image, every node ends on the old image, the status says RolledBack
and why, and a Warning Event says so. PodDisruptionBudget status is written by the test (no
disruption controller runs in this worktree's cluster)."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_image.grouping import NODE_IMAGE_ANNOTATION
from nodewright.runtime.kube.kinds import POD, POD_DISRUPTION_BUDGET
from tests.controllers.node_image.support import NEW_IMAGE, OLD_IMAGE, RolloutBench, wait_for_budget_computed

pytestmark = pytest.mark.slow

CRASH_STEPS = [
    "status",
    "set-image",
    "scale-out",
    "create-join",
    "pair-heir",
    "pair-donor",
    "cordon",
    "create-leave",
    "delete-machine",
    "restore-node",
    "mark-ready-seen",
    "autoscaling",
]
"""Steps of a canary and its rollback that a restart may hit."""


class BadImage(threading.Thread):
    """Stops every machine on the new image once ``armed()`` says so and its Node exists."""

    def __init__(self, bench: RolloutBench, armed: Any) -> None:
        super().__init__(daemon=True, name="bad-image")
        self.bench, self.armed = bench, armed
        self.stopped: set[str] = set()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            new_machines = {m["name"] for m in self.bench.live_machines() if _on_new(m)}
            if new_machines and self.armed():
                for node in self.bench.nodes():
                    name = node["metadata"]["name"]
                    if name in new_machines and name not in self.stopped:
                        machine = str(parse_provider_id(node["spec"]["providerID"]))
                        self.bench.emulator.state.set_power_state(machine, "stopped")
                        self.stopped.add(name)
            time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


class Census(threading.Thread):
    """The most live machines on the new image seen at once."""

    def __init__(self, bench: RolloutBench) -> None:
        super().__init__(daemon=True, name="census")
        self.bench = bench
        self.most_on_new = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            on_new = sum(1 for m in self.bench.live_machines() if _on_new(m))
            self.most_on_new = max(self.most_on_new, on_new)
            time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _on_new(machine: dict[str, Any]) -> bool:
    return bool(machine["image"].get("communityGalleryImageId") == NEW_IMAGE)


def _rolled_back(bench: RolloutBench) -> bool:
    nodes = bench.nodes()
    return (
        bench.node_image().status.rollout_state == "RolledBack"
        and not bench.pending_nodes()
        and len(nodes) == 3
        and all(n["metadata"]["annotations"].get(NODE_IMAGE_ANNOTATION) == OLD_IMAGE for n in nodes)
    )


def _describe(bench: RolloutBench) -> str:
    status = bench.node_image().status
    nodes = [
        (
            n["metadata"]["name"],
            n["metadata"]["annotations"].get(NODE_IMAGE_ANNOTATION, "")[-5:],
            n["spec"].get("unschedulable"),
        )
        for n in bench.nodes()
    ]
    conditions = [(c.type, c.status, c.reason, c.message) for c in status.conditions]
    pending = [(p.name, p.spec.goal.value) for p in bench.pending_nodes()]
    return f"{status.rollout_state} {status.failure_reason} nodes={nodes} pending={pending} {conditions}"


def _guard_every_node(bench: RolloutBench) -> None:
    """A pod on each original node under a budget that allows no disruption: no donor leaves."""
    for node in bench.nodes():
        name = node["metadata"]["name"]
        bench.client.create(
            POD,
            {
                "metadata": {
                    "name": f"guarded-{name}",
                    "namespace": bench.namespace,
                    "labels": {"app": "guarded"},
                },
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
    bench.client.create(
        POD_DISRUPTION_BUDGET,
        {
            "metadata": {"name": "guarded", "namespace": bench.namespace},
            "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    wait_for_budget_computed(bench, "guarded", healthy=3)  # so disruptionsAllowed is 0


def _run_with_random_restarts(bench: RolloutBench, seed: int) -> list[str]:
    """Start the manager, crash it at up to three random steps (a fresh manager each time), then
    let one run to the end; returns where it crashed."""
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
    try:
        bench.wait_for(lambda: _rolled_back(bench), 180, f"the rollback to finish (crashed at {crashed})")
    except AssertionError as error:
        raise AssertionError(f"{error}; state: {_describe(bench)}") from None
    bench.stop()
    return crashed


def run_bad_image_with_restarts(bench: RolloutBench, seed: int, bad: BadImage) -> tuple[Census, list[str]]:
    """The rollout with ``bad`` breaking new-image nodes and a ``Census`` of machines on the new
    image, while the manager is crashed at random steps (``_run_with_random_restarts``); both
    watchers are stopped after. Returns the census and where the manager crashed."""
    census = Census(bench)
    bad.start()
    census.start()
    try:
        crashed = _run_with_random_restarts(bench, seed)
    finally:
        bad.stop()
        census.stop()
    return census, crashed


def _assert_rolled_back(bench: RolloutBench, census: Census, reason: str) -> None:
    assert census.most_on_new <= 1, f"{census.most_on_new} machines ran the bad image at once (canary 1)"
    assert census.most_on_new == 1, "the canary never ran"
    assert not any(_on_new(m) for m in bench.live_machines())
    scale_set = bench.emulator.state.render(bench.scale_sets[0])
    assert scale_set is not None
    model = scale_set["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"]
    assert model.get("communityGalleryImageId") == OLD_IMAGE
    status = bench.node_image().status
    assert (status.rollout_state, status.failure_reason, status.previous_image) == (
        "RolledBack",
        reason,
        OLD_IMAGE,
    )
    assert bench.condition(kind="Degraded")[1] == reason
    assert bench.events(bench.node_image().name, "RollingBack"), "no Warning Event for the rollback"
    assert all(not n["spec"].get("unschedulable") for n in bench.nodes()), "a node left cordoned"


@pytest.mark.parametrize("seed", [11])
def test_heirs_that_never_become_ready_are_caught_at_the_canary(bench: RolloutBench, seed: int) -> None:
    """Every new-image node goes NotReady as it registers; donors are held by their budget, so the
    heir is never done: after heirReadyTimeout the gate fails (HeirNeverReady) and the rollout goes
    back to the old image with the original nodes, uncordoned."""
    bench.add_scale_set("c", 3)
    bench.start_simulator()
    originals = {n["metadata"]["name"] for n in bench.nodes()}
    _guard_every_node(bench)
    bench.create_node_image(max_surge=2, canary=1, heirReadyTimeout="6s")
    bench.create_scaling_group(bench.scale_sets[0])
    bad = BadImage(bench, lambda: True)
    census, crashed = run_bad_image_with_restarts(bench, seed, bad)
    _assert_rolled_back(bench, census, "HeirNeverReady")
    assert {n["metadata"]["name"] for n in bench.nodes()} == originals, crashed
    assert bad.stopped, "the bad image never ran"


@pytest.mark.parametrize("seed", [23])
def test_heirs_that_go_not_ready_during_the_soak_are_caught(bench: RolloutBench, seed: int) -> None:
    """The canary finishes (its donor leaves) and soaks; its node then goes NotReady: the gate
    fails (NodeNotReady), no second node is replaced, and the new-image node is replaced by an
    old-image one."""
    bench.add_scale_set("s", 3)
    bench.start_simulator()
    bench.create_node_image(max_surge=2, canary=1, soakDuration="20s")
    bench.create_scaling_group(bench.scale_sets[0])
    bad = BadImage(bench, lambda: bench.node_image().status.rollout_state == "Soaking")
    census, _ = run_bad_image_with_restarts(bench, seed, bad)
    _assert_rolled_back(bench, census, "NodeNotReady")
    assert bad.stopped, "the canary never soaked"
