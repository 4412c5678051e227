"""Table tests of bad-input validation and of identity info (clientId lookups, conditions)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodewright.api.aadpodidentity.v1 import (
    CONDITION_CLIENT_ID_CURRENT,
    CONDITION_IDENTITY_FOUND,
    CONDITION_RESOLVED,
    CONDITION_SELECTOR_VALID,
    AzureIdentity,
    AzureIdentityBinding,
    AzureIdentityStatus,
)
from nodewright.api.meta import Condition
from nodewright.controllers.identity.binding import binding_conditions
from nodewright.controllers.identity.conditions import (
    with_condition,
)
from nodewright.controllers.identity.decisions import (
    NodeInfo,
    PodInfo,
    Problem,
)
from nodewright.controllers.identity.identity_info_rules import (
    IdentityLookup,
    identity_info_due,
    identity_info_status,
    next_recheck_time,
    truncate_retrieval_error,
)
from nodewright.controllers.identity.validation import (
    validate,
)
from tests.controllers.identity.decision_helpers import (
    NOW,
    NOW_TEXT,
    binding,
    identity,
    pod,
    scale_set_node,
)

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
            [binding("b", "id", "a" * 300)],
            [],
            None,
            [("AzureIdentityBinding", "b", "InvalidSelector")],
            id="selector-of-300-characters",
        ),
        pytest.param(
            [identity("id")],
            [binding("b", "id", "wéb")],
            [],
            None,
            [("AzureIdentityBinding", "b", "InvalidSelector")],
            id="non-ascii-selector",
        ),
        pytest.param(
            [],
            [binding("b", "missing", "app ")],
            [],
            None,
            [
                ("AzureIdentityBinding", "b", "IdentityNotFound"),
                ("AzureIdentityBinding", "b", "InvalidSelector"),
            ],
            id="missing-identity-and-selector-with-space",
        ),
        pytest.param(
            [identity("id")],
            [binding("b", "id", "a" * 63), binding("c", "id", "")],
            [],
            None,
            [],
            id="longest-and-empty-selectors-are-label-values",
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


def test_an_invalid_selector_gets_its_own_condition_beside_identity_found() -> None:
    """A binding whose selector no pod can carry says so in SelectorValid, with the length and
    the rule (the selector cut short), and IdentityFound still speaks of the identity alone."""
    conditions = binding_conditions(binding("b", "id", "a" * 300, "team"), [identity("id", namespace="team")])
    assert [(c.type, c.status, c.reason) for c in conditions] == [
        (CONDITION_IDENTITY_FOUND, "True", "Found"),
        (CONDITION_SELECTOR_VALID, "False", "InvalidSelector"),
    ]
    message = conditions[1].message
    assert "300 characters long" in message
    assert "aadpodidbinding" in message
    assert len(message) < 250
    valid = binding_conditions(binding("b", "id", "app", "team"), [identity("id", namespace="team")])
    assert [(c.type, c.status) for c in valid] == [
        (CONDITION_IDENTITY_FOUND, "True"),
        (CONDITION_SELECTOR_VALID, "True"),
    ]


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
