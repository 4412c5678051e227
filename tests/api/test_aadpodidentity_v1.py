"""aadpodidentity.k8s.io/v1 models: aad-pod-identity's published manifests and the objects its MIC
wrote round-trip unchanged, what NMI reads is where NMI reads it, and the generated CRDs carry
upstream's facts (names, scope, embedded resources) and are accepted by a real API server."""

from __future__ import annotations

import copy
import time
from typing import Any

import pykube
import pytest

from nodewright.api import RESOURCES
from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    ASSIGNED_STATUS_ASSIGNED,
    AzureAssignedIdentity,
    AzureAssignedIdentitySpec,
    AzureAssignedIdentityStatus,
    AzureIdentity,
    AzureIdentityBinding,
    AzurePodIdentityException,
    EmbeddedAzureIdentity,
    EmbeddedAzureIdentityBinding,
    IdentityType,
    SecretReference,
)
from nodewright.api.aadpodidentity.v1 import (
    RESOURCES as GROUP_RESOURCES,
)
from nodewright.api.base import Resource, ValidationError

RESOURCE_ID = (
    "/subscriptions/2d31b5ab-0ddc-4991-bf8d-61b6ad196f5a/resourcegroups/MC_demo_demo_westus2"
    "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/demo"
)
CLIENT_ID = "91ff0ee7-35fc-46d0-9cd0-51a7ea9ec7f2"

# aad-pod-identity's standard walkthrough (website/content/en/docs/Demo/standard_walkthrough.md),
# steps 3 and 5, with the shell variables filled in.
DOCS_AZURE_IDENTITY: dict[str, Any] = {
    "apiVersion": "aadpodidentity.k8s.io/v1",
    "kind": "AzureIdentity",
    "metadata": {"name": "demo"},
    "spec": {"type": 0, "resourceID": RESOURCE_ID, "clientID": CLIENT_ID},
}
DOCS_AZURE_IDENTITY_BINDING: dict[str, Any] = {
    "apiVersion": "aadpodidentity.k8s.io/v1",
    "kind": "AzureIdentityBinding",
    "metadata": {"name": "demo-binding"},
    "spec": {"azureIdentity": "demo", "selector": "demo"},
}
# docs/Configure/match_pods_in_namespace.md: the per-identity namespaced annotation.
DOCS_NAMESPACED_AZURE_IDENTITY: dict[str, Any] = {
    "apiVersion": "aadpodidentity.k8s.io/v1",
    "kind": "AzureIdentity",
    "metadata": {"name": "a-idname", "annotations": {"aadpodidentity.k8s.io/Behavior": "namespaced"}},
    "spec": {"type": 0, "resourceID": RESOURCE_ID, "clientID": CLIENT_ID},
}
# docs/Concepts/azureidentity.md: service principal, single- and multi-tenant.
DOCS_SERVICE_PRINCIPAL: dict[str, Any] = {
    "apiVersion": "aadpodidentity.k8s.io/v1",
    "kind": "AzureIdentity",
    "metadata": {"name": "sp"},
    "spec": {
        "type": 1,
        "tenantID": "72f988bf-86f1-41af-91ab-2d7cd011db47",
        "clientID": CLIENT_ID,
        "clientPassword": {"name": "sp-secret", "namespace": "default"},
    },
}
DOCS_MULTI_TENANT_SERVICE_PRINCIPAL: dict[str, Any] = {
    "apiVersion": "aadpodidentity.k8s.io/v1",
    "kind": "AzureIdentity",
    "metadata": {"name": "sp-multi"},
    "spec": {
        "type": 1,
        "tenantID": "72f988bf-86f1-41af-91ab-2d7cd011db47",
        "auxiliaryTenantIDs": ["aux-tenant-1", "aux-tenant-2"],
        "clientID": CLIENT_ID,
        "clientPassword": {"name": "sp-secret", "namespace": "default"},
    },
}
# charts/aad-pod-identity/templates/mic-exception.yaml
CHART_MIC_EXCEPTION: dict[str, Any] = {
    "apiVersion": "aadpodidentity.k8s.io/v1",
    "kind": "AzurePodIdentityException",
    "metadata": {"name": "mic"},
    "spec": {"podLabels": {"app": "mic", "component": "mic", "app.kubernetes.io/component": "mic"}},
}

GO_EMPTY_OBJECT_META = {"creationTimestamp": None}
NODE = "aks-nodepool1-12345678-vmss000000"

# An AzureAssignedIdentity as MIC v1.8 wrote it (pkg/mic makeAssignedIDs + pkg/crd): name
# <pod>-<podNamespace>-<identity>, label nodename, MIC's finalizer, whole identity and binding
# embedded (metadata, spec and status), Go's empty ObjectMeta in every spec and status,
# clientPassword {} and no type (type 0 is omitempty).
MIC_ASSIGNED_IDENTITY: dict[str, Any] = {
    "apiVersion": "aadpodidentity.k8s.io/v1",
    "kind": "AzureAssignedIdentity",
    "metadata": {
        "name": "demo-default-demo",
        "namespace": "default",
        "labels": {"nodename": NODE},
        "finalizers": [ASSIGNED_IDENTITY_FINALIZER],
    },
    "spec": {
        "azureIdentityRef": {
            "apiVersion": "aadpodidentity.k8s.io/v1",
            "kind": "AzureIdentity",
            "metadata": {
                "name": "demo",
                "namespace": "default",
                "uid": "3cc71400-bdac-11e9-bd0f-52df1c26db20",
                "resourceVersion": "1603",
                "generation": 1,
                "creationTimestamp": "2021-09-13T09:25:06Z",
            },
            "spec": {
                "metadata": GO_EMPTY_OBJECT_META,
                "resourceID": RESOURCE_ID,
                "clientID": CLIENT_ID,
                "clientPassword": {},
            },
            "status": {"metadata": GO_EMPTY_OBJECT_META},
        },
        "azureBindingRef": {
            "apiVersion": "aadpodidentity.k8s.io/v1",
            "kind": "AzureIdentityBinding",
            "metadata": {
                "name": "demo-binding",
                "namespace": "default",
                "uid": "4dd82511-bdac-11e9-bd0f-52df1c26db20",
                "resourceVersion": "1610",
                "generation": 1,
                "creationTimestamp": "2021-09-13T09:25:07Z",
            },
            "spec": {"metadata": GO_EMPTY_OBJECT_META, "azureIdentity": "demo", "selector": "demo"},
            "status": {"metadata": GO_EMPTY_OBJECT_META},
        },
        "metadata": GO_EMPTY_OBJECT_META,
        "pod": "demo",
        "podNamespace": "default",
        "nodename": NODE,
    },
    "status": {"metadata": GO_EMPTY_OBJECT_META, "status": "Assigned", "availableReplicas": 1},
}


@pytest.mark.parametrize(
    ("kind", "manifest"),
    [
        pytest.param(AzureIdentity, DOCS_AZURE_IDENTITY, id="walkthrough-identity"),
        pytest.param(AzureIdentityBinding, DOCS_AZURE_IDENTITY_BINDING, id="walkthrough-binding"),
        pytest.param(AzureIdentity, DOCS_NAMESPACED_AZURE_IDENTITY, id="namespaced-identity"),
        pytest.param(AzureIdentity, DOCS_SERVICE_PRINCIPAL, id="service-principal"),
        pytest.param(AzureIdentity, DOCS_MULTI_TENANT_SERVICE_PRINCIPAL, id="multi-tenant-service-principal"),
        pytest.param(AzurePodIdentityException, CHART_MIC_EXCEPTION, id="chart-mic-exception"),
        pytest.param(AzureAssignedIdentity, MIC_ASSIGNED_IDENTITY, id="mic-written-assigned-identity"),
    ],
)
def test_published_manifests_and_mic_objects_round_trip_unchanged(
    kind: type[Resource], manifest: dict[str, Any]
) -> None:
    """Reading then writing gives back the same JSON: explicit type 0, Go's empty structs and a
    foreign embedded kind survive, nothing is added."""
    assert kind.from_object(copy.deepcopy(manifest)).to_object() == manifest


def test_embedded_kind_is_read_as_written() -> None:
    """MIC before v1.6 embedded the Go type name (v1.AzureIdentity, aad-pod-identity #556's dump);
    the model keeps whatever kind it reads instead of refusing the object."""
    old = copy.deepcopy(MIC_ASSIGNED_IDENTITY)
    old["spec"]["azureIdentityRef"]["kind"] = "v1.AzureIdentity"
    assigned = AzureAssignedIdentity.from_object(old)
    assert assigned.spec.azure_identity_ref is not None
    assert assigned.spec.azure_identity_ref.kind == "v1.AzureIdentity"
    assert assigned.to_object() == old


def test_walkthrough_identity_reads_as_a_user_assigned_identity() -> None:
    """The docs' fields land in the typed spec under upstream's JSON names."""
    identity = AzureIdentity.from_object(DOCS_AZURE_IDENTITY)
    assert identity.spec.identity_type is IdentityType.USER_ASSIGNED_MSI
    assert identity.spec.resource_id == RESOURCE_ID
    assert identity.spec.client_id == CLIENT_ID
    assert not identity.is_namespaced
    assert AzureIdentity.from_object(DOCS_NAMESPACED_AZURE_IDENTITY).is_namespaced


def test_absent_type_means_user_assigned_and_stays_absent() -> None:
    """MIC leaves type 0 out (omitempty): it reads as type 0 and is not invented on write."""
    spec = AzureAssignedIdentity.from_object(MIC_ASSIGNED_IDENTITY).spec
    assert spec.azure_identity_ref is not None
    assert spec.azure_identity_ref.spec.type is None
    assert spec.azure_identity_ref.spec.identity_type is IdentityType.USER_ASSIGNED_MSI
    assert "type" not in spec.azure_identity_ref.spec.to_dict()


def test_service_principal_reads_its_secret_reference() -> None:
    identity = AzureIdentity.from_object(DOCS_MULTI_TENANT_SERVICE_PRINCIPAL)
    assert identity.spec.identity_type is IdentityType.SERVICE_PRINCIPAL
    assert identity.spec.client_password == SecretReference(name="sp-secret", namespace="default")
    assert identity.spec.auxiliary_tenant_ids == ["aux-tenant-1", "aux-tenant-2"]


def test_mic_assigned_identity_exposes_what_nmi_reads() -> None:
    """NMI matches on spec.pod/podNamespace, reads the embedded identity spec and needs Assigned."""
    assigned = AzureAssignedIdentity.from_object(MIC_ASSIGNED_IDENTITY)
    assert (assigned.spec.pod, assigned.spec.pod_namespace, assigned.spec.node_name) == (
        "demo",
        "default",
        NODE,
    )
    assert assigned.spec.azure_identity_ref is not None
    assert assigned.spec.azure_identity_ref.name == "demo"
    assert assigned.spec.azure_identity_ref.spec.client_id == CLIENT_ID
    assert assigned.spec.azure_binding_ref is not None
    assert assigned.spec.azure_binding_ref.spec.selector == "demo"
    assert assigned.status.status == ASSIGNED_STATUS_ASSIGNED
    assert assigned.status.available_replicas == 1
    assert assigned.status.added_by_nodewright is False


def test_identity_type_outside_zero_to_two_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"spec\.type: must be one of 0, 1, 2"):
        AzureIdentity.from_object({**DOCS_AZURE_IDENTITY, "spec": {"type": 3}})


def test_embedded_copy_takes_spec_and_naming_metadata_only() -> None:
    """Our copy of an identity carries what NMI reads and nothing that churns (status, resourceVersion)."""
    identity = AzureIdentity.from_object(
        {
            **DOCS_AZURE_IDENTITY,
            "metadata": {"name": "demo", "namespace": "default", "uid": "u1", "resourceVersion": "42"},
            "status": {"clientID": CLIENT_ID, "nextRecheckTime": "2026-01-01T00:00:00Z"},
        }
    )
    embedded = EmbeddedAzureIdentity.of(identity).to_dict()
    assert embedded == {
        "apiVersion": "aadpodidentity.k8s.io/v1",
        "kind": "AzureIdentity",
        "metadata": {"name": "demo", "namespace": "default", "uid": "u1"},
        "spec": {"type": 0, "resourceID": RESOURCE_ID, "clientID": CLIENT_ID},
    }
    embedded_identity = EmbeddedAzureIdentity.of(identity)
    embedded_identity.spec.client_id = "changed"
    assert identity.spec.client_id == CLIENT_ID, "the copy must not alias the source spec"


def test_nodewright_assigned_identity_writes_no_go_noise() -> None:
    """An object we build has upstream's names and no empty Go structs."""
    identity = AzureIdentity.from_object(
        {**DOCS_AZURE_IDENTITY, "metadata": {"name": "demo", "namespace": "ns"}}
    )
    binding = AzureIdentityBinding.from_object(
        {**DOCS_AZURE_IDENTITY_BINDING, "metadata": {"name": "demo-binding", "namespace": "ns"}}
    )
    assigned = AzureAssignedIdentity(
        metadata={"name": "demo-ns-demo", "namespace": "default", "labels": {"nodename": NODE}},
        spec=AzureAssignedIdentitySpec(
            azure_identity_ref=EmbeddedAzureIdentity.of(identity),
            azure_binding_ref=EmbeddedAzureIdentityBinding.of(binding),
            pod="demo",
            pod_namespace="ns",
            node_name=NODE,
        ),
        status=AzureAssignedIdentityStatus(status=ASSIGNED_STATUS_ASSIGNED, available_replicas=1),
    )
    wire = assigned.to_object()
    assert set(wire["spec"]) == {"azureIdentityRef", "azureBindingRef", "pod", "podNamespace", "nodename"}
    assert wire["status"] == {"status": "Assigned", "availableReplicas": 1}
    assert wire["spec"]["azureBindingRef"]["spec"] == {"azureIdentity": "demo", "selector": "demo"}


def test_group_is_registered_for_manifests() -> None:
    assert set(GROUP_RESOURCES) == {
        AzureIdentity,
        AzureIdentityBinding,
        AzureAssignedIdentity,
        AzurePodIdentityException,
    }
    assert set(GROUP_RESOURCES) <= set(RESOURCES)


@pytest.mark.parametrize(
    ("kind", "plural", "singular"),
    [
        pytest.param(AzureIdentity, "azureidentities", "azureidentity", id="identity"),
        pytest.param(AzureIdentityBinding, "azureidentitybindings", "azureidentitybinding", id="binding"),
        pytest.param(
            AzureAssignedIdentity, "azureassignedidentities", "azureassignedidentity", id="assigned-identity"
        ),
        pytest.param(
            AzurePodIdentityException,
            "azurepodidentityexceptions",
            "azurepodidentityexception",
            id="exception",
        ),
    ],
)
def test_crd_names_and_scope_match_upstream(kind: type[Resource], plural: str, singular: str) -> None:
    """Same group, names and scope as upstream's CRDs, and no short names (upstream has none)."""
    crd = kind.custom_resource_definition()
    assert crd["metadata"]["name"] == f"{plural}.aadpodidentity.k8s.io"
    assert crd["spec"]["group"] == "aadpodidentity.k8s.io"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"] == {
        "kind": kind.KIND,
        "listKind": f"{kind.KIND}List",
        "plural": plural,
        "singular": singular,
    }
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1"
    assert version["subresources"] == {"status": {}}


def test_crd_schemas_mark_embedded_objects_and_constrain_the_type() -> None:
    assigned_spec = AzureAssignedIdentity.openapi_schema()["properties"]["spec"]["properties"]
    for key in ("azureIdentityRef", "azureBindingRef"):
        assert assigned_spec[key]["x-kubernetes-embedded-resource"] is True
        assert assigned_spec[key]["properties"]["metadata"] == {"type": "object"}
    assert set(assigned_spec) >= {"pod", "podNamespace", "nodename", "replicas"}
    identity_spec = AzureIdentity.openapi_schema()["properties"]["spec"]["properties"]
    assert identity_spec["type"]["type"] == "integer"
    assert identity_spec["type"]["enum"] == [0, 1, 2]
    assert identity_spec["auxiliaryTenantIDs"]["nullable"] is True


def test_printer_columns_keep_upstreams_and_add_ours() -> None:
    def columns(kind: type[Resource]) -> dict[str, str]:
        (version,) = kind.custom_resource_definition()["spec"]["versions"]
        return {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}

    assert {
        "Type": ".spec.type",
        "ClientID": ".spec.clientID",
        "Age": ".metadata.creationTimestamp",
    }.items() <= (columns(AzureIdentity).items())
    assert "ClientID Current" in columns(AzureIdentity)
    assert {"AzureIdentity": ".spec.azureIdentity", "Selector": ".spec.selector"}.items() <= (
        columns(AzureIdentityBinding).items()
    )
    assert {"Node": ".spec.nodename", "Status": ".status.status"}.items() <= columns(
        AzureAssignedIdentity
    ).items()


# --- against a real API server ------------------------------------------------------------------


def install_crds(kube_api: pykube.HTTPClient) -> None:
    """Create or replace this group's CRDs and wait until each is Established and structural."""
    crd_kind = pykube.object_factory(kube_api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    for resource in GROUP_RESOURCES:
        body = resource.custom_resource_definition()
        existing = crd_kind.objects(kube_api).get_or_none(name=body["metadata"]["name"])
        if existing is None:
            crd_kind(kube_api, body).create()
        else:
            existing.obj["spec"] = body["spec"]
            existing.update()
    for resource in GROUP_RESOURCES:
        name = resource.custom_resource_definition()["metadata"]["name"]
        deadline = time.monotonic() + 30
        conditions: dict[str, str] = {}
        while time.monotonic() < deadline:
            crd = crd_kind.objects(kube_api).get(name=name)
            conditions = {
                c["type"]: c["status"] for c in (crd.obj.get("status") or {}).get("conditions") or []
            }
            if conditions.get("Established") == "True":
                break
            time.sleep(0.2)
        assert conditions.get("Established") == "True", (name, conditions)
        assert conditions.get("NonStructuralSchema") is None, (name, conditions)


def _in_namespace(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    body = copy.deepcopy(manifest)
    body["metadata"]["namespace"] = namespace
    return body


def test_api_server_stores_published_manifests_unchanged(kube_api: pykube.HTTPClient, namespace: str) -> None:
    """The generated CRDs are structural, and the docs' manifests apply with nothing pruned."""
    install_crds(kube_api)
    created_objects = []
    try:
        for manifest in (
            DOCS_AZURE_IDENTITY,
            DOCS_NAMESPACED_AZURE_IDENTITY,
            DOCS_SERVICE_PRINCIPAL,
            DOCS_MULTI_TENANT_SERVICE_PRINCIPAL,
            DOCS_AZURE_IDENTITY_BINDING,
            CHART_MIC_EXCEPTION,
        ):
            created = pykube.object_factory(kube_api, manifest["apiVersion"], manifest["kind"])(
                kube_api, _in_namespace(manifest, namespace)
            )
            created.create()
            created_objects.append(created)
            created.reload()
            assert created.obj["spec"] == manifest["spec"], manifest["metadata"]["name"]
    finally:
        for created in created_objects:  # bindings match pods of every namespace: leave none behind
            created.delete()


def test_api_server_serves_mic_assigned_identity_to_a_node_scoped_reader(
    kube_api: pykube.HTTPClient, namespace: str
) -> None:
    """A MIC-written AzureAssignedIdentity is accepted; its status lands through /status; NMI's
    list by nodename label finds it Assigned with the identity's clientID."""
    install_crds(kube_api)
    kind = pykube.object_factory(kube_api, "aadpodidentity.k8s.io/v1", "AzureAssignedIdentity")
    body = _in_namespace(MIC_ASSIGNED_IDENTITY, namespace)
    body["metadata"]["finalizers"] = []
    created = kind(kube_api, body)
    created.create()
    created.reload()
    stored = AzureAssignedIdentity.from_object(created.obj)
    assert stored.spec.azure_identity_ref is not None
    assert stored.spec.azure_identity_ref.spec.resource_id == RESOURCE_ID
    assert stored.spec.azure_binding_ref is not None
    assert stored.spec.azure_binding_ref.spec.selector == "demo"
    assert stored.status.status == "", "status is a subresource: create does not set it"

    stored.status = AzureAssignedIdentityStatus(status=ASSIGNED_STATUS_ASSIGNED, available_replicas=1)
    response = kube_api.session.put(
        url=f"{kube_api.url}/apis/aadpodidentity.k8s.io/v1/namespaces/{namespace}"
        f"/azureassignedidentities/{stored.name}/status",
        json=stored.to_object(),
    )
    response.raise_for_status()

    (listed,) = kind.objects(kube_api).filter(namespace=namespace, selector={"nodename": NODE})
    read = AzureAssignedIdentity.from_object(listed.obj)
    assert read.status.status == ASSIGNED_STATUS_ASSIGNED
    assert read.spec.azure_identity_ref is not None
    assert read.spec.azure_identity_ref.spec.client_id == CLIENT_ID


def test_api_server_rejects_an_unknown_identity_type(kube_api: pykube.HTTPClient, namespace: str) -> None:
    install_crds(kube_api)
    bad = _in_namespace(
        {**DOCS_AZURE_IDENTITY, "spec": {**DOCS_AZURE_IDENTITY["spec"], "type": 3}}, namespace
    )
    with pytest.raises(pykube.exceptions.HTTPError) as rejected:
        pykube.object_factory(kube_api, bad["apiVersion"], bad["kind"])(kube_api, bad).create()
    assert rejected.value.code == 422
