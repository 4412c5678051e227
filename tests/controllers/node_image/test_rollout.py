"""A whole rollout against the real cluster (API server, controller manager, scheduler, kwok), the
ARM emulator and the node simulator: six outdated nodes in two scale sets are replaced within the
surge, labels move, no donor goes before its heir is Ready, Deployments move to the new-image
nodes with their PodDisruptionBudgets (status computed by the disruption controller) respected
throughout, and autoscaling is off during the rollout and restored after."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_image.grouping import (
    DONOR_ANNOTATION,
    HEIR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    RolloutTimeouts,
)
from nodewright.controllers.node_image.resources import AUTOSCALING_STRATEGY
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.runtime import errors
from nodewright.runtime.kube.kinds import NODE, POD, POD_DISRUPTION_BUDGET, Kind
from nodewright.runtime.kube.objects import condition_is_true as node_ready
from tests.controllers.node_image.histories import hand_overs, recording
from tests.controllers.node_image.support import CUSTOM_LABEL, NEW_IMAGE, RolloutBench

pytestmark = pytest.mark.slow

MAX_SURGE = 2
ORIGINAL = 6
WEB_REPLICAS = 4
WEB_MAX_UNAVAILABLE = 1
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
DAEMON_SET = Kind("apps/v1", "DaemonSet", "daemonsets")
OUTDATED_TAINT = {"key": "example.com/outdated", "value": "true", "effect": "NoSchedule"}


class Monitor(threading.Thread):
    """Samples machines and Nodes every 50 ms: the most extra machines and Nodes seen, the donors
    whose machine started deleting, and the autoscaling setting. Whether each heir was Ready when
    its donor was handed over is not sampled but read from the watch histories (``histories.recording``)."""

    def __init__(self, bench: RolloutBench, strategy: str) -> None:
        super().__init__(daemon=True, name="rollout-monitor")
        self.bench = bench
        self.strategy = strategy
        self.most_extra_machines = 0
        self.most_extra_nodes = 0
        self.autoscaling_seen: set[bool] = set()
        self.removed_donors: list[str] = []
        self.fewest_ready_web = WEB_REPLICAS
        self.web_pods: dict[str, str] = {}
        """Every web pod seen bound to a node: name -> node."""
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
            strategy = self.bench.client.get(AUTOSCALING_STRATEGY, self.strategy)
            self.autoscaling_seen.add(bool(strategy["spec"]["enabled"]))
            self._sample_web()
            previous = nodes
            time.sleep(0.05)

    def _sample_web(self) -> None:
        pods = self.bench.client.list(POD, self.bench.namespace, label_selector="app=web").items
        self.fewest_ready_web = min(self.fewest_ready_web, len([p for p in pods if _serving(p)]))
        for pod in pods:
            if pod["spec"].get("nodeName"):
                self.web_pods.setdefault(pod["metadata"]["name"], pod["spec"]["nodeName"])

    def stop(self) -> None:
        self._halt.set()
        self.join(5)

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _serving(pod: dict[str, Any]) -> bool:
    """Ready and not being deleted: a replica that serves."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _deploy(bench: RolloutBench, name: str, replicas: int, budget: dict[str, int]) -> None:
    """A Deployment on the bench's nodes and its PodDisruptionBudget."""
    labels = {"app": name}
    bench.client.create(
        DEPLOYMENT,
        {
            "metadata": {"name": name, "namespace": bench.namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {SIMULATED_LABEL: bench.owner},
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                },
            },
        },
    )
    bench.client.create(
        POD_DISRUPTION_BUDGET,
        {
            "metadata": {"name": name, "namespace": bench.namespace},
            "spec": {**budget, "selector": {"matchLabels": labels}},
        },
    )


def _pods(bench: RolloutBench, app: str) -> list[dict[str, Any]]:
    return bench.client.list(POD, bench.namespace, label_selector=f"app={app}").items


def _disruptions_allowed(bench: RolloutBench, name: str) -> int | None:
    """The budget's status as the disruption controller computed it (None before it has)."""
    budget = bench.client.get(POD_DISRUPTION_BUDGET, name, bench.namespace)
    if (budget.get("status") or {}).get("observedGeneration") != budget["metadata"]["generation"]:
        return None
    return int(budget["status"]["disruptionsAllowed"])


def _agent(bench: RolloutBench, node: str) -> None:
    """A DaemonSet's pod on ``node`` (a real DaemonSet object owns it; no DaemonSet controller
    runs, so it stays the only one): a drain leaves it alone."""
    owner = bench.client.create(
        DAEMON_SET,
        {
            "metadata": {"name": "agent", "namespace": bench.namespace},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        },
    )
    reference = {"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True}
    reference |= {"name": "agent", "uid": owner["metadata"]["uid"]}
    metadata = {"name": "agent", "namespace": bench.namespace, "labels": {"app": "agent"}}
    bench.client.create(
        POD,
        {
            "metadata": {**metadata, "ownerReferences": [reference]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )


def _start_workloads(bench: RolloutBench, originals: list[str]) -> str:
    """Deployments web (budget: one unavailable) and guarded (one replica that must stay), both
    Ready on the outdated nodes with their budgets computed; then the outdated nodes are tainted
    NoSchedule, so that every replacement can only land on a new-image node. Returns the node
    of the guarded pod."""
    _deploy(bench, "web", WEB_REPLICAS, {"maxUnavailable": WEB_MAX_UNAVAILABLE})
    _deploy(bench, "guarded", 1, {"minAvailable": 1})
    bench.wait_for(
        lambda: (
            len([p for p in _pods(bench, "web") if _serving(p)]) == WEB_REPLICAS
            and len([p for p in _pods(bench, "guarded") if _serving(p)]) == 1
        ),
        60,
        "web and guarded Ready",
    )
    bench.wait_for(
        lambda: _disruptions_allowed(bench, "web") == WEB_MAX_UNAVAILABLE, 60, "web budget computed"
    )
    bench.wait_for(lambda: _disruptions_allowed(bench, "guarded") == 0, 60, "guarded budget computed")
    for name in originals:
        bench.client.patch(NODE, name, {"spec": {"taints": [OUTDATED_TAINT]}})
    return str(_pods(bench, "guarded")[0]["spec"]["nodeName"])


def _assert_moved(bench: RolloutBench, app: str, replicas: int, new_image_nodes: set[str]) -> None:
    """All ``replicas`` of ``app`` end Ready on new-image nodes."""
    bench.wait_for(
        lambda: len([p for p in _pods(bench, app) if _serving(p)]) == replicas, 60, f"{app} Ready again"
    )
    pods = _pods(bench, app)
    assert len(pods) == replicas
    assert {p["spec"]["nodeName"] for p in pods} <= new_image_nodes


def _stuck_on(bench: RolloutBench, node: str) -> bool:
    for condition in bench.node_image().status.conditions:
        if condition.type == "Degraded":
            return condition.reason == "DrainStuck" and node in condition.message
    return False


def test_six_nodes_in_two_scale_sets_are_replaced_within_the_surge(bench: RolloutBench) -> None:
    """All six outdated nodes are replaced by nodes on the new image; at most maxSurge extra
    machines and Nodes at any time; no donor leaves before its heir is Ready (one heir is held
    NotReady to prove it); labels move; the guarded pod is evicted only once the disruption
    controller's budget allows it (after a second replica is Ready); every evicted web pod is
    replaced on a new-image node and becomes Ready, and Ready web replicas never fall below what
    their budget allows; autoscaling is off during the rollout and back on after."""
    scale_sets = [bench.add_scale_set("a", 3), bench.add_scale_set("b", 3)]
    bench.start_simulator()
    originals = bench.label_nodes()
    assert len(originals) == ORIGINAL
    first = _start_workloads(bench, sorted(originals))
    original_web = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in _pods(bench, "web")}
    original_guarded = _pods(bench, "guarded")[0]["metadata"]["name"]
    _agent(bench, first)
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
        bench.wait_for(lambda: not node_ready(bench.client.get(NODE, held["heir"])), 10, "heir NotReady")
        held_event.set()

    bench.switch.pauses["pair-donor"] = hold_first_heir_not_ready
    bench.create_node_image(max_surge=MAX_SURGE)
    for scale_set in scale_sets:
        bench.create_scaling_group(scale_set)
    with recording(bench) as (node_history, pending_history), Monitor(bench, strategy) as monitor:
        bench.start(
            bench.settings(timeouts=RolloutTimeouts(drain=timedelta(seconds=1), poll=timedelta(seconds=1)))
        )
        assert held_event.wait(60), "no pairing happened"
        with bench.watched(passes=3):  # passes that see the heir NotReady
            pass
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
        guarded = bench.client.get(POD, original_guarded, bench.namespace)
        assert not guarded["metadata"].get("deletionTimestamp"), "pod evicted although its budget allows none"
        assert _disruptions_allowed(bench, "guarded") == 0
        assert any(m["name"] == first and m["provisioning"] != "Deleting" for m in bench.machines())
        # A second replica, Ready on a new-image node, lets the disruption controller allow one.
        bench.client.patch(DEPLOYMENT, "guarded", {"spec": {"replicas": 2}}, bench.namespace)

        bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 120, "rollout finished")
        bench.wait_for(lambda: not bench.pending_nodes(), 30, "PendingNodes finished")
        # Autoscaling is restored in the pass after the status says no rollout runs: wait for it.
        bench.wait_for(
            lambda: bench.client.get(AUTOSCALING_STRATEGY, strategy)["spec"]["enabled"] is True,
            30,
            "autoscaling restored",
        )

    # No donor was handed over (and its machine deleted) while its heir was not Ready.
    assert hand_overs(node_history, pending_history, set(originals)) == dict.fromkeys(originals, "Ready")
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
        bench.client.get(POD, original_guarded, bench.namespace)
    new_image_nodes = {n["metadata"]["name"] for n in nodes}
    _assert_moved(bench, "guarded", 2, new_image_nodes)
    _assert_moved(bench, "web", WEB_REPLICAS, new_image_nodes)
    replacements = {name: node for name, node in monitor.web_pods.items() if name not in original_web}
    assert not set(original_web) & {p["metadata"]["name"] for p in _pods(bench, "web")}, "web pod not evicted"
    assert len(replacements) == len(original_web), replacements
    assert set(replacements.values()) <= new_image_nodes, "a replacement landed on an outdated node"
    assert monitor.fewest_ready_web >= WEB_REPLICAS - WEB_MAX_UNAVAILABLE, monitor.fewest_ready_web
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
