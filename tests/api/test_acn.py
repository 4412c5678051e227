"""acn.azure.com models: NodeNetworkConfig (v1alpha) and ClusterSubnetState (v1alpha1) read and write
exactly the JSON Azure CNS reads and writes, and their CRDs carry the same facts as upstream's
(scope, short name, status subresource, printer columns, enums, int64 formats, defaults)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pykube
import pytest

from nodewright.api import RESOURCES, ValidationError
from nodewright.api.acn.v1alpha import (
    IPAssignment,
    NetworkContainer,
    NodeNetworkConfig,
    NodeNetworkConfigSpec,
    NodeNetworkConfigStatus,
    Scaler,
)
from nodewright.api.acn.v1alpha1 import ClusterSubnetState, ClusterSubnetStateStatus

# An NNC as Azure CNS and its control plane write it for a dynamic (SWIFT) VNET node, every field
# set: the network container is modelled on CNS's own conversion tests
# (cns/kubecontroller/nodenetworkconfig), the scaler on its defaults (batch 16, max 250).
CNS_NODE_NETWORK_CONFIG: dict[str, Any] = {
    "apiVersion": "acn.azure.com/v1alpha",
    "kind": "NodeNetworkConfig",
    "metadata": {"name": "aks-nodepool1-12345678-vmss000000", "namespace": "kube-system"},
    "spec": {
        "requestedIPCount": 16,
        "ipsNotInUse": ["539970a2-c2dd-11ea-b3de-0242ac130005"],
        "availabilityZone": 2,
    },
    "status": {
        "assignedIPCount": 2,
        "scaler": {
            "batchSize": 16,
            "releaseThresholdPercent": 150,
            "requestThresholdPercent": 50,
            "maxIPCount": 250,
        },
        "status": "Updated",
        "networkContainers": [
            {
                "id": "160005ba-cd02-11ea-87d0-0242ac130003",
                "assignmentMode": "dynamic",
                "type": "vnet",
                "primaryIP": "10.0.0.1",
                "subnetName": "subnet1",
                "ipAssignments": [
                    {"name": "539970a2-c2dd-11ea-b3de-0242ac130004", "ip": "10.0.0.2"},
                    {"name": "539970a2-c2dd-11ea-b3de-0242ac130005", "ip": "10.0.0.3"},
                ],
                "defaultGateway": "10.0.0.1",
                "macAddress": "00-0D-3A-12-34-56",
                "subnetAddressSpace": "10.0.0.0/24",
                "version": 1,
                "nodeIP": "10.1.0.5",
                "subcriptionID": "00000000-0000-0000-0000-000000000000",
                "resourceGroupID": "MC_rg_cluster_eastus",
                "vnetID": "vnet1",
                "subnetID": "subnet1",
                "status": "NCUpdateSuccess",
            }
        ],
    },
}

# What CNS writes for a brand-new node: zero values of the non-omitempty fields are still there.
CNS_NEW_NODE_NETWORK_CONFIG: dict[str, Any] = {
    "apiVersion": "acn.azure.com/v1alpha",
    "kind": "NodeNetworkConfig",
    "metadata": {"name": "node-0", "namespace": "kube-system"},
    "spec": {"requestedIPCount": 0},
    "status": {"assignedIPCount": 0, "scaler": {}},
}


def test_round_trips_a_node_network_config_as_cns_writes_it() -> None:
    """A full CNS-written NNC reads into typed fields and writes back byte-for-byte the same JSON."""
    read = NodeNetworkConfig.from_object(copy.deepcopy(CNS_NODE_NETWORK_CONFIG))
    container = read.status.network_containers[0]
    assert read.spec.requested_ip_count == 16
    assert read.spec.ips_not_in_use == ["539970a2-c2dd-11ea-b3de-0242ac130005"]
    assert read.status.scaler == Scaler(
        batch_size=16, release_threshold_percent=150, request_threshold_percent=50, max_ip_count=250
    )
    assert container.subscription_id == "00000000-0000-0000-0000-000000000000"
    assert container.ip_assignments[1] == IPAssignment(
        name="539970a2-c2dd-11ea-b3de-0242ac130005", ip="10.0.0.3"
    )
    assert read.to_object() == CNS_NODE_NETWORK_CONFIG


def test_writes_zero_counts_that_cns_never_omits() -> None:
    """requestedIPCount 0, assignedIPCount 0, version 0 and an empty scaler are written, as Go's
    encoding/json writes fields without omitempty and struct values; empty optional fields are not."""
    read = NodeNetworkConfig.from_object(copy.deepcopy(CNS_NEW_NODE_NETWORK_CONFIG))
    assert read.to_object() == CNS_NEW_NODE_NETWORK_CONFIG
    assert NetworkContainer().to_dict() == {"version": 0}
    fresh = NodeNetworkConfig(metadata={"name": "n"})
    assert fresh.to_object()["spec"] == {"requestedIPCount": 0}
    assert fresh.to_object()["status"] == {"assignedIPCount": 0, "scaler": {}}


def test_keeps_the_upstream_misspelling_of_subscription_id() -> None:
    """The subscription field is ``subcriptionID`` on the wire, as CNS spells it."""
    container = NetworkContainer(subscription_id="sub")
    assert container.to_dict() == {"subcriptionID": "sub", "version": 0}


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param(
            ("status", "status"), "Done", "status.status: must be one of", id="bad-reconcile-status"
        ),
        pytest.param(
            ("status", "networkContainers", 0, "assignmentMode"),
            "block",
            "status.networkContainers[0].assignmentMode: must be one of",
            id="bad-assignment-mode",
        ),
        pytest.param(
            ("status", "networkContainers", 0, "status"),
            "SubnetFull",
            "status.networkContainers[0].status: must be one of",
            id="bad-container-status",
        ),
        pytest.param(
            ("spec", "requestedIPCount"),
            "16",
            "spec.requestedIPCount: expected an integer",
            id="count-as-string",
        ),
        pytest.param(
            ("spec", "ipsNotInUse"), "a", "spec.ipsNotInUse: expected an array", id="names-not-a-list"
        ),
    ],
)
def test_rejects_values_outside_the_upstream_types(path: tuple[Any, ...], value: Any, message: str) -> None:
    """Values the CNS Go types or their CRD enums refuse raise a ValidationError naming the field."""
    body = copy.deepcopy(CNS_NODE_NETWORK_CONFIG)
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        NodeNetworkConfig.from_object(body)


def test_accepts_network_container_types_the_crd_does_not_enumerate() -> None:
    """``type`` has no enum upstream (only a default), so a type added by a later CNS still reads."""
    body = copy.deepcopy(CNS_NODE_NETWORK_CONFIG)
    body["status"]["networkContainers"][0]["type"] = "someFutureType"
    assert NodeNetworkConfig.from_object(body).status.network_containers[0].type == "someFutureType"


def test_node_network_config_crd_matches_upstream_facts() -> None:
    """Scope, names, status subresource, printer columns, enums, formats and defaults are upstream's."""
    crd = NodeNetworkConfig.custom_resource_definition()
    spec = crd["spec"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    container = schema["status"]["properties"]["networkContainers"]["items"]["properties"]
    assert crd["metadata"]["name"] == "nodenetworkconfigs.acn.azure.com"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["nnc"]
    assert spec["names"]["singular"] == "nodenetworkconfig"
    assert version["name"] == "v1alpha"
    assert version["subresources"] == {"status": {}}
    assert [
        (c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
        for c in version["additionalPrinterColumns"]
    ] == [
        ("Requested IPs", "integer", ".spec.requestedIPCount", 1),
        ("Availability Zone", "string", ".spec.availabilityZone", 1),
        ("Allocated IPs", "integer", ".status.assignedIPCount", 0),
        ("Subnet", "string", ".status.networkContainers[*].subnetName", 1),
        ("Subnet CIDR", "string", ".status.networkContainers[*].subnetAddressSpace", 1),
        ("NC ID", "string", ".status.networkContainers[*].id", 1),
        ("NC Mode", "string", ".status.networkContainers[*].assignmentMode", 0),
        ("NC Type", "string", ".status.networkContainers[*].type", 1),
        ("NC Version", "integer", ".status.networkContainers[*].version", 0),
    ]
    requested = dict(schema["spec"]["properties"]["requestedIPCount"])
    assert requested.pop("description")
    # Upstream's type, format and default, plus our bounds: a NIC's 256 IP configurations less the primary.
    assert requested == {"type": "integer", "format": "int64", "default": 0, "minimum": 0, "maximum": 255}
    assert schema["spec"]["properties"]["availabilityZone"]["type"] == "integer"
    assert schema["status"]["properties"]["assignedIPCount"] == {"type": "integer", "default": 0}
    assert schema["status"]["properties"]["status"]["enum"] == ["Updating", "Updated", "Error"]
    scaler = schema["status"]["properties"]["scaler"]["properties"]
    assert {name: value["format"] for name, value in scaler.items()} == {
        "batchSize": "int64",
        "releaseThresholdPercent": "int64",
        "requestThresholdPercent": "int64",
        "maxIPCount": "int64",
    }
    assert container["assignmentMode"]["enum"] == ["dynamic", "static"]
    assert container["assignmentMode"]["default"] == "dynamic"
    assert container["type"]["default"] == "vnet"
    assert "enum" not in container["type"]
    assert container["version"] == {"type": "integer", "format": "int64", "default": 0}
    assert container["status"]["enum"] == [
        "NCUpdateSubnetFullError",
        "NCUpdateInternalServerError",
        "NCUpdateUnauthorizedError",
        "NCUpdateSuccess",
        "NCUpdateFailed",
    ]
    assert set(container) == {
        "id", "assignmentMode", "type", "primaryIP", "primaryIPV6", "subnetName", "ipAssignments",
        "defaultGateway", "defaultGatewayV6", "macAddress", "subnetAddressSpace", "subnetAddressSpaceV6",
        "version", "nodeIP", "subcriptionID", "resourceGroupID", "vnetID", "subnetID", "status",
    }  # fmt: skip


def test_cluster_subnet_state_round_trips_and_matches_upstream_crd() -> None:
    """A ClusterSubnetState as the control plane writes it round-trips; exhausted false is written;
    the CRD has upstream's printer columns and requires both status fields."""
    wire = {
        "apiVersion": "acn.azure.com/v1alpha1",
        "kind": "ClusterSubnetState",
        "metadata": {"name": "subnet1", "namespace": "kube-system"},
        "status": {"exhausted": False, "timestamp": "2026-11-29T16:00:00Z"},
    }
    read = ClusterSubnetState.from_object(wire)
    assert read.status == ClusterSubnetStateStatus(exhausted=False, timestamp="2026-11-29T16:00:00Z")
    assert read.to_object() == wire
    crd = ClusterSubnetState.custom_resource_definition()
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Namespaced"
    assert "shortNames" not in crd["spec"]["names"]
    assert version["subresources"] == {"status": {}}
    assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
        ("Exhausted", ".status.exhausted"),
        ("Updated", ".status.timestamp"),
    ]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["required"] == ["exhausted", "timestamp"]
    assert "spec" not in version["schema"]["openAPIV3Schema"]["properties"]


def test_both_kinds_are_registered_for_make_manifests() -> None:
    """``make manifests`` writes CRDs for every registered kind; both acn kinds are among them."""
    assert NodeNetworkConfig in RESOURCES
    assert ClusterSubnetState in RESOURCES


def _establish(kube_api: pykube.HTTPClient, crd: dict[str, Any]) -> None:
    crd_kind = pykube.object_factory(kube_api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    crd_object = crd_kind(kube_api, crd)
    if not crd_object.exists():
        crd_object.create()
    deadline = time.monotonic() + 30
    conditions: dict[str, str] = {}
    while time.monotonic() < deadline:
        crd_object.reload()
        status = crd_object.obj.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if conditions.get("Established") == "True":
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {crd['metadata']['name']} not established: {conditions}")


def test_api_server_keeps_every_field_cns_writes(kube_api: pykube.HTTPClient, namespace: str) -> None:
    """Through the generated CRD a real API server stores spec and status (via the status
    subresource) without pruning a single CNS field, and refuses an out-of-enum status."""
    _establish(kube_api, NodeNetworkConfig.custom_resource_definition())
    base = f"{kube_api.url}/apis/acn.azure.com/v1alpha/namespaces/{namespace}/nodenetworkconfigs"
    body = copy.deepcopy(CNS_NODE_NETWORK_CONFIG)
    body["metadata"] = {"name": "node-0", "namespace": namespace}
    created = kube_api.session.post(url=base, json=body)
    created.raise_for_status()
    with_status = {**created.json(), "status": copy.deepcopy(CNS_NODE_NETWORK_CONFIG["status"])}
    updated = kube_api.session.put(url=f"{base}/node-0/status", json=with_status)
    updated.raise_for_status()
    stored = updated.json()
    assert stored["spec"] == CNS_NODE_NETWORK_CONFIG["spec"]
    assert stored["status"] == CNS_NODE_NETWORK_CONFIG["status"]
    read = NodeNetworkConfig.from_object(stored)
    assert read.to_object()["status"] == CNS_NODE_NETWORK_CONFIG["status"]

    bad = {**stored, "status": {**stored["status"], "status": "Done"}}
    refused = kube_api.session.put(url=f"{base}/node-0/status", json=bad)
    assert refused.status_code == 422


def test_api_server_fills_upstream_defaults(kube_api: pykube.HTTPClient, namespace: str) -> None:
    """An NNC created with an empty spec and a container without mode gets upstream's defaults from
    the CRD: requestedIPCount 0, assignmentMode dynamic, type vnet, version 0."""
    _establish(kube_api, NodeNetworkConfig.custom_resource_definition())
    base = f"{kube_api.url}/apis/acn.azure.com/v1alpha/namespaces/{namespace}/nodenetworkconfigs"
    created = kube_api.session.post(
        url=base,
        json={
            "apiVersion": "acn.azure.com/v1alpha",
            "kind": "NodeNetworkConfig",
            "metadata": {"name": "n"},
            "spec": {},
        },
    )
    created.raise_for_status()
    assert created.json()["spec"] == {"requestedIPCount": 0}
    status_body = {**created.json(), "status": {"networkContainers": [{"id": "nc"}]}}
    updated = kube_api.session.put(url=f"{base}/n/status", json=status_body)
    updated.raise_for_status()
    read = NodeNetworkConfig.from_object(updated.json())
    assert read.status == NodeNetworkConfigStatus(
        network_containers=[NetworkContainer(id="nc", assignment_mode="dynamic", type="vnet", version=0)]
    )
    assert read.spec == NodeNetworkConfigSpec()


def test_api_server_accepts_cluster_subnet_state(kube_api: pykube.HTTPClient, namespace: str) -> None:
    """The generated ClusterSubnetState CRD serves the status subresource and refuses a status
    without the required timestamp."""
    _establish(kube_api, ClusterSubnetState.custom_resource_definition())
    base = f"{kube_api.url}/apis/acn.azure.com/v1alpha1/namespaces/{namespace}/clustersubnetstates"
    created = kube_api.session.post(
        url=base,
        json={
            "apiVersion": "acn.azure.com/v1alpha1",
            "kind": "ClusterSubnetState",
            "metadata": {"name": "s"},
        },
    )
    created.raise_for_status()
    state = ClusterSubnetState.from_object(created.json())
    state.status = ClusterSubnetStateStatus(exhausted=True, timestamp="2026-11-29T16:00:00Z")
    updated = kube_api.session.put(url=f"{base}/s/status", json=state.to_object())
    updated.raise_for_status()
    assert updated.json()["status"] == {"exhausted": True, "timestamp": "2026-11-29T16:00:00Z"}
    missing = {**updated.json(), "status": {"exhausted": False}}
    assert kube_api.session.put(url=f"{base}/s/status", json=missing).status_code == 422


def test_status_conditions_are_our_optional_addition() -> None:
    """status.conditions (metav1.Condition shape) round-trip; absent, nothing is written for them."""
    body = copy.deepcopy(CNS_NODE_NETWORK_CONFIG)
    body["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "MissingProviderID",
            "message": "node has no providerID",
            "lastTransitionTime": "2026-11-29T16:00:00Z",
        }
    ]
    read = NodeNetworkConfig.from_object(body)
    assert read.status.conditions[0].reason == "MissingProviderID"
    assert read.to_object() == body
    assert (
        "conditions"
        not in NodeNetworkConfig.from_object(copy.deepcopy(CNS_NODE_NETWORK_CONFIG)).to_object()["status"]
    )
