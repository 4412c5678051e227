"""Identity assignment decisions, table by table: matching, AzureAssignedIdentity naming and
changes, targets, the identity diff and its removal rules, repair, validation, identity info.

Where a rule answers a complaint filed against aad-pod-identity, the test id names the issue."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    CONDITION_CLIENT_ID_CURRENT,
    CONDITION_RESOLVED,
    AzureAssignedIdentity,
    AzureAssignedIdentitySpec,
    AzureAssignedIdentityStatus,
    AzureIdentity,
    AzureIdentityBinding,
    AzureIdentityStatus,
    EmbeddedAzureIdentity,
    EmbeddedAzureIdentityBinding,
    IdentityType,
)
from nodewright.api.meta import Condition
from nodewright.cloud.resource_ids import InvalidResourceIdError, ScaleSetId, VirtualMachineId
from nodewright.controllers.identity.conditions import (
    with_condition,
)
from nodewright.controllers.identity.decisions import (
    MAX_NAME_LENGTH,
    AssignmentKey,
    AssignmentPolicy,
    DesiredAssignment,
    NodeInfo,
    PodInfo,
    Problem,
    assigned_identity_name,
    assigned_identity_namespace,
    assignment_changes,
    desired_assignments,
    identity_resource_key,
    match_pods,
)
from nodewright.controllers.identity.identity_info_rules import (
    IdentityLookup,
    identity_info_due,
    identity_info_status,
    next_recheck_time,
    truncate_retrieval_error,
)
from nodewright.controllers.identity.lifecycle import next_wait_in, node_wait_step
from nodewright.controllers.identity.targets import (
    AssignmentRecord,
    IdentityNeed,
    Rejection,
    assignment_outcome,
    drift_repairs,
    identities_to_attempt,
    identity_diff,
    needs_by_target,
    next_attempt_in,
    node_targets,
    note_rejection,
    owned_by_nodewright,
    retry_delay,
    target_of_provider_id,
)
from nodewright.controllers.identity.validation import (
    validate,
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


# --- Pods and nodes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "active"),
    [
        pytest.param({"spec": {"nodeName": "n"}, "status": {"phase": "Running"}}, True, id="running"),
        pytest.param(
            {"spec": {"nodeName": "n"}, "status": {"phase": "Pending"}}, True, id="scheduled-pending"
        ),
        pytest.param({"spec": {}, "status": {"phase": "Pending"}}, False, id="not-scheduled"),
        pytest.param({"spec": {"nodeName": "n"}, "status": {"phase": "Succeeded"}}, False, id="succeeded"),
        pytest.param({"spec": {"nodeName": "n"}, "status": {"phase": "Failed"}}, False, id="failed"),
        pytest.param(
            {
                "metadata": {"deletionTimestamp": NOW_TEXT},
                "spec": {"nodeName": "n"},
                "status": {"phase": "Running"},
            },
            True,
            id="terminating-still-runs",
        ),
    ],
)
def test_pod_is_active_when_scheduled_and_not_finished(raw: dict[str, Any], active: bool) -> None:
    """Only scheduled, unfinished pods need identities; a terminating pod still runs."""
    metadata = {
        "name": "p",
        "namespace": "ns",
        "labels": {"aadpodidbinding": "app"},
        **raw.get("metadata", {}),
    }
    info = PodInfo.from_object({**raw, "metadata": metadata})
    assert info.binding_label == "app"
    assert info.is_active is active


def test_node_info_reads_provider_id() -> None:
    node = NodeInfo.from_object({"metadata": {"name": "n1"}, "spec": {"providerID": "azure:///x"}})
    assert node == NodeInfo("n1", "azure:///x")
    assert NodeInfo.from_object({"metadata": {"name": "n2"}, "spec": {}}).provider_id == ""


# --- Matching ------------------------------------------------------------------------------------------


def matched(
    pods: list[PodInfo],
    bindings: list[AzureIdentityBinding],
    identities: list[AzureIdentity],
    force_namespaced: bool = False,
) -> list[tuple[str, str, str]]:
    return [
        (
            f"{m.pod.namespace}/{m.pod.name}",
            f"{m.binding.namespace}/{m.binding.name}",
            f"{m.identity.namespace}/{m.identity.name}",
        )
        for m in match_pods(pods, bindings, identities, force_namespaced=force_namespaced)
    ]


@pytest.mark.parametrize(
    ("pods", "bindings", "identities", "force", "expected"),
    [
        pytest.param(
            [pod("p")],
            [binding("b", "id", "app")],
            [identity("id")],
            False,
            [("default/p", "default/b", "default/id")],
            id="label-equals-selector",
        ),
        pytest.param(
            [pod("p", label="App")],
            [binding("b", "id", "app")],
            [identity("id")],
            False,
            [],
            id="selector-is-case-sensitive",
        ),
        pytest.param(
            [pod("p", label="app-1")],
            [binding("b", "id", "app")],
            [identity("id")],
            False,
            [],
            id="no-prefix-matching",
        ),
        pytest.param(
            [pod("p", label="")],
            [binding("b", "id", "")],
            [identity("id")],
            False,
            [],
            id="empty-label-never-matches",
        ),
        pytest.param(
            [pod("p", node="")],
            [binding("b", "id", "app")],
            [identity("id")],
            False,
            [],
            id="unscheduled-pod",
        ),
        pytest.param(
            [pod("p", phase="Succeeded"), pod("q", phase="Failed")],
            [binding("b", "id", "app")],
            [identity("id")],
            False,
            [],
            id="finished-pods",
        ),
        pytest.param(
            [pod("p", "apps")],
            [binding("b", "id", "app", "infra")],
            [identity("id", "infra")],
            False,
            [("apps/p", "infra/b", "infra/id")],
            id="cross-namespace-by-default",
        ),
        pytest.param(
            [pod("p", "apps")],
            [binding("b", "id", "app", "infra")],
            [identity("id", "apps")],
            False,
            [],
            id="binding-names-identity-in-its-own-namespace",
        ),
        pytest.param(
            [pod("p", "apps")],
            [binding("b", "id", "app", "infra")],
            [identity("id", "infra")],
            True,
            [],
            id="force-namespaced-refuses-cross-namespace",
        ),
        pytest.param(
            [pod("p", "infra")],
            [binding("b", "id", "app", "infra")],
            [identity("id", "infra")],
            True,
            [("infra/p", "infra/b", "infra/id")],
            id="force-namespaced-same-namespace",
        ),
        pytest.param(
            [pod("p", "apps")],
            [binding("b", "id", "app", "infra")],
            [identity("id", "infra", namespaced=True)],
            False,
            [],
            id="namespaced-annotation-refuses-cross-namespace",
        ),
        pytest.param(
            [pod("p")],
            [binding("b", "id", "app")],
            [identity("id", resource="/subscriptions/x/bad")],
            False,
            [],
            id="invalid-resource-id-excluded",
        ),
        pytest.param(
            [pod("p")],
            [binding("b1", "bad", "app"), binding("b2", "good", "app")],
            [identity("bad", resource="not-an-id"), identity("good")],
            False,
            [("default/p", "default/b2", "default/good")],
            id="one-bad-identity-does-not-block-others-515-1192",
        ),
        pytest.param(
            [pod("p")],
            [binding("b2", "id", "app"), binding("b1", "id", "app")],
            [identity("id")],
            False,
            [("default/p", "default/b1", "default/id")],
            id="one-assignment-per-pod-and-identity",
        ),
        pytest.param(
            [pod("p")],
            [binding("b1", "id1", "app"), binding("b2", "id2", "app")],
            [identity("id1"), identity("id2")],
            False,
            [("default/p", "default/b1", "default/id1"), ("default/p", "default/b2", "default/id2")],
            id="two-identities-through-one-selector",
        ),
        pytest.param(
            [pod("p")],
            [binding("b", "sp", "app")],
            [identity("sp", identity_type=1)],
            False,
            [("default/p", "default/b", "default/sp")],
            id="service-principal-needs-no-resource-id",
        ),
        pytest.param(
            [pod("p")],
            [binding("b", "missing", "app")],
            [],
            False,
            [],
            id="binding-to-missing-identity",
        ),
    ],
)
def test_match_pods(
    pods: list[PodInfo],
    bindings: list[AzureIdentityBinding],
    identities: list[AzureIdentity],
    force: bool,
    expected: list[tuple[str, str, str]],
) -> None:
    """Pods x bindings x identities as MIC matched them, minus the identities it could not use."""
    assert matched(pods, bindings, identities, force) == expected


# --- AzureAssignedIdentity names and namespaces ------------------------------------------------------


def test_name_is_mics_when_it_fits() -> None:
    """<pod>-<podNamespace>-<identityName>, as MIC wrote it (existing objects keep matching)."""
    assert assigned_identity_name("demo", "default", "demo") == "demo-default-demo"
    exact = "p" * (MAX_NAME_LENGTH - len("-ns-id"))
    assert assigned_identity_name(exact, "ns", "id") == f"{exact}-ns-id"


@pytest.mark.parametrize(
    ("pod_name", "namespace", "identity_name"),
    [
        pytest.param("p" * 200, "n" * 40, "i" * 20, id="just-over"),
        pytest.param("a" * 253, "b" * 63, "c" * 253, id="all-maximal"),
        pytest.param("a" * 240 + "-x", "ns", "id", id="cut-at-a-dash"),
        pytest.param("a" * 241 + ".x", "ns", "id", id="cut-at-a-dot"),
    ],
)
def test_name_over_253_characters_is_truncated_with_a_hash(
    pod_name: str, namespace: str, identity_name: str
) -> None:
    """MIC sent these to the API server, which refused them on every sync; ours fit and stay valid."""
    name = assigned_identity_name(pod_name, namespace, identity_name)
    assert len(name) <= MAX_NAME_LENGTH
    assert name[0].isalnum()
    assert name[-1].isalnum()
    assert "-." not in name
    assert ".-" not in name
    assert name == assigned_identity_name(pod_name, namespace, identity_name), "deterministic"
    assert name != assigned_identity_name(pod_name, namespace, identity_name + "x")


@pytest.mark.parametrize(
    ("identity_object", "force", "namespace"),
    [
        pytest.param(identity("id", "infra"), False, "default", id="shared-identity-in-default"),
        pytest.param(identity("id", "infra", namespaced=True), False, "infra", id="namespaced-annotation"),
        pytest.param(identity("id", "infra"), True, "infra", id="force-namespaced"),
    ],
)
def test_assigned_identity_namespace(identity_object: AzureIdentity, force: bool, namespace: str) -> None:
    """The identity's namespace when namespaced, else default (MIC's rule)."""
    assert assigned_identity_namespace(identity_object, force) == namespace


def test_desired_assignment_has_mics_shape() -> None:
    """Name, namespace, nodename label and MIC's finalizer; embedded identity and binding."""
    (desired,) = desired_for(
        [pod("demo", node="aks-0")], [binding("demo-binding", "demo", "app")], [identity("demo")]
    )
    assert (desired.name, desired.namespace, desired.node_name) == ("demo-default-demo", "default", "aks-0")
    resource = desired.to_resource()
    assert resource.metadata["labels"] == {"nodename": "aks-0"}
    assert resource.metadata["finalizers"] == [ASSIGNED_IDENTITY_FINALIZER]
    assert resource.spec.pod == "demo"
    assert resource.spec.pod_namespace == "default"
    assert resource.spec.azure_identity_ref is not None
    assert resource.spec.azure_identity_ref.spec.resource_id == resource_id("demo")
    assert resource.spec.azure_binding_ref is not None
    assert resource.spec.azure_binding_ref.name == "demo-binding"
    assert resource.status.status == ""


def test_colliding_names_are_made_unique() -> None:
    """Pod a-b in namespace c and pod a in namespace b-c share MIC's name a-b-c-id; each gets its own."""
    desired = desired_for(
        [pod("a-b", "c"), pod("a", "b-c")],
        [binding("bind", "id", "app", "infra")],
        [identity("id", "infra")],
    )
    names = {d.key: d.name for d in desired}
    assert len(set(names.values())) == 2
    assert all(name != "a-b-c-id" for name in names.values())


def test_same_named_identities_of_two_namespaces_do_not_collide() -> None:
    """One pod bound to identity 'id' of two namespaces: both objects live in default, so differ."""
    desired = desired_for(
        [pod("p", "apps")],
        [binding("b", "id", "app", "team-a"), binding("b", "id", "app", "team-b")],
        [identity("id", "team-a"), identity("id", "team-b", resource=resource_id("other"))],
    )
    assert len(desired) == 2
    assert len({(d.namespace, d.name) for d in desired}) == 2


# --- AzureAssignedIdentity changes ------------------------------------------------------------------


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


def changes_summary(
    desired: list[DesiredAssignment], objects: list[AzureAssignedIdentity]
) -> dict[str, list[str]]:
    result = assignment_changes(desired, objects)
    return {
        "create": [d.name for d in result.create],
        "update": [f"{o.name}->{d.node_name}" for o, d in result.update],
        "keep": [o.name for o, _ in result.keep],
        "release": [o.name for o in result.release],
        "waiting": [d.name for d in result.waiting],
    }


EMPTY_CHANGES: dict[str, list[str]] = {"create": [], "update": [], "keep": [], "release": [], "waiting": []}


@pytest.mark.parametrize(
    ("desired", "objects", "expected"),
    [
        pytest.param([DEMO], [], {**EMPTY_CHANGES, "create": ["demo-default-demo"]}, id="new-pod"),
        pytest.param(
            [DEMO], [existing(DEMO)], {**EMPTY_CHANGES, "keep": ["demo-default-demo"]}, id="unchanged"
        ),
        pytest.param(
            [DEMO],
            [mic_written(DEMO)],
            {**EMPTY_CHANGES, "keep": ["demo-default-demo"]},
            id="mic-written-object-is-adopted-without-churn",
        ),
        pytest.param(
            [DEMO],
            [existing(DEMO, node="node-9")],
            {**EMPTY_CHANGES, "update": ["demo-default-demo->node-0"]},
            id="statefulset-pod-moved-node-977-1161",
        ),
        pytest.param(
            [DEMO],
            [existing(DEMO, client_id="stale")],
            {**EMPTY_CHANGES, "update": ["demo-default-demo->node-0"]},
            id="identity-clientid-fixed-reaches-nmi-521",
        ),
        pytest.param(
            [], [existing(DEMO)], {**EMPTY_CHANGES, "release": ["demo-default-demo"]}, id="pod-gone"
        ),
        pytest.param(
            [DEMO],
            [existing(DEMO, deleting=True)],
            {**EMPTY_CHANGES, "release": ["demo-default-demo"], "waiting": ["demo-default-demo"]},
            id="object-being-deleted-is-released-and-recreated-later",
        ),
        pytest.param(
            [DEMO],
            [existing(DEMO, name="demo-hashed-1234"), existing(DEMO, name="demo-zz-copy")],
            {**EMPTY_CHANGES, "keep": ["demo-hashed-1234"], "release": ["demo-zz-copy"]},
            id="matched-by-content-not-name-and-duplicates-released",
        ),
    ],
)
def test_assignment_changes(
    desired: list[DesiredAssignment], objects: list[AzureAssignedIdentity], expected: dict[str, list[str]]
) -> None:
    """Existing objects are matched to desired ones by pod and identity, then kept, rewritten or released."""
    assert changes_summary(desired, objects) == expected


def test_name_held_by_another_assignment_gets_a_hashed_name() -> None:
    """An existing object (another target's) already holds MIC's name for something else."""
    other = AssignmentKey("b-c", "a", "infra", "id")
    (desired,) = desired_for(
        [pod("a-b", "c")], [binding("bind", "id", "app", "infra")], [identity("id", "infra")]
    )
    (renamed,) = desired_assignments(
        match_pods([pod("a-b", "c")], [binding("bind", "id", "app", "infra")], [identity("id", "infra")]),
        taken={("default", "a-b-c-id"): other},
    )
    assert desired.name == "a-b-c-id"
    assert renamed.name != "a-b-c-id"
    (same,) = desired_assignments(
        match_pods([pod("a-b", "c")], [binding("bind", "id", "app", "infra")], [identity("id", "infra")]),
        taken={("default", "a-b-c-id"): desired.key},
    )
    assert same.name == "a-b-c-id", "its own object does not count as taken"


def test_pod_moved_to_another_target_waits_for_the_name() -> None:
    """The object still belongs to the old target until that target released the identity."""
    result = assignment_changes([DEMO], [], names_in_use=[("default", DEMO.name)])
    assert result.waiting == (DEMO,)
    assert result.create == ()


def test_identity_turned_namespaced_replaces_the_object() -> None:
    """Objects cannot change namespace: the one in default is released, a new one created."""
    (namespaced,) = desired_for(
        [pod("demo", "apps")],
        [binding("b", "demo", "app", "apps")],
        [identity("demo", "apps", namespaced=True)],
    )
    (shared,) = desired_for(
        [pod("demo", "apps")], [binding("b", "demo", "app", "apps")], [identity("demo", "apps")]
    )
    result = assignment_changes([namespaced], [existing(shared)])
    assert [(o.namespace, o.name) for o in result.release] == [("default", "demo-apps-demo")]
    assert [(d.namespace, d.name) for d in result.create] == [("apps", "demo-apps-demo")]


def test_object_without_identity_is_released() -> None:
    broken = AzureAssignedIdentity(
        metadata={"name": "x", "namespace": "default"}, spec=AzureAssignedIdentitySpec(pod="p")
    )
    assert assignment_changes([], [broken]).release == (broken,)


# --- Targets ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        pytest.param(scale_set_node("n").provider_id, POOL, id="scale-set-instance-to-scale-set"),
        pytest.param(
            "AZURE:///SUBSCRIPTIONS/S/RESOURCEGROUPS/MC_RG/PROVIDERS/MICROSOFT.COMPUTE/VIRTUALMACHINESCALESETS/POOL/VIRTUALMACHINES/3",
            ScaleSetId("S", "MC_RG", "POOL"),
            id="upper-case-provider-id",
        ),
        pytest.param(
            vm_node("n", "vm-1").provider_id, VirtualMachineId(SUBSCRIPTION, "MC_rg", "vm-1"), id="vm"
        ),
        pytest.param(
            scale_set_node("n", group="other-rg").provider_id,
            ScaleSetId(SUBSCRIPTION, "other-rg", "pool"),
            id="resource-group-from-the-id-690-855-1246",
        ),
    ],
)
def test_target_of_provider_id(provider_id: str, expected: object) -> None:
    """A node's identities live on its scale set or its VM, in the resource group its ID names."""
    target = target_of_provider_id(provider_id)
    assert target == expected


def test_target_keys_ignore_case() -> None:
    """Two spellings of one scale set are one target (one update, one in-use check)."""
    upper = target_of_provider_id(scale_set_node("a").provider_id.upper().replace("AZURE://", "azure://"))
    assert upper.key == POOL.key


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        pytest.param(NodeInfo("kind-node", ""), "NodeWithoutProviderID", id="no-provider-id"),
        pytest.param(NodeInfo("kind-node", "kind://docker/kind/node"), "InvalidProviderID", id="not-azure"),
        pytest.param(
            NodeInfo(
                "n",
                "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/x",
            ),
            "InvalidProviderID",
            id="not-a-machine",
        ),
    ],
)
def test_nodes_without_target_are_problems_not_errors(node: NodeInfo, reason: str) -> None:
    targets, problems = node_targets([node, scale_set_node("good")])
    assert targets == {"good": POOL}
    assert [(p.kind, p.name, p.reason) for p in problems] == [("Node", node.name, reason)]


def test_needs_of_a_scale_sets_nodes_are_consolidated() -> None:
    """Pods on three nodes of one scale set and one VM: two targets, one update each (#676 #988 #1139)."""
    nodes = [
        scale_set_node("s0", instance="0"),
        scale_set_node("s1", instance="1"),
        scale_set_node("s2", instance="2"),
    ]
    nodes.append(vm_node("v0"))
    targets, _ = node_targets(nodes)
    desired = desired_for(
        [
            pod("a", node="s0"),
            pod("b", node="s1", label="other"),
            pod("c", node="v0"),
            pod("d", node="s2", label="sp"),
        ],
        [binding("b1", "id1", "app"), binding("b2", "id2", "other"), binding("b3", "sp", "sp")],
        [identity("id1"), identity("id2"), identity("sp", identity_type=1)],
    )
    needs = needs_by_target(desired, targets)
    assert {k: sorted(n.resource_key for n in v) for k, v in needs.items()} == {
        POOL.key: [key("id1"), key("id2")],
        VirtualMachineId(SUBSCRIPTION, "MC_rg", "v0").key: [key("id1")],
    }


# --- The identity diff --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "needs", "released", "policy", "delta"),
    [
        pytest.param([], [need("a")], [], AssignmentPolicy(), ({key("a")}, set()), id="add-missing"),
        pytest.param(
            [resource_id("a")], [need("a")], [], AssignmentPolicy(), (set(), set()), id="nothing-to-do"
        ),
        pytest.param(
            [resource_id("a").upper()],
            [need("a")],
            [],
            AssignmentPolicy(),
            (set(), set()),
            id="case-insensitive-ids-556",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a")],
            AssignmentPolicy(),
            (set(), {key("a")}),
            id="remove-released-ours",
        ),
        pytest.param(
            [resource_id("a")],
            [need("a")],
            [record("a")],
            AssignmentPolicy(),
            (set(), set()),
            id="in-use-by-another-pod-on-the-target",
        ),
        pytest.param(
            [resource_id("a")],
            [need("a", client_id="stale-client")],
            [record("a")],
            AssignmentPolicy(),
            (set(), set()),
            id="in-use-by-resource-id-despite-stale-client-id-521",
        ),
        pytest.param(
            [resource_id("a")],
            [IdentityNeed(key("a-alias"), "a-client")],
            [record("a")],
            AssignmentPolicy(),
            ({key("a-alias")}, set()),
            id="in-use-by-client-id-as-mic",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a", status=ASSIGNED_STATUS_CREATED)],
            AssignmentPolicy(),
            (set(), set()),
            id="never-confirmed-assigned",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a", added=False)],
            AssignmentPolicy(),
            (set(), set()),
            id="pre-existing-identity-is-never-ours",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a", added=False, marked=False)],
            AssignmentPolicy(),
            (set(), set()),
            id="mic-era-record-kept-by-default",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a", added=False, marked=False)],
            AssignmentPolicy(remove_unmarked_assignments=True),
            (set(), {key("a")}),
            id="mic-era-record-opt-in",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a")],
            AssignmentPolicy(immutable_identities=frozenset({"A-CLIENT"})),
            (set(), set()),
            id="immutable-by-client-id",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a")],
            AssignmentPolicy(immutable_identities=frozenset({resource_id("a")})),
            (set(), set()),
            id="immutable-by-resource-id",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a")],
            AssignmentPolicy(manager_identities=frozenset({"a-client"})),
            (set(), set()),
            id="managers-own-identity",
        ),
        pytest.param(
            [],
            [],
            [record("a")],
            AssignmentPolicy(),
            (set(), set()),
            id="already-gone-nothing-to-remove",
        ),
        pytest.param(
            [resource_id("kubelet")],
            [],
            [],
            AssignmentPolicy(),
            (set(), set()),
            id="identities-nobody-released-are-never-removed",
        ),
        pytest.param(
            [resource_id("a"), resource_id("b")],
            [need("b")],
            [record("a"), record("b")],
            AssignmentPolicy(),
            (set(), {key("a")}),
            id="remove-one-keep-the-needed-one",
        ),
        pytest.param(
            [resource_id("a")],
            [],
            [record("a", added=False), record("a")],
            AssignmentPolicy(),
            (set(), {key("a")}),
            id="any-owning-record-suffices",
        ),
    ],
)
def test_identity_diff(
    current: list[str],
    needs: list[IdentityNeed],
    released: list[AssignmentRecord],
    policy: AssignmentPolicy,
    delta: tuple[set[str], set[str]],
) -> None:
    """One target's delta, with aad-pod-identity's removal rules plus nodewright's ownership rule."""
    to_add, to_remove = delta
    diff = identity_diff(current, needs, released, policy)
    assert diff.to_add == to_add
    assert diff.to_remove == to_remove
    assert diff.is_empty is (not to_add and not to_remove)


def test_identity_diff_says_why_an_identity_stays() -> None:
    diff = identity_diff(
        [resource_id("a"), resource_id("b")], [need("a")], [record("a"), record("b", added=False)]
    )
    assert diff.retained == {
        key("a"): "in use by another pod on the target",
        key("b"): "not added by nodewright",
    }


def test_identity_diff_never_caps_the_delta_813() -> None:
    """200 identities to add are all in the diff: chunking at 150 per request is the cloud layer's."""
    needs = [need(f"id-{index}") for index in range(200)]
    assert len(identity_diff([], needs).to_add) == 200


def test_in_use_check_spans_every_node_of_the_scale_set_198() -> None:
    """A pod on another node of the scale set keeps the identity a deleted pod released."""
    nodes = [scale_set_node("s0", instance="0"), scale_set_node("s1", instance="1")]
    targets, _ = node_targets(nodes)
    still_there = desired_for([pod("b", node="s1")], [binding("bind", "id", "app")], [identity("id")])
    needs = needs_by_target(still_there, targets)[POOL.key]
    diff = identity_diff([resource_id("id")], needs, [record("id")])
    assert diff.to_remove == frozenset()


# --- Rejections, repair, ownership, outcome --------------------------------------------------------


def rejection(retry_at: datetime, attempts: int = 1, message: str = "no assign/action") -> Rejection:
    return Rejection("LinkedAuthorizationFailed", message, attempts, retry_at)


@pytest.mark.parametrize(
    ("rejections", "attempt", "held"),
    [
        pytest.param({}, {key("a"), key("b")}, set(), id="nothing-rejected"),
        pytest.param(
            {key("a"): rejection(NOW + timedelta(seconds=5))},
            {key("b")},
            {key("a")},
            id="next-attempt-not-due",
        ),
        pytest.param({key("a"): rejection(NOW)}, {key("a"), key("b")}, set(), id="next-attempt-due"),
    ],
)
def test_identities_to_attempt(
    rejections: Mapping[str, Rejection], attempt: set[str], held: set[str]
) -> None:
    """A known-bad identity is held back until its next attempt, so it costs no failing PATCH per
    pass; the others go ahead."""
    result = identities_to_attempt([resource_id("a"), resource_id("b")], rejections, NOW)
    assert result == (frozenset(attempt), frozenset(held))


@pytest.mark.parametrize(
    ("attempts", "seconds"),
    [
        pytest.param(1, 5, id="first"),
        pytest.param(2, 10, id="doubles"),
        pytest.param(4, 40, id="doubles-again"),
        pytest.param(8, 600, id="capped"),
        pytest.param(200, 600, id="stays-capped"),
    ],
)
def test_retry_delay_doubles_up_to_the_cap(attempts: int, seconds: float) -> None:
    """Retries of a refused identity back off exponentially and never wait longer than the cap."""
    assert retry_delay(attempts, timedelta(seconds=5), timedelta(minutes=10)) == timedelta(seconds=seconds)


def test_note_rejection_counts_attempts_and_schedules_the_next() -> None:
    """Each refusal of the same identity counts one more attempt and pushes the next one out."""
    first = note_rejection(
        None, "FailedIdentityOperation", "x", NOW, first=timedelta(seconds=5), cap=timedelta(60)
    )
    assert (first.attempts, first.retry_at) == (1, NOW + timedelta(seconds=5))
    later = NOW + timedelta(seconds=6)
    second = note_rejection(
        first, "FailedIdentityOperation", "x", later, first=timedelta(seconds=5), cap=timedelta(60)
    )
    assert (second.attempts, second.retry_at) == (2, later + timedelta(seconds=10))
    assert next_attempt_in({key("a")}, {key("a"): second}, later) == 10.0
    assert next_attempt_in(set(), {key("a"): second}, later) is None


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        pytest.param(
            "FailedIdentityOperation",
            "Resource '/x' was not found.",
            "IdentityNotFound",
            id="missing-identity",
        ),
        pytest.param("LinkedAuthorizationFailed", "no assign/action", "IdentityRejected", id="no-permission"),
    ],
)
def test_rejection_reason_names_a_missing_identity(code: str, message: str, reason: str) -> None:
    """A refusal because the identity does not exist says so in the condition's reason."""
    found = Rejection(code, message, 3, NOW)
    assert found.reason == reason
    assert "attempt 3" in found.describe()
    assert message in found.describe()


@pytest.mark.parametrize(
    ("current", "records", "expected"),
    [
        pytest.param([], [record("a")], {key("a")}, id="vanished-from-scale-set-633-1308"),
        pytest.param([resource_id("a")], [record("a")], set(), id="still-there"),
        pytest.param([], [record("a", status=ASSIGNED_STATUS_CREATED)], set(), id="created-is-not-repair"),
        pytest.param([], [record("a", target="/subscriptions/s/other")], set(), id="other-target"),
        pytest.param(
            [resource_id("stray")],
            [],
            set(),
            id="repair-never-removes",
        ),
        pytest.param(
            [],
            [record("sp", identity_type=IdentityType.SERVICE_PRINCIPAL)],
            set(),
            id="service-principal-ignored",
        ),
    ],
)
def test_drift_repairs(current: list[str], records: list[AssignmentRecord], expected: set[str]) -> None:
    """Identities recorded Assigned but missing are re-added; nothing is ever removed by repair."""
    assert drift_repairs(current, records, POOL.key) == expected


def test_ownership_is_inherited_from_another_assignment() -> None:
    """The second pod of an identity nodewright added also owns it, so the identity is removed
    once the last pod is gone instead of leaking."""
    records = [record("a"), record("b", added=False), record("c", status=ASSIGNED_STATUS_CREATED)]
    assert owned_by_nodewright(records, POOL.key, key("a"))
    assert not owned_by_nodewright(records, POOL.key, key("b"))
    assert not owned_by_nodewright(records, POOL.key, key("c"))
    assert not owned_by_nodewright(records, "/other", key("a"))


def test_record_of_mic_object_uses_its_nodes_target() -> None:
    """MIC's objects carry no target: the node's target stands in and the record is unmarked."""
    made = AssignmentRecord.of(mic_written(DEMO), node_target=POOL.key)
    assert made is not None
    assert (made.target, made.resource_key, made.status, made.added_by_nodewright, made.marked) == (
        POOL.key,
        key("demo"),
        ASSIGNED_STATUS_ASSIGNED,
        False,
        False,
    )
    ours = AssignmentRecord.of(existing(DEMO))
    assert ours is not None
    assert ours.marked
    assert ours.added_by_nodewright


SERVICE_PRINCIPAL = desired_for([pod("p")], [binding("b", "sp", "app")], [identity("sp", identity_type=1)])[0]


@pytest.mark.parametrize(
    ("desired", "target", "landed", "options", "expected"),
    [
        pytest.param(
            DEMO,
            POOL,
            frozenset({key("demo")}),
            {"attempted": frozenset({key("demo")})},
            (ASSIGNED_STATUS_ASSIGNED, True, "Assigned"),
            id="added-this-pass",
        ),
        pytest.param(
            DEMO,
            POOL,
            frozenset({key("demo")}),
            {},
            (ASSIGNED_STATUS_ASSIGNED, False, "Assigned"),
            id="already-there-not-ours",
        ),
        pytest.param(
            DEMO,
            POOL,
            frozenset({key("demo")}),
            {"owned": True},
            (ASSIGNED_STATUS_ASSIGNED, True, "Assigned"),
            id="already-there-and-owned",
        ),
        pytest.param(
            DEMO,
            POOL,
            frozenset(),
            {"rejections": {key("demo"): rejection(NOW)}, "attempted": frozenset({key("demo")})},
            (ASSIGNED_STATUS_CREATED, False, "IdentityRejected"),
            id="rejected-by-arm",
        ),
        pytest.param(
            DEMO,
            POOL,
            frozenset(),
            {
                "held": frozenset({key("demo")}),
                "rejections": {key("demo"): rejection(NOW, message="was not found")},
            },
            (ASSIGNED_STATUS_CREATED, False, "IdentityNotFound"),
            id="held-back",
        ),
        pytest.param(
            DEMO, POOL, None, {}, (ASSIGNED_STATUS_CREATED, False, "AssignmentFailed"), id="unknown-state"
        ),
        pytest.param(
            DEMO,
            POOL,
            frozenset(),
            {"attempted": frozenset({key("demo")})},
            (ASSIGNED_STATUS_CREATED, False, "AssignmentFailed"),
            id="did-not-land",
        ),
        pytest.param(
            DEMO, None, None, {}, (ASSIGNED_STATUS_CREATED, False, "NodeNotResolvable"), id="no-target"
        ),
        pytest.param(
            DEMO,
            None,
            None,
            {"node_exists": False},
            (ASSIGNED_STATUS_CREATED, False, "NodeNotFound"),
            id="node-missing",
        ),
        pytest.param(
            SERVICE_PRINCIPAL,
            None,
            None,
            {},
            (ASSIGNED_STATUS_ASSIGNED, False, "NothingToAssign"),
            id="service-principal",
        ),
    ],
)
def test_assignment_outcome(
    desired: DesiredAssignment,
    target: ScaleSetId | None,
    landed: frozenset[str] | None,
    options: dict[str, Any],
    expected: tuple[str, bool, str],
) -> None:
    """Assigned only once the identity is really on the target; ours only if we added or owned it."""
    outcome = assignment_outcome(desired, target, landed, **options)
    assert (outcome.status, outcome.added_by_nodewright, outcome.reason) == expected
    if "rejections" in options:
        assert "LinkedAuthorizationFailed" in outcome.message


# --- Validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identities", "bindings", "pods", "nodes", "expected"),
    [
        pytest.param(
            [identity("id"), identity("sp", identity_type=1)],
            [binding("b", "id", "app")],
            [pod("p")],
            {"node-0": scale_set_node("node-0")},
            [],
            id="valid-input",
        ),
        pytest.param(
            [
                identity(
                    "id",
                    resource="/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/x",
                )
            ],
            [],
            [],
            None,
            [("AzureIdentity", "id", "InvalidResourceID")],
            id="malformed-resource-id",
        ),
        pytest.param(
            [identity("id", resource="")],
            [],
            [],
            None,
            [("AzureIdentity", "id", "InvalidResourceID")],
            id="empty-resource-id",
        ),
        pytest.param(
            [],
            [binding("b", "missing", "app")],
            [],
            None,
            [("AzureIdentityBinding", "b", "IdentityNotFound")],
            id="binding-to-missing-identity",
        ),
        pytest.param(
            [identity("bad", resource="x")],
            [binding("b", "bad", "app")],
            [],
            None,
            [("AzureIdentity", "bad", "InvalidResourceID"), ("AzureIdentityBinding", "b", "IdentityInvalid")],
            id="binding-to-invalid-identity",
        ),
        pytest.param(
            [identity("id")],
            [binding("b", "id", "app")],
            [pod("p", node="gone")],
            {},
            [("Pod", "p", "NodeNotFound")],
            id="pod-on-missing-node",
        ),
        pytest.param(
            [identity("id")],
            [binding("b", "id", "app")],
            [pod("p", node="kind")],
            {"kind": NodeInfo("kind")},
            [("Pod", "p", "NodeWithoutProviderID")],
            id="pod-on-node-without-provider-id",
        ),
        pytest.param(
            [identity("id")],
            [binding("b", "id", "app")],
            [pod("p", node="k")],
            {"k": NodeInfo("k", "kind://x")},
            [("Pod", "p", "InvalidProviderID")],
            id="pod-on-non-azure-node",
        ),
    ],
)
def test_validate(
    identities: list[AzureIdentity],
    bindings: list[AzureIdentityBinding],
    pods: list[PodInfo],
    nodes: dict[str, NodeInfo] | None,
    expected: list[tuple[str, str, str]],
) -> None:
    """Bad input becomes a list of problems keyed by object, never an exception."""
    problems = validate(identities, bindings, pods, nodes)
    assert [(p.kind, p.name, p.reason) for p in problems] == expected
    assert all(isinstance(p, Problem) and p.message for p in problems)


def test_validation_messages_name_the_fix() -> None:
    (problem,) = validate([identity("id", resource="x")], [])
    assert "userAssignedIdentities/<name>" in problem.message
    (missing,) = validate([], [binding("b", "nope", "app", "team")])
    assert "'nope'" in missing.message
    assert "team" in missing.message


# --- Identity info -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jitter", "expected"),
    [
        pytest.param(0.0, NOW + timedelta(hours=12), id="no-jitter"),
        pytest.param(0.5, NOW + timedelta(hours=15), id="half"),
        pytest.param(0.999, NOW + timedelta(hours=12) * 1.4995, id="almost-full"),
    ],
)
def test_next_recheck_time(jitter: float, expected: datetime) -> None:
    """12 h x (1 + 0.5 x jitter)."""
    assert next_recheck_time(NOW, jitter) == expected


@pytest.mark.parametrize("jitter", [-0.1, 1.0, 2.0])
def test_next_recheck_time_refuses_jitter_outside_unit_interval(jitter: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        next_recheck_time(NOW, jitter)


def test_retrieval_error_keeps_first_1024_characters() -> None:
    assert truncate_retrieval_error("x" * 2000) == "x" * 1024
    assert truncate_retrieval_error("short") == "short"


@pytest.mark.parametrize(
    ("identity_object", "due"),
    [
        pytest.param(identity("id"), True, id="never-looked-up"),
        pytest.param(
            identity("id", status={"observedGeneration": 1, "nextRecheckTime": "2026-11-29T13:00:00Z"}),
            False,
            id="before-recheck-time",
        ),
        pytest.param(
            identity("id", status={"observedGeneration": 1, "nextRecheckTime": "2026-11-29T12:00:00Z"}),
            True,
            id="recheck-time-reached",
        ),
        pytest.param(
            identity(
                "id",
                generation=2,
                status={"observedGeneration": 1, "nextRecheckTime": "2026-11-30T00:00:00Z"},
            ),
            True,
            id="spec-changed",
        ),
        pytest.param(
            identity("id", status={"observedGeneration": 1, "retrievalError": "boom"}),
            True,
            id="failed-lookup-retried",
        ),
        pytest.param(identity("sp", identity_type=1), False, id="service-principal-has-nothing-to-resolve"),
    ],
)
def test_identity_info_due(identity_object: AzureIdentity, due: bool) -> None:
    assert identity_info_due(identity_object, NOW) is due


def conditions_of(status: AzureIdentityStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


@pytest.mark.parametrize(
    ("identity_object", "lookup", "expected_ids", "recheck", "conditions"),
    [
        pytest.param(
            identity("id", client_id="c-1"),
            IdentityLookup("found", "c-1", "p-1"),
            ("c-1", "p-1", ""),
            "2026-11-30T00:00:00Z",
            {CONDITION_RESOLVED: ("True", "Found"), CONDITION_CLIENT_ID_CURRENT: ("True", "Matches")},
            id="found-and-current",
        ),
        pytest.param(
            identity("id", client_id="C-1"),
            IdentityLookup("found", "c-1", "p-1"),
            ("c-1", "p-1", ""),
            "2026-11-30T00:00:00Z",
            {CONDITION_RESOLVED: ("True", "Found"), CONDITION_CLIENT_ID_CURRENT: ("True", "Matches")},
            id="client-id-compared-ignoring-case",
        ),
        pytest.param(
            identity("id", client_id="old"),
            IdentityLookup("found", "new", "p-2"),
            ("new", "p-2", ""),
            "2026-11-30T00:00:00Z",
            {CONDITION_RESOLVED: ("True", "Found"), CONDITION_CLIENT_ID_CURRENT: ("False", "Differs")},
            id="identity-recreated-stale-client-id-521",
        ),
        pytest.param(
            identity("id", client_id=""),
            IdentityLookup("found", "new", "p-2"),
            ("new", "p-2", ""),
            "2026-11-30T00:00:00Z",
            {CONDITION_RESOLVED: ("True", "Found"), CONDITION_CLIENT_ID_CURRENT: ("False", "NotSet")},
            id="client-id-not-set",
        ),
        pytest.param(
            identity("id", status={"clientID": "stale", "principalID": "stale"}),
            IdentityLookup("not_found", error="ResourceNotFound: identity x was not found"),
            ("", "", "ResourceNotFound: identity x was not found"),
            "2026-11-30T00:00:00Z",
            {
                CONDITION_RESOLVED: ("False", "NotFound"),
                CONDITION_CLIENT_ID_CURRENT: ("Unknown", "NotResolved"),
            },
            id="not-found-clears-and-rechecks-later",
        ),
        pytest.param(
            identity("id", status={"clientID": "stale", "principalID": "stale", "nextRecheckTime": NOW_TEXT}),
            IdentityLookup("failed", error="AuthorizationFailed"),
            ("", "", "AuthorizationFailed"),
            "",
            {
                CONDITION_RESOLVED: ("False", "RetrievalFailed"),
                CONDITION_CLIENT_ID_CURRENT: ("Unknown", "NotResolved"),
            },
            id="other-error-clears-and-retries-next-pass",
        ),
        pytest.param(
            identity("id"),
            IdentityLookup("invalid", error="not a user-assigned identity ID"),
            ("", "", "not a user-assigned identity ID"),
            "",
            {
                CONDITION_RESOLVED: ("False", "InvalidResourceID"),
                CONDITION_CLIENT_ID_CURRENT: ("Unknown", "NotResolved"),
            },
            id="invalid-resource-id",
        ),
    ],
)
def test_identity_info_status(
    identity_object: AzureIdentity,
    lookup: IdentityLookup,
    expected_ids: tuple[str, str, str],
    recheck: str,
    conditions: dict[str, tuple[str, str]],
) -> None:
    """ARO-HCP's lookup rules, and a condition for a spec.clientID that is not the real one."""
    status = identity_info_status(identity_object, lookup, NOW, jitter=0.0)
    assert (status.client_id, status.principal_id, status.retrieval_error) == expected_ids
    assert status.next_recheck_time == recheck
    assert status.observed_generation == 1
    assert conditions_of(status) == conditions


def test_identity_info_status_truncates_the_error_and_keeps_upstream_fields() -> None:
    original = identity("id", status={"availableReplicas": 3, "metadata": {"creationTimestamp": None}})
    status = identity_info_status(original, IdentityLookup("failed", error="e" * 5000), NOW, jitter=0.3)
    assert len(status.retrieval_error) == 1024
    assert status.available_replicas == 3
    assert status.metadata == {"creationTimestamp": None}
    (resolved,) = [c for c in status.conditions if c.type == CONDITION_RESOLVED]
    assert len(resolved.message) == 1024


def test_identity_info_status_after_found_then_failure_leaves_no_stale_ids() -> None:
    found = identity_info_status(identity("id"), IdentityLookup("found", "c", "p"), NOW, jitter=0.0)
    later = identity("id", status=found.to_dict())
    failed = identity_info_status(
        later, IdentityLookup("failed", error="503"), NOW + timedelta(hours=13), jitter=0.0
    )
    assert (failed.client_id, failed.principal_id) == ("", "")


def test_condition_transition_time_moves_only_on_status_change() -> None:
    first = with_condition([], "Resolved", status="True", reason="Found", message="m", now=NOW)
    same = with_condition(
        first, "Resolved", status="True", reason="Found", message="m2", now=NOW + timedelta(hours=1)
    )
    flipped = with_condition(
        same, "Resolved", status="False", reason="NotFound", message="x", now=NOW + timedelta(hours=2)
    )
    assert first[0].last_transition_time == same[0].last_transition_time == NOW_TEXT
    assert same[0].message == "m2"
    assert flipped[0].last_transition_time == "2026-11-29T14:00:00Z"
    assert (
        with_condition(
            [Condition(type="Other", status="True", reason="R", last_transition_time=NOW_TEXT)],
            "Resolved",
            status="True",
            reason="Found",
            message="",
            now=NOW,
        )[0].type
        == "Other"
    )


def test_invalid_resource_id_raises_only_from_the_low_level_parser() -> None:
    """identity_resource_key is the one place that raises; the decisions above turn it into problems."""
    with pytest.raises(InvalidResourceIdError):
        identity_resource_key(identity("id", resource="bad").spec)
    assert identity_resource_key(identity("sp", identity_type=1).spec) == ""


def test_embedded_copies_in_desired_objects_do_not_alias_their_sources() -> None:
    source = identity("id")
    (desired,) = desired_for([pod("p")], [binding("b", "id", "app")], [source])
    resource = desired.to_resource()
    assert isinstance(resource.spec.azure_identity_ref, EmbeddedAzureIdentity)
    assert isinstance(resource.spec.azure_binding_ref, EmbeddedAzureIdentityBinding)
    resource.spec.azure_identity_ref.spec.client_id = "changed"
    assert source.spec.client_id == "id-client"
    assert AssignmentKey("default", "p", "default", "id") == desired.key


def test_node_wait_backs_off_and_is_bounded() -> None:
    """A pod on a missing node is retried on a doubling backoff; passes woken early count nothing;
    after the allowed attempts its wait is exhausted (its object is collected)."""
    first, cap = timedelta(seconds=2), timedelta(seconds=8)
    wait = node_wait_step(None, NOW, first, cap)
    assert (wait.attempts, wait.next_at) == (1, NOW + timedelta(seconds=2))
    assert node_wait_step(wait, NOW + timedelta(seconds=1), first, cap) == wait, "early pass counts nothing"
    moments = [2, 6, 14, 22]
    for moment in moments:
        wait = node_wait_step(wait, NOW + timedelta(seconds=moment), first, cap)
    assert wait.attempts == 5
    assert wait.next_at == NOW + timedelta(seconds=30), "capped at 8 s"
    assert not wait.exhausted(5)
    assert wait.exhausted(4)
    assert next_wait_in([wait], NOW + timedelta(seconds=22), 5) == 8.0
    assert next_wait_in([wait], NOW, 4) is None
