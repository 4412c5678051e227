"""Builders shared by the table tests of the identity decisions (pure; no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_STATUS_ASSIGNED,
    AzureAssignedIdentity,
    AzureAssignedIdentityStatus,
    AzureIdentity,
    AzureIdentityBinding,
    IdentityType,
)
from nodewright.cloud.resource_ids import ScaleSetId
from nodewright.controllers.identity.decisions import (
    DesiredAssignment,
    NodeInfo,
    PodInfo,
    desired_assignments,
    match_pods,
)
from nodewright.controllers.identity.targets import (
    AssignmentRecord,
    IdentityNeed,
)

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NOW_TEXT = "2026-11-29T12:00:00Z"


def resource_id(name: str, group: str = "identities") -> str:
    return (
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}"
        f"/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{name}"
    )


def key(name: str, group: str = "identities") -> str:
    return resource_id(name, group).lower()


def identity(
    name: str,
    namespace: str = "default",
    *,
    identity_type: int = 0,
    resource: str | None = None,
    client_id: str | None = None,
    namespaced: bool = False,
    generation: int = 1,
    status: dict[str, Any] | None = None,
) -> AzureIdentity:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "generation": generation}
    if namespaced:
        metadata["annotations"] = {"aadpodidentity.k8s.io/Behavior": "namespaced"}
    spec: dict[str, Any] = {
        "type": identity_type,
        "clientID": client_id if client_id is not None else f"{name}-client",
    }
    if identity_type == 0:
        spec["resourceID"] = resource if resource is not None else resource_id(name)
    return AzureIdentity.from_object(
        {
            "apiVersion": "aadpodidentity.k8s.io/v1",
            "kind": "AzureIdentity",
            "metadata": metadata,
            "spec": spec,
            "status": status or {},
        }
    )


def binding(name: str, identity_name: str, selector: str, namespace: str = "default") -> AzureIdentityBinding:
    return AzureIdentityBinding.from_object(
        {
            "apiVersion": "aadpodidentity.k8s.io/v1",
            "kind": "AzureIdentityBinding",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"azureIdentity": identity_name, "selector": selector},
        }
    )


def pod(
    name: str, namespace: str = "default", *, node: str = "node-0", label: str = "app", phase: str = "Running"
) -> PodInfo:
    return PodInfo(namespace=namespace, name=name, node_name=node, phase=phase, binding_label=label)


def scale_set_node(name: str, scale_set: str = "pool", instance: str = "0", group: str = "MC_rg") -> NodeInfo:
    return NodeInfo(
        name,
        f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute/"
        f"virtualMachineScaleSets/{scale_set}/virtualMachines/{instance}",
    )


def vm_node(name: str, vm: str | None = None, group: str = "MC_rg") -> NodeInfo:
    return NodeInfo(
        name,
        f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute/"
        f"virtualMachines/{vm or name}",
    )


POOL = ScaleSetId(SUBSCRIPTION, "MC_rg", "pool")


def desired_for(
    pods: list[PodInfo], bindings: list[AzureIdentityBinding], identities: list[AzureIdentity], **options: Any
) -> list[DesiredAssignment]:
    return desired_assignments(match_pods(pods, bindings, identities, **options), **options)


def record(
    name: str,
    *,
    target: str = POOL.key,
    status: str = ASSIGNED_STATUS_ASSIGNED,
    added: bool = True,
    marked: bool = True,
    client_id: str | None = None,
    identity_type: IdentityType = IdentityType.USER_ASSIGNED_MSI,
) -> AssignmentRecord:
    return AssignmentRecord(
        target=target,
        resource_key=key(name) if identity_type is IdentityType.USER_ASSIGNED_MSI else "",
        client_id=client_id if client_id is not None else f"{name}-client",
        identity_type=identity_type,
        status=status,
        added_by_nodewright=added,
        marked=marked,
    )


def need(name: str, client_id: str | None = None) -> IdentityNeed:
    return IdentityNeed(key(name), client_id if client_id is not None else f"{name}-client")


def existing(
    desired: DesiredAssignment,
    *,
    node: str | None = None,
    status: str = ASSIGNED_STATUS_ASSIGNED,
    deleting: bool = False,
    client_id: str | None = None,
    name: str | None = None,
) -> AzureAssignedIdentity:
    resource = desired.to_resource()
    resource.metadata["name"] = name or desired.name
    if node is not None:
        resource.spec.node_name = node
        resource.metadata["labels"] = {"nodename": node}
    if deleting:
        resource.metadata["deletionTimestamp"] = NOW_TEXT
    if client_id is not None and resource.spec.azure_identity_ref is not None:
        resource.spec.azure_identity_ref.spec.client_id = client_id
    resource.status = AzureAssignedIdentityStatus(status=status, target=POOL.key, added_by_nodewright=True)
    return resource


def mic_written(desired: DesiredAssignment) -> AzureAssignedIdentity:
    """The same assignment as MIC wrote it: Go's empty structs, whole metadata, no type."""
    wire = desired.to_resource().to_object()
    reference = wire["spec"]["azureIdentityRef"]
    reference["metadata"].update(resourceVersion="1603", creationTimestamp=NOW_TEXT)
    reference["spec"].pop("type", None)
    reference["spec"].update(metadata={"creationTimestamp": None}, clientPassword={})
    reference["status"] = {"metadata": {"creationTimestamp": None}}
    wire["spec"]["metadata"] = {"creationTimestamp": None}
    wire["status"] = {"status": "Assigned", "availableReplicas": 1}
    return AzureAssignedIdentity.from_object(wire)


DEMO = desired_for([pod("demo", node="node-0")], [binding("b", "demo", "app")], [identity("demo")])[0]
