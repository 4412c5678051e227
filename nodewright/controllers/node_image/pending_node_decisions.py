"""What the PendingNode reconciler does with one record, from the cloud's view of its machine
(pure). Neighbour: ``pending_node`` (the reconciler that applies the decision).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodewright.api.nodewright.v1alpha1 import (
    CloudNodeState,
    PendingNode,
    PendingNodeGoal,
)
from nodewright.cloud.models import NodeState
from nodewright.controllers.node_image.grouping import RolloutTimeouts

__all__ = [
    "PendingNodeAction",
    "PendingNodeDecision",
    "cloud_state_of",
    "decide_pending_node",
]

# ---- pending nodes ------------------------------------------------------------------------------


def cloud_state_of(state: NodeState) -> CloudNodeState:
    """The cloud layer's node state as ``PendingNode.status.cspState``."""
    return CloudNodeState(state.value)


class PendingNodeAction(enum.Enum):
    WAIT = "Wait"
    """Nothing to do but look again later (or the goal is reached and the record is kept)."""
    DELETE_RECORD = "DeleteRecord"
    """The PendingNode is done: a leave reached Terminated, or a join's machine is gone."""
    GIVE_UP_JOIN = "GiveUpJoin"
    """Delete the machine and turn the record into a Leave with ``deadline``."""
    DELETE_MACHINE = "DeleteMachine"
    """(Re)request the machine's deletion; a leave past its deadline also gets a new ``deadline``."""


@dataclass(frozen=True)
class PendingNodeDecision:
    """The status to record and what to do. ``reason`` is for logs and Events."""

    cloud_state: CloudNodeState
    reached_goal: bool
    action: PendingNodeAction
    reason: str
    deadline: datetime | None = None
    requeue_after: timedelta | None = None


_ALIVE = {NodeState.CREATING, NodeState.READY, NodeState.STOPPED, NodeState.FAILED}


def decide_pending_node(
    pending_node: PendingNode,
    cloud_state: NodeState,
    *,
    node_exists: bool,
    now: datetime,
    timeouts: RolloutTimeouts,
    node_served_as_heir: bool = False,
) -> PendingNodeDecision:
    """What the PendingNode reconciler does with one record.

    Join: reached when the machine is Ready at the cloud and its Node exists (the record is then
    kept for the NodeImage reconciler to pair). A machine that Failed, or a join past its
    deadline, is given up: the machine is deleted and the record becomes a Leave due
    ``timeouts.leave`` from now. A machine already gone ends the record. A Join naming a node
    that already served as a heir (``node_served_as_heir``) is stale: nothing is done to its
    machine or Node, whatever its deadline (the NodeImage reconciler reports and deletes it).
    Leave: reached when the machine is Terminated, which ends the record. While the machine is
    still alive its deletion is requested (idempotent, so a restart between creating the record
    and deleting the machine loses nothing); past the deadline the deletion is requested again
    with a new deadline.
    """
    state = cloud_state_of(cloud_state)
    deadline = pending_node.spec.deadline_time
    overdue = deadline is not None and now >= deadline
    wait = timeouts.poll if deadline is None or overdue else min(timeouts.poll, deadline - now)
    if pending_node.spec.goal is PendingNodeGoal.JOIN:
        if node_served_as_heir:
            return PendingNodeDecision(
                state, False, PendingNodeAction.WAIT, "StaleJoin", requeue_after=timeouts.poll
            )
        if cloud_state is NodeState.TERMINATED:
            return PendingNodeDecision(state, False, PendingNodeAction.DELETE_RECORD, "MachineGone")
        if cloud_state is NodeState.READY and node_exists:
            return PendingNodeDecision(state, True, PendingNodeAction.WAIT, "Joined")
        if cloud_state is NodeState.FAILED:
            return PendingNodeDecision(
                state, False, PendingNodeAction.GIVE_UP_JOIN, "MachineFailed", deadline=now + timeouts.leave
            )
        if overdue:
            return PendingNodeDecision(
                state, False, PendingNodeAction.GIVE_UP_JOIN, "JoinTimedOut", deadline=now + timeouts.leave
            )
        return PendingNodeDecision(state, False, PendingNodeAction.WAIT, "Joining", requeue_after=wait)
    if cloud_state is NodeState.TERMINATED:
        return PendingNodeDecision(state, True, PendingNodeAction.DELETE_RECORD, "Left")
    if overdue:
        return PendingNodeDecision(
            state,
            False,
            PendingNodeAction.DELETE_MACHINE,
            "LeaveTimedOut",
            deadline=now + timeouts.leave,
            requeue_after=timeouts.leave,
        )
    if cloud_state in _ALIVE:
        return PendingNodeDecision(
            state, False, PendingNodeAction.DELETE_MACHINE, "DeletingMachine", requeue_after=wait
        )
    return PendingNodeDecision(state, False, PendingNodeAction.WAIT, "Leaving", requeue_after=wait)
