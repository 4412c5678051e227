"""The pure steps of an identity pass (``pass_plan``): what a pass sends to its target, the
records it writes afterwards, and when it comes back."""

from __future__ import annotations

from datetime import timedelta

from nodewright.cloud.errors import ThrottledError
from nodewright.cloud.models import ResourceIdentities
from nodewright.controllers.identity.decisions import AssignmentPolicy, NodeInfo, assignment_changes
from nodewright.controllers.identity.pass_plan import (
    MIN_REQUEUE,
    next_pass,
    plan_records,
    plan_unresolved_records,
    plan_update,
)
from nodewright.controllers.identity.pass_view import CloudOutcome, TargetView
from nodewright.controllers.identity.targets import TARGET_UPDATE_FAILED, note_rejection
from tests.controllers.identity.decision_helpers import DEMO, NOW, POOL, existing, key, record


def view_of(*, has_nodes: bool = True, assigned: bool = False, recorded: bool = False) -> TargetView:
    """A pass over the pool whose one pod needs ``demo`` (its object new, or Assigned there)."""
    here = [existing(DEMO)] if assigned else []
    return TargetView(
        key=POOL.key,
        target=POOL,
        has_nodes=has_nodes,
        desired=[DEMO],
        changes=assignment_changes([DEMO], here, names_in_use=set()),
        records_here=[record("demo")] if recorded else [],
        released={},
    )


def holding(*names: str) -> ResourceIdentities:
    held = frozenset(key(name) for name in names)
    return ResourceIdentities("UserAssigned" if held else "None", False, held)


def test_plan_update_adds_what_is_missing_and_repairs_drift() -> None:
    """The needed identity is added; where an object records it Assigned there, the addition is
    also a drift repair (someone removed it out of band)."""
    plan = plan_update(view_of(), holding("other"), {}, NOW, AssignmentPolicy(), target_gone=False)
    assert plan.add == {key("demo")}
    assert plan.repairs == frozenset()
    repaired = plan_update(
        view_of(recorded=True), holding("other"), {}, NOW, AssignmentPolicy(), target_gone=False
    )
    assert repaired.repairs == {key("demo")}
    assert plan.remove == frozenset()
    assert plan.sends
    assert plan.outcome().attempt == {key("demo")}
    assert plan.outcome().landed == frozenset({key("other")})


def test_plan_update_holds_back_a_refused_identity_until_its_retry() -> None:
    """ARM refused the identity a moment ago: nothing is sent until its retry is due."""
    refused = note_rejection(
        None, "LinkedAuthorizationFailed", "denied", NOW, first=timedelta(seconds=5), cap=timedelta(minutes=5)
    )
    rejections = {key("demo"): refused}
    plan = plan_update(view_of(), holding(), rejections, NOW, AssignmentPolicy(), target_gone=False)
    assert (plan.add, plan.held, plan.sends) == (frozenset(), frozenset({key("demo")}), False)
    later = plan_update(
        view_of(), holding(), rejections, NOW + timedelta(seconds=6), AssignmentPolicy(), target_gone=False
    )
    assert later.add == {key("demo")}


def test_plan_update_sends_nothing_to_a_target_that_is_gone() -> None:
    plan = plan_update(view_of(), holding(), {}, NOW, AssignmentPolicy(), target_gone=True)
    assert (plan.add, plan.remove, plan.sends, plan.target_gone) == (frozenset(), frozenset(), False, True)


def test_plan_records_writes_assigned_once_the_identity_landed() -> None:
    cloud = CloudOutcome(landed=frozenset({key("demo")}), attempt=frozenset({key("demo")}))
    records = plan_records(view_of(), cloud)
    assert [(w.wanted.name, w.outcome.assigned) for w in records.outcomes] == [(DEMO.name, True)]
    assert records.waiting == []
    assert records.failure == ""


def test_plan_records_leaves_a_new_object_to_the_retry_after_a_429() -> None:
    """A throttled update writes no "failed" status over a new object's intent: the binding hears
    of it once, with the failure's text."""
    error = ThrottledError("throttled", retry_after=2.0)
    cloud = CloudOutcome(landed=None, attempt=frozenset({key("demo")}), failure=error)
    records = plan_records(view_of(), cloud)
    assert records.outcomes == []
    assert records.waiting == [DEMO]
    assert records.failure.startswith("updating the target failed")


def test_plan_records_keeps_an_assigned_status_while_the_target_is_unknown() -> None:
    """A failure that left what landed unknown rewrites nothing on an object Assigned there."""
    cloud = CloudOutcome(landed=None, failure=RuntimeError("connection reset"))
    assert plan_records(view_of(assigned=True), cloud).outcomes == []
    known = plan_records(view_of(assigned=True), CloudOutcome(landed=frozenset(), failure=RuntimeError("x")))
    assert [w.outcome.reason for w in known.outcomes] == [TARGET_UPDATE_FAILED]


def test_plan_unresolved_records_say_why_nothing_is_assigned() -> None:
    """A pod whose node is missing, and one whose node names no Azure target: both objects are
    Created with the reason, nothing is released."""
    changes = assignment_changes([DEMO], [], names_in_use=set())
    missing = plan_unresolved_records(changes, {})
    there = plan_unresolved_records(changes, {DEMO.node_name: NodeInfo(DEMO.node_name, "")})
    assert [w.outcome.assigned for w in missing.outcomes + there.outcomes] == [False, False]
    assert missing.outcomes[0].outcome.reason != there.outcomes[0].outcome.reason
    assert missing.releases == []
    assert missing.target == ""


def test_next_pass_comes_back_for_repair_or_a_due_retry() -> None:
    refused = note_rejection(
        None, "LinkedAuthorizationFailed", "denied", NOW, first=timedelta(seconds=5), cap=timedelta(minutes=5)
    )
    held = CloudOutcome(landed=frozenset(), held=frozenset({key("demo")}), rejections={key("demo"): refused})
    assert next_pass(view_of(), held, NOW, 60.0).requeue_after == 5.0
    assert next_pass(view_of(), held, NOW + timedelta(seconds=9), 60.0).requeue_after == MIN_REQUEUE
    assert next_pass(view_of(), CloudOutcome(), NOW, 60.0).requeue_after == 60.0
    assert next_pass(view_of(has_nodes=False), held, NOW, 60.0).requeue_after is None
