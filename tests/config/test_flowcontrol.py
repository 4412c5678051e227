"""config/flowcontrol puts the manager's Lease requests, and only those, in the API server's
``leader-election`` priority level: on a real API server with API priority and fairness on, the
manager's ServiceAccount renews its Lease in that level while its other requests stay in the
level the server's defaults give every service account (``workload-low``). The API server names
the FlowSchema and priority level that admitted each request in the response headers
``X-Kubernetes-PF-FlowSchema-UID`` and ``X-Kubernetes-PF-PriorityLevel-UID``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import LEASE, Kind
from tests.config.test_rbac import SYSTEM_NAMESPACE, apply_rbac, rendered, service_account_kubeconfig
from tests.conftest import Cluster

FLOW_SCHEMA = Kind("flowcontrol.apiserver.k8s.io/v1", "FlowSchema", "flowschemas", namespaced=False)
PRIORITY_LEVEL = Kind(
    "flowcontrol.apiserver.k8s.io/v1",
    "PriorityLevelConfiguration",
    "prioritylevelconfigurations",
    namespaced=False,
)
LEASE_NAME = "flowcontrol-test-lease"


def shipped_flow_schema() -> dict[str, Any]:
    """The one FlowSchema config/default renders."""
    schemas = [document for document in rendered() if document["kind"] == "FlowSchema"]
    assert len(schemas) == 1, schemas
    return schemas[0]


def test_the_flow_schema_names_the_deployments_service_account_and_lease_namespace() -> None:
    """kustomize does not rewrite a FlowSchema's subjects: the written-out names must be the ones
    the rendered Deployment runs as and the manager config elects in."""
    documents = rendered()
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    schema = shipped_flow_schema()
    (rule,) = schema["spec"]["rules"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": account, "namespace": SYSTEM_NAMESPACE}}
    ]
    assert [r["namespaces"] for r in rule["resourceRules"]] == [[SYSTEM_NAMESPACE]]
    assert "namespace" not in schema["metadata"]  # cluster-scoped


def _header(headers: Mapping[str, str], name: str) -> str:
    return next(value for key, value in headers.items() if key.lower() == name.lower())


def _admitted_by(client: Client, method: str, path: str, body: Any = None) -> tuple[str, str]:
    """The (FlowSchema, priority level) UIDs the API server admitted one request under."""
    response = client.request(method, path, body=body)
    return (
        _header(response.headers, "X-Kubernetes-PF-FlowSchema-UID"),
        _header(response.headers, "X-Kubernetes-PF-PriorityLevel-UID"),
    )


@pytest.fixture
def manager_account(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Client, dict[str, Any]]]:
    """config/default's RBAC and FlowSchema installed; a client holding only the manager's token."""
    admin = Client.from_kubeconfig(cluster.kubeconfig)
    apply_rbac(admin)
    schema = shipped_flow_schema()
    admin.delete(FLOW_SCHEMA, schema["metadata"]["name"], ignore_not_found=True)  # a failed run's
    created = admin.create(FLOW_SCHEMA, schema)
    try:
        yield Client.from_kubeconfig(service_account_kubeconfig(admin, cluster, tmp_path)), created
    finally:
        admin.delete(FLOW_SCHEMA, schema["metadata"]["name"], ignore_not_found=True)
        admin.delete(LEASE, LEASE_NAME, SYSTEM_NAMESPACE, ignore_not_found=True)


def test_lease_requests_go_to_leader_election_and_nothing_else_does(
    cluster: Cluster, manager_account: tuple[Client, dict[str, Any]]
) -> None:
    """The manager's Lease get, create and update are admitted by our FlowSchema in the
    leader-election level; its other requests (Events, in its namespace and another) are not."""
    manager, schema = manager_account
    admin = Client.from_kubeconfig(cluster.kubeconfig)
    leader_election = admin.get(PRIORITY_LEVEL, "leader-election")["metadata"]["uid"]
    ours = (schema["metadata"]["uid"], leader_election)
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases"
    body = {"metadata": {"name": LEASE_NAME}, "spec": {"holderIdentity": "flowcontrol-test"}}
    assert _admitted_by(manager, "POST", leases, body) == ours
    assert _admitted_by(manager, "GET", f"{leases}/{LEASE_NAME}") == ours
    lease = manager.get(LEASE, LEASE_NAME, SYSTEM_NAMESPACE)
    lease["spec"]["leaseDurationSeconds"] = 15
    assert _admitted_by(manager, "PUT", f"{leases}/{LEASE_NAME}", lease) == ours

    workload_low = admin.get(PRIORITY_LEVEL, "workload-low")["metadata"]["uid"]
    for namespace in (SYSTEM_NAMESPACE, "default"):
        event = {
            "metadata": {"generateName": "flowcontrol-test-"},
            "involvedObject": {"kind": "Lease", "name": LEASE_NAME, "namespace": namespace},
            "reason": "Test",
            "message": "an event is not a lease",
            "type": "Normal",
        }
        flow_schema, level = _admitted_by(manager, "POST", f"/api/v1/namespaces/{namespace}/events", event)
        assert flow_schema != schema["metadata"]["uid"]
        assert level == workload_low
