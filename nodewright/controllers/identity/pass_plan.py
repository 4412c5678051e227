"""The pure steps of an identity pass: ``plan_update`` (what to add to and remove from a target,
given what it holds and ARM's recent refusals), ``plan_records`` and ``plan_unresolved_records``
(each assignment's outcome and the releases to finish) and ``next_pass`` (when the target's pass
comes back). The rules themselves are ``targets``'; this module only puts a pass's values
(``pass_view``) through them. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from nodewright.cloud.models import ResourceIdentities
from nodewright.controllers.identity.decisions import (
    AssignmentChanges,
    AssignmentPolicy,
    NodeInfo,
    kept_and_new,
)
from nodewright.controllers.identity.pass_view import (
    CloudOutcome,
    CloudPlan,
    OutcomeWrite,
    RecordPlan,
    ReleaseWrite,
    TargetView,
)
from nodewright.controllers.identity.targets import (
    AssignmentRecord,
    Rejection,
    assignment_outcome,
    drift_repairs,
    identities_to_attempt,
    identity_diff,
    keeps_confirmed,
    next_attempt_in,
    owned_by_nodewright,
    target_failure,
    update_throttled,
)
from nodewright.runtime import Result

__all__ = ["MIN_REQUEUE", "next_pass", "plan_records", "plan_unresolved_records", "plan_update"]

MIN_REQUEUE = 0.05
"""Seconds: the soonest a pass comes back for a retry that is already due."""


def plan_update(
    view: TargetView,
    current: ResourceIdentities,
    rejections: Mapping[str, Rejection],
    now: datetime,
    policy: AssignmentPolicy,
    *,
    target_gone: bool,
) -> CloudPlan:
    """What to add (held back by ARM's refusals) and remove, given ``current``; nothing when the
    target is gone."""
    released = [record for record in view.released.values() if record is not None]
    diff = identity_diff(current.user_assigned, view.needs, released, policy)
    attempt, held = identities_to_attempt(diff.to_add, rejections, now)
    if target_gone:
        attempt = frozenset()
    return CloudPlan(
        current=current,
        add=attempt,
        remove=frozenset() if target_gone else diff.to_remove,
        held=held,
        rejections=rejections,
        retained=diff.retained,
        repairs=drift_repairs(current.user_assigned, view.records_here, view.key) & attempt,
        target_gone=target_gone,
    )


def plan_records(view: TargetView, cloud: CloudOutcome) -> RecordPlan:
    """Each kept or new object's outcome, and the released objects. After a 429 an object with
    no status yet keeps its recorded intent, which the retry will carry out (no "failed" to
    rewrite): its binding hears of the failure once, with the other waiting assignments."""
    key, throttled = view.key, update_throttled(cloud.failure)
    outcomes: list[OutcomeWrite] = []
    waiting = []
    for assigned_object, wanted in kept_and_new(view.changes):
        if throttled and (assigned_object is None or not assigned_object.status.status):
            waiting.append(wanted)
            continue
        own = AssignmentRecord.of(assigned_object, node_target=key) if assigned_object else None
        if keeps_confirmed(own, key, cloud.landed, cloud.target_gone):
            continue
        outcome = assignment_outcome(
            wanted,
            view.target,
            None if cloud.target_gone else cloud.seen,
            attempted=cloud.attempt,
            owned=owned_by_nodewright(view.records_here, key, wanted.resource_key)
            or (own is not None and own.target == key and own.added_by_nodewright),
            rejections=cloud.rejections,
            held=cloud.held,
            failure=target_failure(cloud.failure),
        )
        outcomes.append(OutcomeWrite(wanted, assigned_object, outcome))
    return RecordPlan(
        target=key,
        outcomes=outcomes,
        releases=[ReleaseWrite(r, view.released[(r.namespace, r.name)]) for r in view.changes.release],
        waiting=waiting,
        failure=target_failure(cloud.failure),
        landed=cloud.landed,
        retained=cloud.retained,
        target_gone=cloud.target_gone,
    )


def plan_unresolved_records(changes: AssignmentChanges, node_infos: Mapping[str, NodeInfo]) -> RecordPlan:
    """Pods with no Azure target: each object says why nothing can be assigned (its node is
    missing, or names no VM or scale set); released objects recorded nothing and just go."""
    return RecordPlan(
        target="",
        outcomes=[
            OutcomeWrite(
                wanted,
                assigned_object,
                assignment_outcome(wanted, None, None, node_exists=wanted.node_name in node_infos),
            )
            for assigned_object, wanted in kept_and_new(changes)
        ],
        releases=[ReleaseWrite(released, None) for released in changes.release],
    )


def next_pass(view: TargetView, cloud: CloudOutcome, now: datetime, repair_interval: float) -> Result:
    """Come back for drift repair after ``repair_interval``, sooner for an identity ARM refused
    when its retry is due; a target without nodes is not revisited."""
    if not view.has_nodes:
        return Result()
    waiting = (cloud.attempt | cloud.held) - (cloud.landed or frozenset())
    retry = next_attempt_in(waiting, cloud.rejections, now)
    if retry is None:
        return Result(requeue_after=repair_interval)
    # requeue_after 0 would mean "no requeue": a due retry comes back after a moment instead
    return Result(requeue_after=max(MIN_REQUEUE, min(repair_interval, retry)))
