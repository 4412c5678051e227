"""nodewright.io/v1alpha1 models: wire round-trips, defaults, validation errors that name the
field, registration, generated CRDs in step with the models, and a real API server that accepts
them and enforces their rules."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

import pykube
import pytest

from nodewright import api
from nodewright.api import Resource, ValidationError
from nodewright.api.meta import ObjectReference
from nodewright.api.nodewright import v1alpha1
from nodewright.api.nodewright.v1alpha1 import (
    AutoscalingStrategy,
    CloudNodeState,
    NodeImage,
    NodeRole,
    PendingNode,
    PendingNodeGoal,
    ScalingGroup,
)

SCALE_SET = (
    "/subscriptions/0000/resourceGroups/nodes-rg/providers/Microsoft.Compute/virtualMachineScaleSets/workers"
)
PROVIDER_ID = "azure://" + SCALE_SET + "/virtualMachines/3"
RESOURCE_GROUP = "/subscriptions/0000/resourceGroups/nodes-rg"
STANDALONE_MACHINES = {
    "vmSize": "Standard_D4s_v5",
    "subnetID": RESOURCE_GROUP + "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes",
    "namePrefix": "pool-a-",
    "sshPublicKey": "ssh-ed25519 AAAA pool-a",
    "tags": {"pool": "a"},
}
NODE_REFERENCE = {"apiVersion": "v1", "kind": "Node", "name": "workers000003", "uid": "u-3"}
CONDITION = {
    "type": "UpToDate",
    "status": "False",
    "reason": "NodesOutdated",
    "message": "4 of 6 nodes run the desired image",
    "lastTransitionTime": "2026-11-29T16:00:00Z",
    "observedGeneration": 2,
}

NODE_IMAGE_WIRE: dict[str, Any] = {
    "apiVersion": "nodewright.io/v1alpha1",
    "kind": "NodeImage",
    "metadata": {"name": "cluster"},
    "spec": {
        "image": "/communityGalleries/gallery-1/images/node/versions/2.0.0",
        "maxSurge": 3,
        "maxUnavailable": "25%",
        "canary": 2,
        "soakDuration": "5m",
        "heirReadyTimeout": "15m",
        "evictedPodsReadyTimeout": "3m",
        "gateConditions": ["SmokeTestsPassed"],
        "drainTimeout": "45m",
        "undrainableNodeBehavior": "Fail",
        "maxBlockedNodes": 2,
    },
    "status": {
        "outdated": [NODE_REFERENCE],
        "upToDate": [{**NODE_REFERENCE, "name": "workers000004", "uid": "u-4"}],
        "donors": [{**NODE_REFERENCE, "name": "workers000001"}],
        "heirs": [{**NODE_REFERENCE, "name": "workers000005"}],
        "mints": [{**NODE_REFERENCE, "name": "workers000006"}],
        "pending": [{"apiVersion": "nodewright.io/v1alpha1", "kind": "PendingNode", "name": "workers000007"}],
        "obsolete": [{**NODE_REFERENCE, "name": "workers000008"}],
        "invalid": [{**NODE_REFERENCE, "name": "stray"}],
        "awaitingAnnotation": [{**NODE_REFERENCE, "name": "workers000009"}],
        "budget": 1,
        "totalNodes": 9,
        "upToDateNodes": 4,
        "observedGeneration": 2,
        "conditions": [CONDITION],
    },
}
SCALING_GROUP_WIRE: dict[str, Any] = {
    "apiVersion": "nodewright.io/v1alpha1",
    "kind": "ScalingGroup",
    "metadata": {"name": "workers"},
    "spec": {
        "groupID": SCALE_SET,
        "nodeImage": "cluster",
        "role": "ControlPlane",
        "min": 1,
        "max": 5,
        "autoscaling": True,
        "autoscalerGroupName": "workers",
    },
    "status": {
        "imageReference": "/communityGalleries/gallery-1/images/node/versions/2.0.0",
        "observedGeneration": 1,
        "conditions": [{**CONDITION, "type": "ImageApplied", "status": "True", "reason": "Applied"}],
    },
}
PENDING_NODE_WIRE: dict[str, Any] = {
    "apiVersion": "nodewright.io/v1alpha1",
    "kind": "PendingNode",
    "metadata": {"name": "workers000007"},
    "spec": {
        "providerID": PROVIDER_ID,
        "groupID": SCALE_SET,
        "nodeName": "workers000007",
        "goal": "Join",
        "deadline": "2026-11-29T16:30:00Z",
    },
    "status": {"cspState": "Creating", "reachedGoal": True},
}
AUTOSCALING_STRATEGY_WIRE: dict[str, Any] = {
    "apiVersion": "nodewright.io/v1alpha1",
    "kind": "AutoscalingStrategy",
    "metadata": {
        "name": "autoscaling",
        "annotations": {"nodewright.io/autoscaling-enabled-before-rollout": "true"},
    },
    "spec": {
        "enabled": False,
        "deploymentName": "cluster-autoscaler",
        "deploymentNamespace": "kube-system",
        "autoscalerExtraArgs": {"v": "2", "scale-down-delay-after-add": "5m"},
    },
    "status": {"enabled": True, "replicas": 1},
}

WIRES: list[tuple[type[Resource], dict[str, Any]]] = [
    (NodeImage, NODE_IMAGE_WIRE),
    (ScalingGroup, SCALING_GROUP_WIRE),
    (PendingNode, PENDING_NODE_WIRE),
    (AutoscalingStrategy, AUTOSCALING_STRATEGY_WIRE),
]


@pytest.mark.parametrize(("kind", "wire"), [pytest.param(k, w, id=k.KIND) for k, w in WIRES])
def test_round_trips_the_wire_format(kind: type[Resource], wire: dict[str, Any]) -> None:
    """Every kind reads a full object and writes back the same JSON (acronym spellings included)."""
    assert kind.from_object(copy.deepcopy(wire)).to_object() == wire


def test_reads_typed_values() -> None:
    """Enums, lists of references and the deadline come out as typed Python values."""
    node_image = NodeImage.from_object(NODE_IMAGE_WIRE)
    assert node_image.status.outdated == [
        ObjectReference(api_version="v1", kind="Node", name="workers000003", uid="u-3")
    ]
    assert node_image.status.conditions[0].observed_generation == 2
    assert ScalingGroup.from_object(SCALING_GROUP_WIRE).spec.role is NodeRole.CONTROL_PLANE
    pending = PendingNode.from_object(PENDING_NODE_WIRE)
    assert pending.spec.goal is PendingNodeGoal.JOIN
    assert pending.status.cloud_state is CloudNodeState.CREATING
    assert pending.spec.deadline_time is not None
    assert pending.spec.deadline_time.isoformat() == "2026-11-29T16:30:00+00:00"


def test_defaults_fill_what_the_wire_leaves_out() -> None:
    """maxSurge defaults to 1, role to Worker, cspState to Unknown, autoscaling off, no deadline."""
    node_image = NodeImage.from_object({**NODE_IMAGE_WIRE, "spec": {"image": "p:o:s:1"}, "status": {}})
    assert node_image.spec.max_surge == 1
    assert node_image.status.budget == 0
    group = ScalingGroup.from_object({**SCALING_GROUP_WIRE, "spec": {"groupID": SCALE_SET, "nodeImage": "c"}})
    assert (group.spec.role, group.spec.min, group.spec.max, group.spec.autoscaling) == (
        NodeRole.WORKER,
        0,
        0,
        False,
    )
    pending_spec = {k: v for k, v in PENDING_NODE_WIRE["spec"].items() if k != "deadline"}
    pending = PendingNode.from_object({**PENDING_NODE_WIRE, "spec": pending_spec, "status": {}})
    assert pending.status.cloud_state is CloudNodeState.UNKNOWN
    assert pending.spec.deadline_time is None


def test_budget_and_counts_are_written_even_when_zero() -> None:
    """A status with nothing to do still says budget 0 (as constellation's non-omitempty budget)."""
    status = NodeImage.from_object({**NODE_IMAGE_WIRE, "status": {}}).to_object()["status"]
    assert status == {"budget": 0, "totalNodes": 0, "upToDateNodes": 0}


def _with(wire: dict[str, Any], section: str, **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(wire)
    changed[section].update(changes)
    return changed


def _without(wire: dict[str, Any], section: str, key: str) -> dict[str, Any]:
    changed = copy.deepcopy(wire)
    del changed[section][key]
    return changed


@pytest.mark.parametrize(
    ("kind", "wire", "message"),
    [
        pytest.param(
            NodeImage,
            _without(NODE_IMAGE_WIRE, "spec", "image"),
            "spec.image: is required",
            id="image-missing",
        ),
        pytest.param(
            NodeImage,
            _with(NODE_IMAGE_WIRE, "spec", maxSurge="2"),
            "spec.maxSurge: expected an integer, got a string",
            id="max-surge-string",
        ),
        pytest.param(
            NodeImage,
            _with(NODE_IMAGE_WIRE, "status", heirs=[{"name": 5}]),
            "status.heirs[0].name: expected a string, got int",
            id="reference-name-type",
        ),
        pytest.param(
            NodeImage,
            _with(NODE_IMAGE_WIRE, "status", conditions=[{**CONDITION, "status": "Maybe"}]),
            "status.conditions[0].status: must be one of 'True', 'False', 'Unknown'",
            id="condition-status",
        ),
        pytest.param(
            ScalingGroup,
            _with(SCALING_GROUP_WIRE, "spec", groupID="/subscriptions/0000/resourceGroups/rg"),
            "spec.virtualMachines: is required when groupID names a resource group",
            id="resource-group-without-virtual-machines",
        ),
        pytest.param(
            ScalingGroup,
            _with(
                SCALING_GROUP_WIRE, "spec", groupID="/subscriptions/0000/resourceGroups/rg/providers/x/y/z"
            ),
            "spec.groupID: must be a virtual machine scale set ID or a resource group ID",
            id="group-id-neither-scale-set-nor-resource-group",
        ),
        pytest.param(
            ScalingGroup,
            _with(SCALING_GROUP_WIRE, "spec", virtualMachines=STANDALONE_MACHINES),
            "spec.virtualMachines: is only for a group of standalone VMs",
            id="virtual-machines-beside-a-scale-set",
        ),
        pytest.param(
            ScalingGroup,
            _with(
                SCALING_GROUP_WIRE,
                "spec",
                groupID=RESOURCE_GROUP,
                virtualMachines={**STANDALONE_MACHINES, "namePrefix": "Pool_A"},
            ),
            "spec.virtualMachines.namePrefix: must be lowercase letters",
            id="name-prefix-not-a-vm-name",
        ),
        pytest.param(
            ScalingGroup,
            _with(SCALING_GROUP_WIRE, "spec", role="Etcd"),
            "spec.role: must be one of 'Worker', 'ControlPlane'",
            id="role-unknown",
        ),
        pytest.param(
            ScalingGroup,
            _with(SCALING_GROUP_WIRE, "spec", min=4, max=2),
            "spec.max: must be at least min (4) when autoscaling",
            id="max-below-min",
        ),
        pytest.param(
            ScalingGroup,
            _without(SCALING_GROUP_WIRE, "spec", "nodeImage"),
            "spec.nodeImage: is required",
            id="node-image-missing",
        ),
        pytest.param(
            PendingNode,
            _with(PENDING_NODE_WIRE, "spec", goal="Stay"),
            "spec.goal: must be one of 'Join', 'Leave'",
            id="goal-unknown",
        ),
        pytest.param(
            PendingNode,
            _with(PENDING_NODE_WIRE, "spec", deadline="tomorrow"),
            "spec.deadline: must be an RFC 3339 date-time",
            id="deadline-not-a-time",
        ),
        pytest.param(
            PendingNode,
            _with(PENDING_NODE_WIRE, "spec", deadline="2026-11-29T16:30:00"),
            "spec.deadline: must carry a timezone",
            id="deadline-without-zone",
        ),
        pytest.param(
            PendingNode,
            _with(PENDING_NODE_WIRE, "status", cspState="Running"),
            "status.cspState: must be one of 'Unknown', 'Creating'",
            id="cloud-state-unknown",
        ),
        pytest.param(
            AutoscalingStrategy,
            _with(AUTOSCALING_STRATEGY_WIRE, "spec", autoscalerExtraArgs={"v": 2}),
            "spec.autoscalerExtraArgs.v: expected a string, got int",
            id="extra-arg-not-a-string",
        ),
        pytest.param(
            AutoscalingStrategy,
            _without(AUTOSCALING_STRATEGY_WIRE, "spec", "enabled"),
            "spec.enabled: is required",
            id="enabled-missing",
        ),
    ],
)
def test_validation_errors_name_the_field(kind: type[Resource], wire: dict[str, Any], message: str) -> None:
    """Bad input raises ValidationError whose message starts with the JSON path of the field."""
    with pytest.raises(ValidationError) as caught:
        kind.from_object(wire)
    assert str(caught.value).startswith(message), str(caught.value)


def test_scaling_group_of_standalone_vms_reads_and_writes() -> None:
    """A resource group's standalone VMs with the model new VMs are built from; admin user defaulted."""
    wire = _with(SCALING_GROUP_WIRE, "spec", groupID=RESOURCE_GROUP, virtualMachines=STANDALONE_MACHINES)
    group = ScalingGroup.from_object(wire)
    assert group.spec.standalone
    assert group.spec.virtual_machines is not None
    assert group.spec.virtual_machines.admin_username == "azureuser"
    assert group.to_object()["spec"]["virtualMachines"] == {
        **STANDALONE_MACHINES,
        "adminUsername": "azureuser",
    }
    assert not ScalingGroup.from_object(SCALING_GROUP_WIRE).spec.standalone


def test_scaling_group_accepts_min_above_max_when_not_autoscaling() -> None:
    """min and max only bind the autoscaler: a group without autoscaling may leave them unset."""
    group = ScalingGroup.from_object(_with(SCALING_GROUP_WIRE, "spec", min=3, max=0, autoscaling=False))
    assert group.spec.min == 3


def test_scale_set_ids_are_matched_case_insensitively() -> None:
    """ARM IDs come in any case; a lowercased scale-set ID is still a scale-set ID."""
    group = ScalingGroup.from_object(_with(SCALING_GROUP_WIRE, "spec", groupID=SCALE_SET.lower()))
    assert group.spec.group_id == SCALE_SET.lower()


def test_kinds_are_registered_and_cluster_scoped() -> None:
    """All four kinds feed make manifests and, like constellation's, are cluster-scoped."""
    assert set(v1alpha1.RESOURCES) == {NodeImage, ScalingGroup, PendingNode, AutoscalingStrategy}
    assert set(v1alpha1.RESOURCES) <= set(api.RESOURCES)
    for kind in v1alpha1.RESOURCES:
        assert kind.group() == "nodewright.io"
        assert not kind.NAMESPACED
        assert kind.STATUS_SUBRESOURCE


def test_exports_are_explicit() -> None:
    """The package's __all__ names exactly what it defines for others to use."""
    for name in v1alpha1.__all__:
        assert hasattr(v1alpha1, name), name


def test_generated_crds_match_the_models() -> None:
    """config/crd/bases/nodewright.io_*.yaml are what make manifests writes from these models."""
    from hack.manifests import render  # noqa: PLC0415  # hack/ is a tool, imported only here

    ours = {
        path: text
        for path, text in render().items()
        if path.name.startswith("nodewright.io_") and path.parent.name == "bases"  # not the chart's copies
    }
    assert len(ours) == 4
    for path, text in ours.items():
        assert path.exists(), f"{path.name} missing; run make manifests"
        assert path.read_text() == text, f"{path.name} stale; run make manifests"


def test_printer_columns_show_where_a_rollout_stands() -> None:
    """kubectl get nodeimages shows the image, whether nodes are current, the step and the budget."""
    columns = {c["name"]: c for c in _crd_version(NodeImage)["additionalPrinterColumns"]}
    assert columns["Step"]["jsonPath"] == '.status.conditions[?(@.type=="Progressing")].reason'
    assert {"Image", "Up-To-Date", "Updated", "Nodes", "Budget", "Age"} <= set(columns)
    pending_columns = {c["name"] for c in _crd_version(PendingNode)["additionalPrinterColumns"]}
    assert {"Node", "Goal", "Cloud-State", "Reached-Goal", "Deadline"} <= pending_columns


def _crd_version(kind: type[Resource]) -> dict[str, Any]:
    version: dict[str, Any] = kind.custom_resource_definition()["spec"]["versions"][0]
    return version


# --- against a real API server -----------------------------------------------------------------


def _install(kube_api: pykube.HTTPClient, kind: type[Resource]) -> None:
    crd_kind = pykube.object_factory(kube_api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    crd = crd_kind(kube_api, kind.custom_resource_definition())
    if not crd.exists():
        crd.create()
    deadline = time.monotonic() + 30
    conditions: dict[str, str] = {}
    while time.monotonic() < deadline:
        crd.reload()
        conditions = {c["type"]: c["status"] for c in (crd.obj.get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True":
            break
        time.sleep(0.2)
    assert conditions.get("Established") == "True", crd.obj.get("status")
    assert conditions.get("NonStructuralSchema") is None


@pytest.fixture
def crds(kube_api: pykube.HTTPClient) -> str:
    """The four CRDs installed; yields a suffix that makes this test's object names unique."""
    for kind in v1alpha1.RESOURCES:
        _install(kube_api, kind)
    return uuid.uuid4().hex[:8]


def _create(
    kube_api: pykube.HTTPClient, kind: type[Resource], body: dict[str, Any]
) -> pykube.objects.APIObject:
    obj = pykube.object_factory(kube_api, kind.API_VERSION, kind.KIND)(kube_api, body)
    obj.create()
    return obj


def test_api_server_accepts_defaults_and_serves_every_kind(kube_api: pykube.HTTPClient, crds: str) -> None:
    """Each kind is created from the model's own output; the server defaults maxSurge and role and
    the object reads back into the model."""
    created = []
    try:
        for kind, wire in WIRES:
            body = copy.deepcopy(wire)
            body["metadata"] = {**body["metadata"], "name": f"{body['metadata']['name']}-{crds}"}
            body.pop("status")
            if kind is NodeImage:
                body["spec"] = {"image": "publisher:offer:sku:1.0.0"}
            if kind is ScalingGroup:
                body["spec"] = {"groupID": SCALE_SET, "nodeImage": "cluster"}
            obj = _create(kube_api, kind, body)
            created.append(obj)
            read = kind.from_object(obj.obj)
            assert read.name == body["metadata"]["name"]
            if isinstance(read, NodeImage):
                assert read.spec.max_surge == 1
            if isinstance(read, ScalingGroup):
                assert (read.spec.role, read.spec.autoscaling) == (NodeRole.WORKER, False)
    finally:
        for obj in created:
            obj.delete()


@pytest.mark.parametrize(
    ("kind", "spec_changes", "fragment"),
    [
        pytest.param(
            ScalingGroup, {"min": 4, "max": 2, "autoscaling": True}, "max must be at least min", id="cel"
        ),
        pytest.param(ScalingGroup, {"groupID": "/subscriptions/0000"}, "spec.groupID", id="pattern"),
        pytest.param(
            ScalingGroup,
            {"groupID": "/subscriptions/0000/resourceGroups/rg"},
            "virtualMachines is required when groupID names a resource group",
            id="cel-standalone-without-model",
        ),
        pytest.param(
            ScalingGroup,
            {"virtualMachines": STANDALONE_MACHINES},
            "virtualMachines is required when groupID names a resource group, and only then",
            id="cel-model-beside-a-scale-set",
        ),
        pytest.param(NodeImage, {"maxSurge": 0}, "spec.maxSurge", id="minimum"),
        pytest.param(PendingNode, {"goal": "Stay"}, "spec.goal", id="enum"),
    ],
)
def test_api_server_enforces_the_schema(
    kube_api: pykube.HTTPClient, crds: str, kind: type[Resource], spec_changes: dict[str, Any], fragment: str
) -> None:
    """What the Python reader refuses, the API server refuses too (422 naming the field)."""
    wire = dict(WIRES)[kind]
    body = _with(wire, "spec", **spec_changes)
    body["metadata"] = {"name": f"bad-{crds}"}
    body.pop("status")
    with pytest.raises(pykube.exceptions.HTTPError) as rejected:
        _create(kube_api, kind, body)
    assert rejected.value.code == 422
    assert fragment in str(rejected.value)


def test_status_is_a_subresource(kube_api: pykube.HTTPClient, crds: str) -> None:
    """The NodeImage status written through /status reads back through the model; a spec write
    does not touch it."""
    body = {**copy.deepcopy(NODE_IMAGE_WIRE), "metadata": {"name": f"status-{crds}"}}
    status = body.pop("status")
    obj = _create(kube_api, NodeImage, body)
    try:
        obj.obj["status"] = status
        response = kube_api.session.put(
            url=f"{kube_api.url}/apis/nodewright.io/v1alpha1/nodeimages/{obj.name}/status", json=obj.obj
        )
        response.raise_for_status()
        obj.reload()
        read = NodeImage.from_object(obj.obj)
        assert read.status.awaiting_annotation[0].name == "workers000009"
        assert read.status.conditions[0].reason == "NodesOutdated"
        obj.obj["spec"]["maxSurge"] = 2
        obj.obj["status"] = {}
        obj.update()
        obj.reload()
        assert NodeImage.from_object(obj.obj).status.budget == 1
    finally:
        obj.delete()
