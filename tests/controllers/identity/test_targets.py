"""Table tests of the target rules: targets of nodes, the identity diff and its ownership rules,
refused identities and their backoff, drift repair, outcomes, and pods waiting for a node."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    IdentityType,
)
from nodewright.cloud.resource_ids import ScaleSetId, VirtualMachineId
from nodewright.controllers.identity.decisions import (
    AssignmentPolicy,
    DesiredAssignment,
    NodeInfo,
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
    keeps_confirmed,
    needs_by_target,
    next_attempt_in,
    node_targets,
    note_rejection,
    owned_by_nodewright,
    retry_delay,
    target_of_provider_id,
)
from tests.controllers.identity.decision_helpers import (
    DEMO,
    NOW,
    POOL,
    SUBSCRIPTION,
    binding,
    desired_for,
    existing,
    identity,
    key,
    mic_written,
    need,
    pod,
    record,
    resource_id,
    scale_set_node,
    vm_node,
)

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


def test_an_assigned_object_keeps_its_status_while_the_target_is_unknown() -> None:
    """A failed update whose re-read was refused (landed None) must not write Created over an
    object Assigned on that target: its release would then keep the identity there for good
    ("never confirmed Assigned"), as bench.storm_manager found after a 429 storm."""
    assigned = record("web")
    assert keeps_confirmed(assigned, POOL.key, None, target_gone=False)
    assert not keeps_confirmed(assigned, POOL.key, frozenset(), target_gone=False), "known: decide afresh"
    assert not keeps_confirmed(assigned, POOL.key, None, target_gone=True), "a gone target is decided"
    assert not keeps_confirmed(record("web", status="Created"), POOL.key, None, target_gone=False)
    assert not keeps_confirmed(assigned, "/subscriptions/s/other", None, target_gone=False)
    assert not keeps_confirmed(None, POOL.key, None, target_gone=False)
    released = identity_diff([resource_id("web")], [], [record("web", status="Created")], AssignmentPolicy())
    assert released.retained == {key("web"): "never confirmed Assigned"}, "why the status must be kept"
