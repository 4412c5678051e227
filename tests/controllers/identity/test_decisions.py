"""Table tests of the identity decisions: pods and nodes, matching, AzureAssignedIdentity names and
namespaces (pure functions, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    AzureIdentity,
    AzureIdentityBinding,
    EmbeddedAzureIdentity,
    EmbeddedAzureIdentityBinding,
)
from nodewright.cloud.compute import IdentityUpdateIncompleteError
from nodewright.cloud.errors import CloudError, LimitExceededError
from nodewright.cloud.resource_ids import InvalidResourceIdError
from nodewright.controllers.identity.decisions import (
    MAX_NAME_LENGTH,
    AssignmentKey,
    NodeInfo,
    PodInfo,
    assigned_identity_name,
    assigned_identity_namespace,
    identity_resource_key,
    match_pods,
)
from nodewright.controllers.identity.targets import target_failure
from tests.controllers.identity.decision_helpers import (
    NOW_TEXT,
    binding,
    desired_for,
    identity,
    pod,
    resource_id,
)

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


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        pytest.param(
            LimitExceededError(
                "At most 100 identities", status_code=400, code="TooManyUserAssignedIdentities"
            ),
            "updating the target failed (TooManyUserAssignedIdentities: At most 100 identities); "
            "retried with backoff",
            id="terminal-names-arm-message",
        ),
        pytest.param(
            CloudError("Internal error 1234", status_code=500, code="InternalServerError"),
            "updating the target failed (InternalServerError); retried with backoff",
            id="transient-names-code-only",
        ),
    ],
)
def test_target_failure_names_arm_message_for_terminal_answers(cause: CloudError, expected: str) -> None:
    """A terminal answer (only a change elsewhere fixes it) names ARM's message in the condition,
    which says what to change; a transient one names the code only (its message varies)."""
    assert target_failure(IdentityUpdateIncompleteError(cause, None, ())) == expected
