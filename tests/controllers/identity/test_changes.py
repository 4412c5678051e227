"""Table tests of how AzureAssignedIdentity objects must change (create, update, keep, release,
wait for a name), matched by what they describe."""

from __future__ import annotations

import pytest

from nodewright.api.aadpodidentity.v1 import (
    AzureAssignedIdentity,
    AzureAssignedIdentitySpec,
)
from nodewright.controllers.identity.decisions import (
    AssignmentKey,
    DesiredAssignment,
    assignment_changes,
    desired_assignments,
    match_pods,
)
from tests.controllers.identity.decision_helpers import (
    DEMO,
    binding,
    desired_for,
    existing,
    identity,
    mic_written,
    pod,
)

# --- AzureAssignedIdentity changes ------------------------------------------------------------------


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
