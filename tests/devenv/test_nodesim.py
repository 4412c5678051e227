"""The node simulator and kwok together: Nodes follow emulated machines (the simulator, the cloud
side), and kwok plays their kubelets (Ready, NotReady while stopped, Leases, pod lifecycle, pool
addresses); only the simulator's own nodes are touched."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.mgmt.compute import ComputeManagementClient

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.devenv.kwok import POD_IP_SOURCE_LABEL
from nodewright.devenv.nodesim import (
    POWER_STATE_ANNOTATION,
    SIMULATED_LABEL,
    Machine,
    NodeSimulator,
    machines_in_emulator,
    plan_nodes,
    pods_to_report_ready,
)
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD, Kind
from tests.conftest import Cluster

OWNER = "test-owner"
LEASE = Kind("coordination.k8s.io/v1", "Lease", "leases")


def machine(name: str, running: bool = True) -> Machine:
    return Machine(provider_id=f"azure:///subscriptions/s/machines/{name}", node_name=name, running=running)


def node(
    name: str, owner: str = OWNER, power: str = "running", provider: str | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {SIMULATED_LABEL: owner},
            "annotations": {POWER_STATE_ANNOTATION: power},
        },
        "spec": {"providerID": provider or f"azure:///subscriptions/s/machines/{name}"},
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
            [machine("a", running=False)], [node("a")], 5.0, ([], [], {"a": "stopped"}), id="stopped-recorded"
        ),
        pytest.param(
            [machine("a")], [node("a", power="stopped")], 5.0, ([], [], {"a": "running"}), id="restarted"
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
    expected: tuple[list[str], list[str], dict[str, str]],
) -> None:
    """Nodes are created, deleted and annotated with the machine's power state, for this owner only."""
    first_seen = {m.provider_id.lower(): 100.0 - seen_for for m in machines}
    plan = plan_nodes(machines, nodes, first_seen, now=100.0, join_delay=2.0, owner=OWNER)
    assert ([m.node_name for m in plan.create], plan.delete, plan.set_power) == expected


class _Token:
    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("emulator-token", int(time.time()) + 3600)


def _wait(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
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


def _condition(item: dict[str, Any], kind: str) -> str:
    for condition in (item.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return str(condition["status"])
    return ""


def _pod(client: Client, namespace: str, name: str, node_name: str, **metadata: Any) -> None:
    client.create(
        POD,
        {
            "metadata": {"name": name, "namespace": namespace, **metadata},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )


def _gone(client: Client, kind: Kind, name: str, namespace: str | None = None) -> bool:
    try:
        client.get(kind, name, namespace)
    except errors.NotFound:
        return True
    return False


def test_nodes_follow_emulated_machines(
    simulated: tuple[NodeSimulator, str, str], arm_emulator: ArmEmulator, client: Client, namespace: str
) -> None:
    """Each emulated VM and scale-set instance becomes a Node with its providerID and the cloud
    provider's labels, which kwok makes Ready and heartbeats through a Lease; its pods run, Ready,
    with no address until a CNS gives one; the Node goes when its instance is deleted."""
    simulator, scale_set_id, vm_id = simulated
    selector = f"{SIMULATED_LABEL}={simulator.owner}"
    plan = simulator.sync_once()
    assert len(plan.create) == 3
    nodes = client.list(NODE, label_selector=selector).items
    provider_ids = sorted(n["spec"]["providerID"] for n in nodes)
    assert len(nodes) == 3
    assert f"azure://{vm_id}" in provider_ids
    assert sum(p.startswith(f"azure://{scale_set_id}/virtualMachines/") for p in provider_ids) == 2
    for item in nodes:
        name = item["metadata"]["name"]
        assert name == name.lower()
        assert item["metadata"]["labels"]["kubernetes.io/hostname"] == name
        assert item["metadata"]["annotations"][POWER_STATE_ANNOTATION] == "running"
    names = sorted(n["metadata"]["name"] for n in nodes)
    _wait(lambda: all(_condition(client.get(NODE, name), "Ready") == "True" for name in names))
    _wait(lambda: not any(_gone(client, LEASE, name, "kube-node-lease") for name in names))

    instance_node = next(n for n in nodes if "/virtualMachineScaleSets/" in n["spec"]["providerID"])
    node_name = instance_node["metadata"]["name"]
    _pod(client, namespace, "workload", node_name)
    _wait(lambda: _condition(client.get(POD, "workload", namespace), "Ready") == "True")
    status = client.get(POD, "workload", namespace)["status"]
    assert status["phase"] == "Running"
    assert "podIP" not in status

    simulator.start()
    compute = ComputeManagementClient(_Token(), DEFAULT_SUBSCRIPTION, **arm_emulator.client_options())
    scale_set_name = scale_set_id.rsplit("/", 1)[1]
    instance_id = instance_node["spec"]["providerID"].rsplit("/", 1)[1]
    compute.virtual_machine_scale_set_vms.begin_delete("rg-sim", scale_set_name, instance_id).result()
    _wait(lambda: _gone(client, NODE, node_name))
    assert len(client.list(NODE, label_selector=selector).items) == 2


def test_stopped_machine_turns_its_node_not_ready(
    simulated: tuple[NodeSimulator, str, str], arm_emulator: ArmEmulator, client: Client
) -> None:
    """The simulator records a stopped machine on its Node; kwok then reports the Node NotReady
    (as a shutting-down kubelet does) and Ready again once the machine runs."""
    name, machine_id = _stopped_vm_node(simulated, arm_emulator, client)
    assert client.get(NODE, name)["metadata"]["annotations"][POWER_STATE_ANNOTATION] == "stopped"
    arm_emulator.state.set_power_state(machine_id, "running")
    _wait(lambda: _condition(client.get(NODE, name), "Ready") == "True")


def test_a_pod_marked_not_ready_with_its_node_is_ready_again_when_the_machine_runs(
    simulated: tuple[NodeSimulator, str, str], arm_emulator: ArmEmulator, client: Client, namespace: str
) -> None:
    """A pod that reports Ready and is bound to a Node the node lifecycle controller holds NotReady
    is marked NotReady by that controller (kube-controller-manager, for real); once the machine
    runs again the pod is Ready again, as its returning kubelet reports it. kwok alone would leave
    it NotReady for good, which in a rollout is a heir's pod bound in the seconds before the
    controller's next look (its monitor period is 5 s) after the heir came back."""
    name, machine_id = _stopped_vm_node(simulated, arm_emulator, client)
    time.sleep(6.0)  # the node lifecycle controller's monitor period, so that it holds NotReady
    # A pod no scheduler takes, given the status a kubelet reports for it, then bound: what the
    # controller finds when it looks at a pod bound to a node.
    body = {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}
    client.create(POD, {"metadata": {"name": "resident", "namespace": namespace}, "spec": body})
    conditions = [{"type": kind, "status": "True"} for kind in ("Initialized", "ContainersReady", "Ready")]
    status = {"phase": "Running", "conditions": conditions}
    client.patch(POD, "resident", {"status": status}, namespace, subresource="status")
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "resident"}}
    binding["target"] = {"apiVersion": "v1", "kind": "Node", "name": name}
    client.request("POST", POD.path(namespace, "resident") + "/binding", body=binding)
    _wait(lambda: _condition(client.get(POD, "resident", namespace), "Ready") == "False")
    arm_emulator.state.set_power_state(machine_id, "running")
    _wait(lambda: _condition(client.get(NODE, name), "Ready") == "True")
    _wait(lambda: _condition(client.get(POD, "resident", namespace), "Ready") == "True", timeout=15)
    assert _condition(client.get(POD, "resident", namespace), "ContainersReady") == "True"


def _stopped_vm_node(
    simulated: tuple[NodeSimulator, str, str], arm_emulator: ArmEmulator, client: Client
) -> tuple[str, str]:
    """The VM's Node, once Ready, and its machine, with the simulator running and the machine
    then stopped until the Node is NotReady."""
    simulator, _, vm_id = simulated
    simulator.sync_once()
    node = next(
        n
        for n in client.list(NODE, label_selector=f"{SIMULATED_LABEL}={simulator.owner}").items
        if n["spec"]["providerID"] == f"azure://{vm_id}"
    )
    name, machine_id = str(node["metadata"]["name"]), str(parse_provider_id(node["spec"]["providerID"]))
    _wait(lambda: _condition(client.get(NODE, name), "Ready") == "True")
    simulator.start()
    arm_emulator.state.set_power_state(machine_id, "stopped")
    _wait(lambda: _condition(client.get(NODE, name), "Ready") == "False")
    return name, machine_id


def _pod_status(phase: str, ready: str, containers: str = "True", **extra: Any) -> dict[str, Any]:
    conditions = [{"type": "ContainersReady", "status": containers}, {"type": "Ready", "status": ready}]
    return {
        "metadata": {"namespace": "ns", "name": extra.pop("name", "p"), **extra.pop("metadata", {})},
        "spec": extra.pop("spec", {}),
        "status": {"phase": phase, "conditions": conditions + extra.pop("conditions", [])},
    }


@pytest.mark.parametrize(
    ("pod", "reported"),
    [
        pytest.param(_pod_status("Running", "False"), True, id="marked-not-ready"),
        pytest.param(_pod_status("Running", "True"), False, id="ready-already"),
        pytest.param(_pod_status("Running", "False", containers="False"), False, id="containers-not-ready"),
        pytest.param(_pod_status("Pending", "False"), False, id="not-running"),
        pytest.param(
            _pod_status("Running", "False", metadata={"deletionTimestamp": "2026-12-01T00:00:00Z"}),
            False,
            id="being-deleted",
        ),
        pytest.param(
            _pod_status("Running", "False", spec={"readinessGates": [{"conditionType": "example.com/lb"}]}),
            False,
            id="readiness-gate-unset",
        ),
        pytest.param(
            _pod_status(
                "Running",
                "False",
                spec={"readinessGates": [{"conditionType": "example.com/lb"}]},
                conditions=[{"type": "example.com/lb", "status": "True"}],
            ),
            True,
            id="readiness-gate-true",
        ),
    ],
)
def test_pods_to_report_ready(pod: dict[str, Any], reported: bool) -> None:
    assert pods_to_report_ready([pod]) == ([("ns", "p")] if reported else [])


def test_terminating_pod_is_finished(
    simulated: tuple[NodeSimulator, str, str], client: Client, namespace: str
) -> None:
    """A pod deleted gracefully on a simulated node is gone soon after: kwok confirms it."""
    simulator, _, _ = simulated
    simulator.sync_once()
    node_name = client.list(NODE, label_selector=f"{SIMULATED_LABEL}={simulator.owner}").items[0]["metadata"][
        "name"
    ]
    _pod(client, namespace, "graceful", node_name)
    _wait(lambda: _condition(client.get(POD, "graceful", namespace), "Ready") == "True")
    client.delete(POD, "graceful", namespace, grace_period_seconds=30)
    _wait(lambda: _gone(client, POD, "graceful", namespace))


def test_pod_waits_for_its_pool_address(
    simulated: tuple[NodeSimulator, str, str], client: Client, namespace: str
) -> None:
    """A pod that takes its address from the node's pool stays Pending until the simulated CNS
    writes the address to its status; kwok then reports it Running and Ready, address kept."""
    simulator, _, _ = simulated
    simulator.sync_once()
    node_name = client.list(NODE, label_selector=f"{SIMULATED_LABEL}={simulator.owner}").items[0]["metadata"][
        "name"
    ]
    _pod(client, namespace, "pooled", node_name, labels={POD_IP_SOURCE_LABEL: "node-pool"})
    _pod(client, namespace, "witness", node_name)
    _wait(lambda: _condition(client.get(POD, "witness", namespace), "Ready") == "True")
    pending = client.get(POD, "pooled", namespace)
    assert pending["status"]["phase"] == "Pending"
    assert "podIP" not in pending["status"]
    address = {"podIP": "10.240.0.77", "podIPs": [{"ip": "10.240.0.77"}]}
    client.patch(POD, "pooled", {"status": address}, namespace, subresource="status")
    _wait(lambda: _condition(client.get(POD, "pooled", namespace), "Ready") == "True")
    status = client.get(POD, "pooled", namespace)["status"]
    assert (status["phase"], status["podIP"], status["podIPs"]) == (
        "Running",
        "10.240.0.77",
        [{"ip": "10.240.0.77"}],
    )
