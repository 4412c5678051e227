"""A whole rollout against the real API server, the ARM emulator and the node simulator: six
outdated nodes in two scale sets are replaced within the surge, labels move, no donor goes before
its heir is Ready, a PodDisruptionBudget holds its pod until it allows a disruption, and
autoscaling is off during the rollout and restored after."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_image.decisions import (
    DONOR_ANNOTATION,
    HEIR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    RolloutTimeouts,
)
from nodewright.controllers.node_image.resources import AUTOSCALING_STRATEGY
from nodewright.runtime import errors
from nodewright.runtime.kinds import NODE, POD, POD_DISRUPTION_BUDGET
from tests.controllers.node_image.support import CUSTOM_LABEL, NEW_IMAGE, RolloutBench

pytestmark = pytest.mark.slow

MAX_SURGE = 2
ORIGINAL = 6


class Monitor(threading.Thread):
    """Samples machines and Nodes every 50 ms: the most extra machines and Nodes seen, donors
    whose machine started deleting while their heir was not Ready, and the autoscaling setting."""

    def __init__(self, bench: RolloutBench, strategy: str) -> None:
        super().__init__(daemon=True, name="rollout-monitor")
        self.bench = bench
        self.strategy = strategy
        self.most_extra_machines = 0
        self.most_extra_nodes = 0
        self.violations: list[str] = []
        self.autoscaling_seen: set[bool] = set()
        self.removed_donors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        previous: dict[str, dict[str, Any]] = {}
        while not self._halt.is_set():
            machines = {m["name"]: m for m in self.bench.machines()}
            live = [m for m in machines.values() if m["provisioning"] != "Deleting"]
            nodes = {n["metadata"]["name"]: n for n in self.bench.nodes()}
            self.most_extra_machines = max(self.most_extra_machines, len(live) - ORIGINAL)
            self.most_extra_nodes = max(self.most_extra_nodes, len(nodes) - ORIGINAL)
            for name, node in previous.items():
                heir = (node["metadata"].get("annotations") or {}).get(HEIR_ANNOTATION)
                machine = machines.get(name)
                leaving = machine is None or machine["provisioning"] == "Deleting"
                if heir and leaving and name not in self.removed_donors:
                    self.removed_donors.append(name)
                    if not _ready(previous.get(heir)) or not _ready(nodes.get(heir)):
                        self.violations.append(f"donor {name} removed while heir {heir} was not Ready")
            strategy = self.bench.client.get(AUTOSCALING_STRATEGY, self.strategy)
            self.autoscaling_seen.add(bool(strategy["spec"]["enabled"]))
            previous = nodes
            time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _ready(node: dict[str, Any] | None) -> bool:
    if node is None:
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _pod(bench: RolloutBench, name: str, node: str, labels: dict[str, str], owner: str | None = None) -> None:
    metadata: dict[str, Any] = {"name": name, "namespace": bench.namespace, "labels": labels}
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": "agent",
                "uid": "00000000-0000-0000-0000-000000000001",
                "controller": True,
            }
        ]
    bench.client.create(
        POD,
        {"metadata": metadata, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}},
    )


def _stuck_on(bench: RolloutBench, node: str) -> bool:
    for condition in bench.node_image().status.conditions:
        if condition.type == "Degraded":
            return condition.reason == "DrainStuck" and node in condition.message
    return False


def _set_disruptions_allowed(bench: RolloutBench, name: str, allowed: int) -> None:
    """Play the disruption controller (none runs here): write the budget's status."""
    budget = bench.client.get(POD_DISRUPTION_BUDGET, name, bench.namespace)
    budget["status"] = {
        "observedGeneration": budget["metadata"]["generation"],
        "disruptionsAllowed": allowed,
        "currentHealthy": 1,
        "desiredHealthy": 1,
        "expectedPods": 1,
    }
    bench.client.update_status(POD_DISRUPTION_BUDGET, budget)


def test_six_nodes_in_two_scale_sets_are_replaced_within_the_surge(bench: RolloutBench) -> None:
    """All six outdated nodes are replaced by nodes on the new image; at most maxSurge extra
    machines and Nodes at any time; no donor leaves before its heir is Ready (one heir is held
    NotReady to prove it); labels move; the guarded pod is evicted only once its budget allows;
    autoscaling is off during the rollout and back on after."""
    scale_sets = [bench.add_scale_set("a", 3), bench.add_scale_set("b", 3)]
    bench.start_simulator()
    originals = bench.label_nodes()
    assert len(originals) == ORIGINAL
    first = sorted(originals)[0]
    _pod(bench, "guarded", first, {"app": "guarded"})
    _pod(bench, "agent", first, {"app": "agent"}, owner="DaemonSet")
    for name in originals:
        _pod(bench, f"web-{name}", name, {"app": "web"})
    bench.client.create(
        POD_DISRUPTION_BUDGET,
        {
            "metadata": {"name": "guarded", "namespace": bench.namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    _set_disruptions_allowed(bench, "guarded", 0)
    strategy = bench.create_autoscaling_strategy(enabled=True)

    held: dict[str, str] = {}
    held_event = threading.Event()

    def hold_first_heir_not_ready() -> None:
        """At the first pairing, stop the heir's machine so its Node turns NotReady."""
        heir = next(
            n for n in bench.nodes() if (n["metadata"].get("annotations") or {}).get(DONOR_ANNOTATION)
        )
        held["heir"] = heir["metadata"]["name"]
        held["donor"] = heir["metadata"]["annotations"][DONOR_ANNOTATION]
        held["machine"] = str(parse_provider_id(heir["spec"]["providerID"]))
        bench.emulator.state.set_power_state(held["machine"], "stopped")
        bench.wait_for(lambda: not _ready(bench.client.get(NODE, held["heir"])), 10, "heir NotReady")
        held_event.set()

    bench.switch.pauses["pair-donor"] = hold_first_heir_not_ready
    bench.create_node_image(max_surge=MAX_SURGE)
    for scale_set in scale_sets:
        bench.create_scaling_group(scale_set)
    monitor = Monitor(bench, strategy)
    monitor.start()
    bench.start(
        bench.settings(timeouts=RolloutTimeouts(drain=timedelta(seconds=1), poll=timedelta(seconds=1)))
    )
    try:
        assert held_event.wait(60), "no pairing happened"
        time.sleep(2.0)
        donor = bench.client.get(NODE, held["donor"])
        assert not donor["spec"].get("unschedulable"), "donor cordoned while its heir was NotReady"
        assert all(p.name != held["donor"] for p in bench.pending_nodes()), (
            "donor handed to a Leave too early"
        )
        bench.emulator.state.set_power_state(held["machine"], "running")

        bench.wait_for(
            lambda: bench.client.get(NODE, first)["spec"].get("unschedulable"), 60, f"{first} cordoned"
        )
        bench.wait_for(lambda: _stuck_on(bench, first), 20, f"Degraded DrainStuck naming {first}")
        bench.wait_for(
            lambda: any(first in e["message"] for e in bench.events(bench.node_image().name, "DrainStuck")),
            20,
            "DrainStuck Warning Event",
        )
        guarded = bench.client.get(POD, "guarded", bench.namespace)
        assert not guarded["metadata"].get("deletionTimestamp"), "pod evicted although its budget allows none"
        assert any(m["name"] == first and m["provisioning"] != "Deleting" for m in bench.machines())
        _set_disruptions_allowed(bench, "guarded", 1)

        bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 120, "rollout finished")
        bench.wait_for(lambda: not bench.pending_nodes(), 30, "PendingNodes finished")
    finally:
        monitor.stop()

    assert monitor.violations == []
    assert monitor.most_extra_machines <= MAX_SURGE, monitor.most_extra_machines
    assert monitor.most_extra_nodes <= MAX_SURGE, monitor.most_extra_nodes
    assert monitor.most_extra_machines >= 1
    assert sorted(monitor.removed_donors) == sorted(originals)

    nodes = bench.nodes()
    assert len(nodes) == ORIGINAL
    assert not set(originals) & {n["metadata"]["name"] for n in nodes}
    for node in nodes:
        metadata = node["metadata"]
        assert metadata["annotations"][NODE_IMAGE_ANNOTATION] == NEW_IMAGE
        assert HEIR_ANNOTATION not in metadata["annotations"]
        assert DONOR_ANNOTATION not in metadata["annotations"]
        assert metadata["labels"]["kubernetes.io/hostname"] == metadata["name"], "reserved label copied"
    assert sorted(n["metadata"]["labels"][CUSTOM_LABEL] for n in nodes) == sorted(originals)

    machines = bench.machines()
    assert sorted(m["name"] for m in machines) == sorted(n["metadata"]["name"] for n in nodes), (
        "orphan machine"
    )
    assert all(m["image"].get("communityGalleryImageId") == NEW_IMAGE for m in machines)

    with pytest.raises(errors.NotFound):
        bench.client.get(POD, "guarded", bench.namespace)
    assert monitor.autoscaling_seen == {True, False}
    restored = bench.client.get(AUTOSCALING_STRATEGY, strategy)
    assert restored["spec"]["enabled"] is True
    assert "nodewright.io/autoscaling-enabled-before-rollout" not in (
        restored["metadata"].get("annotations") or {}
    )
    status = bench.node_image().status
    assert (status.total_nodes, status.up_to_date_nodes, status.budget) == (ORIGINAL, ORIGINAL, MAX_SURGE)
    assert bench.condition(kind="Progressing") == ("False", "RolloutComplete")
    assert bench.condition(kind="Degraded") == ("False", "AsExpected")
