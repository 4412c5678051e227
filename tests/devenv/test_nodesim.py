"""The node simulator: Nodes follow emulated machines, terminating pods are finished, and only the
simulator's own nodes and pods are touched."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.mgmt.compute import ComputeManagementClient

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.devenv.nodesim import (
    SIMULATED_LABEL,
    Machine,
    NodeSimulator,
    machines_in_emulator,
    plan_nodes,
    plan_pods,
)
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.kinds import NODE, POD
from tests.conftest import Cluster

OWNER = "test-owner"


def machine(name: str, running: bool = True) -> Machine:
    return Machine(provider_id=f"azure:///subscriptions/s/machines/{name}", node_name=name, running=running)


def node(name: str, owner: str = OWNER, ready: bool = True, provider: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {SIMULATED_LABEL: owner}},
        "spec": {"providerID": provider or f"azure:///subscriptions/s/machines/{name}"},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.mark.parametrize(
    ("machines", "nodes", "seen_for", "expected"),
    [
        pytest.param([machine("a")], [], 5.0, (["a"], [], {}), id="running-machine-joins-after-delay"),
        pytest.param([machine("a")], [], 1.0, ([], [], {}), id="not-before-the-join-delay"),
        pytest.param(
            [machine("a", running=False)], [], 5.0, ([], [], {}), id="stopped-machine-does-not-join"
        ),
        pytest.param([], [node("a")], 5.0, ([], ["a"], {}), id="node-of-vanished-machine-deleted"),
        pytest.param([], [node("x", owner="someone-else")], 5.0, ([], [], {}), id="other-owners-untouched"),
        pytest.param(
            [machine("a", running=False)], [node("a")], 5.0, ([], [], {"a": False}), id="stopped-not-ready"
        ),
        pytest.param(
            [machine("a")], [node("a", ready=False)], 5.0, ([], [], {"a": True}), id="restarted-ready"
        ),
        pytest.param(
            [machine("a")],
            [node("a", provider="AZURE:///SUBSCRIPTIONS/S/MACHINES/A")],
            5.0,
            ([], [], {}),
            id="provider-id-compared-case-insensitively",
        ),
    ],
)
def test_plan_nodes(
    machines: list[Machine],
    nodes: list[dict[str, Any]],
    seen_for: float,
    expected: tuple[list[str], list[str], dict[str, bool]],
) -> None:
    """Nodes are created, deleted and flipped Ready to match machines, for this owner only."""
    first_seen = {m.provider_id.lower(): 100.0 - seen_for for m in machines}
    plan = plan_nodes(machines, nodes, first_seen, now=100.0, join_delay=2.0, owner=OWNER)
    assert ([m.node_name for m in plan.create], plan.delete, plan.set_ready) == expected


def pod(
    name: str, node_name: str | None, *, deleting: bool = False, phase: str = "Pending"
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ns"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": {"nodeName": node_name} if node_name else {},
        "status": {"phase": phase},
    }


def test_plan_pods_plays_kubelet_only_for_its_nodes() -> None:
    """Terminating pods on own nodes finish, pods of vanished own nodes go, others are untouched."""
    pods = [
        pod("terminating", "a", deleting=True),
        pod("pending", "a"),
        pod("running", "a", phase="Running"),
        pod("orphan", "gone"),
        pod("elsewhere-terminating", "foreign", deleting=True),
        pod("unscheduled", None),
    ]
    plan = plan_pods(pods, simulated_nodes={"a"}, vanished_nodes={"gone"})
    assert plan.finish == [("ns", "terminating"), ("ns", "orphan")]
    assert plan.mark_running == [("ns", "pending")]


class _Token:
    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("emulator-token", int(time.time()) + 3600)


def _wait(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def client(cluster: Cluster) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


@pytest.fixture
def simulated(arm_emulator: ArmEmulator, client: Client) -> Iterator[tuple[NodeSimulator, str, str]]:
    estate = arm_emulator.estate
    estate.add_resource_group("rg-sim")
    vnet = estate.add_virtual_network("rg-sim", "vnet", subnets={"nodes": "10.240.0.0/24"})
    suffix = uuid.uuid4().hex[:6]
    scale_set = estate.add_scale_set("rg-sim", f"sim{suffix}", subnet_id=vnet + "/subnets/nodes", capacity=2)
    vm = estate.add_virtual_machine("rg-sim", f"vm{suffix}", subnet_id=vnet + "/subnets/nodes")
    owner = f"sim-{suffix}"
    simulator = NodeSimulator(client, machines_in_emulator(arm_emulator.state), owner=owner, interval=0.2)
    yield simulator, scale_set, vm
    simulator.stop()
    for item in client.list(NODE, label_selector=f"{SIMULATED_LABEL}={owner}").items:
        client.delete(NODE, item["metadata"]["name"], ignore_not_found=True)


def test_nodes_follow_emulated_machines(
    simulated: tuple[NodeSimulator, str, str], arm_emulator: ArmEmulator, client: Client, namespace: str
) -> None:
    """Each emulated VM and scale-set instance becomes a Ready Node with its providerID; a Node
    goes when its instance is deleted through the real SDK, and a pod on it is cleaned up."""
    simulator, scale_set_id, vm_id = simulated
    selector = f"{SIMULATED_LABEL}={simulator.owner}"
    simulator.sync_once()
    nodes = client.list(NODE, label_selector=selector).items
    provider_ids = sorted(n["spec"]["providerID"] for n in nodes)
    assert len(nodes) == 3
    assert f"azure://{vm_id}" in provider_ids
    assert sum(p.startswith(f"azure://{scale_set_id}/virtualMachines/") for p in provider_ids) == 2
    for item in nodes:
        ready = [c for c in item["status"]["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "True"
        assert item["metadata"]["name"] == item["metadata"]["name"].lower()

    instance_node = next(n for n in nodes if "/virtualMachineScaleSets/" in n["spec"]["providerID"])
    node_name = instance_node["metadata"]["name"]
    client.create(
        POD,
        {
            "metadata": {"name": "workload", "namespace": namespace},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    simulator.start()
    _wait(lambda: client.get(POD, "workload", namespace)["status"].get("phase") == "Running")

    compute = ComputeManagementClient(_Token(), DEFAULT_SUBSCRIPTION, **arm_emulator.client_options())
    scale_set_name = scale_set_id.rsplit("/", 1)[1]
    instance_id = instance_node["spec"]["providerID"].rsplit("/", 1)[1]
    compute.virtual_machine_scale_set_vms.begin_delete("rg-sim", scale_set_name, instance_id).result()

    def gone(kind: Any, name: str, namespace: str | None = None) -> bool:
        try:
            client.get(kind, name, namespace)
        except errors.NotFound:
            return True
        return False

    _wait(lambda: gone(NODE, node_name))
    _wait(lambda: gone(POD, "workload", namespace))
    assert len(client.list(NODE, label_selector=selector).items) == 2


def test_terminating_pod_is_finished(
    simulated: tuple[NodeSimulator, str, str], client: Client, namespace: str
) -> None:
    """A pod deleted gracefully on a simulated node is gone at once: the simulator confirms it."""
    simulator, _, _ = simulated
    simulator.sync_once()
    node_name = client.list(NODE, label_selector=f"{SIMULATED_LABEL}={simulator.owner}").items[0]["metadata"][
        "name"
    ]
    client.create(
        POD,
        {
            "metadata": {"name": "graceful", "namespace": namespace},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    client.delete(POD, "graceful", namespace, grace_period_seconds=30)
    assert client.get(POD, "graceful", namespace)["metadata"].get("deletionTimestamp")
    simulator.sync_once()
    with pytest.raises(errors.NotFound):
        client.get(POD, "graceful", namespace)
