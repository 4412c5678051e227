"""The Cilium agent's stand-in of ``bench.ipam --peer cilium`` against a real API server (no Cilium
runs: a minimal CiliumNode CRD of our own stands for the one the operator registers): it creates a
Node's CiliumNode with the spec the operator reads, hands pods IPs from ``spec.ipam.pool`` only,
and keeps ``status.ipam.used`` equal to the pods' IPs."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest

from bench.cilium_nodes import CILIUM_NODE, CiliumNodeKeeper, instance_id_of
from nodewright.devenv.crds import CUSTOM_RESOURCE_DEFINITION
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD
from tests.conftest import Cluster

MACHINE = (
    "/subscriptions/s/resourceGroups/RG-Bench/providers/Microsoft.Compute"
    "/virtualMachineScaleSets/vmss/virtualMachines/3"
)


def _crd() -> dict[str, object]:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "metadata": {"name": "ciliumnodes.cilium.io"},
        "spec": {
            "group": "cilium.io",
            "names": {"kind": "CiliumNode", "plural": "ciliumnodes", "singular": "ciliumnode"},
            "scope": "Cluster",
            "versions": [
                {
                    "name": "v2",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


@pytest.fixture
def client(cluster: Cluster) -> Client:
    client = Client.from_kubeconfig(str(cluster.kubeconfig))
    with contextlib.suppress(errors.AlreadyExists):
        client.create(CUSTOM_RESOURCE_DEFINITION, _crd())
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(errors.NotFound):
            client.list(CILIUM_NODE)
            return client
        assert time.monotonic() < deadline, "CiliumNode CRD not served"
        time.sleep(0.2)


@pytest.fixture
def node(client: Client) -> Iterator[str]:
    name = f"cilium-{uuid.uuid4().hex[:8]}"
    label = {"bench-cilium": name}
    client.create(
        NODE, {"metadata": {"name": name, "labels": label}, "spec": {"providerID": "azure://" + MACHINE}}
    )
    yield name
    for kind in (NODE, CILIUM_NODE):
        with contextlib.suppress(errors.NotFound):
            client.delete(kind, name)


def _pod(client: Client, namespace: str, name: str, node: str) -> None:
    spec = {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
    client.create(POD, {"metadata": {"name": name, "namespace": namespace}, "spec": spec}, namespace)


def _used(client: Client, node: str) -> dict[str, object]:
    cilium_node = client.get(CILIUM_NODE, node)
    return dict(((cilium_node.get("status") or {}).get("ipam") or {}).get("used") or {})


def test_instance_id_is_the_provider_id_lower_case_without_scheme() -> None:
    assert instance_id_of("azure://" + MACHINE) == MACHINE.lower()


def test_keeper_creates_cilium_node_and_hands_pool_ips(client: Client, node: str, namespace: str) -> None:
    """The CiliumNode's spec names the instance, the NIC and pre-allocate; two pool IPs go to two of
    three pods (the third waits, counted as starved); a deleted pod's IP goes to the waiting one;
    ``status.ipam.used`` follows the pods each time."""
    keeper = CiliumNodeKeeper(
        client,
        node_selector=f"bench-cilium={node}",
        pod_namespace=namespace,
        interface_name="nic0",
        pre_allocate=16,
    )
    keeper.sync_once()
    spec = client.get(CILIUM_NODE, node)["spec"]
    assert spec == {
        "instance-id": MACHINE.lower(),
        "azure": {"interface-name": "nic0"},
        "ipam": {"pre-allocate": 16},
    }
    pool = {"10.0.0.5": {"resource": "nic-id"}, "10.0.0.6": {"resource": "nic-id"}}
    client.patch(CILIUM_NODE, node, {"spec": {"ipam": {"pool": pool}}})
    for name in ("a", "b", "c"):
        _pod(client, namespace, name, node)
    keeper.sync_once()
    addresses = {
        p["metadata"]["name"]: (p.get("status") or {}).get("podIP") for p in client.list(POD, namespace).items
    }
    given = {name: ip for name, ip in addresses.items() if ip}
    assert sorted(given.values()) == sorted(pool)
    (waiting,) = set(addresses) - set(given)
    assert set(keeper.starved_since) == {waiting}
    assert {ip: entry["owner"] for ip, entry in _used(client, node).items()} == {  # type: ignore[index]
        ip: f"{namespace}/{name}" for name, ip in given.items()
    }
    gone = sorted(given)[0]
    client.delete(POD, gone, namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while waiting not in keeper.assigned_at:
        assert time.monotonic() < deadline, "the freed IP was not handed on"
        keeper.sync_once()
        time.sleep(0.2)
    owners = {entry["owner"] for entry in _used(client, node).values()}  # type: ignore[index]
    assert owners == {f"{namespace}/{name}" for name in set(addresses) - {gone}}
