"""The NodeImage status lists and the UpToDate, Progressing and Degraded conditions, worded for
a human (pure). Neighbours: ``grouping`` (the groups reported), ``scale_out`` (blockers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodewright.api.meta import ObjectReference
from nodewright.api.nodewright.v1alpha1 import (
    CONDITION_DEGRADED,
    CONDITION_PROGRESSING,
    CONDITION_UP_TO_DATE,
    NodeImageStatus,
    PendingNode,
    PendingNodeGoal,
)
from nodewright.controllers.node_image.grouping import ClusterNode, NodeGroups, rollout_in_progress
from nodewright.controllers.node_image.pairing import ReplacementStep
from nodewright.controllers.node_image.scale_out import BLOCKING_PROBLEMS, ScaleOutBlocker, ScaleOutPlan

__all__ = [
    "ConditionState",
    "degraded_to_report",
    "node_image_status",
    "rollout_conditions",
]

# ---- status and conditions ----------------------------------------------------------------------


def _references(nodes: Iterable[ClusterNode]) -> list[ObjectReference]:
    return [node.reference() for node in sorted(nodes, key=lambda n: n.name)]


def node_image_status(
    groups: NodeGroups,
    pending_nodes: Iterable[PendingNode],
    *,
    budget: int,
    observed_generation: int,
) -> NodeImageStatus:
    """The NodeImage status lists (sorted by name, so an unchanged rollout writes an unchanged
    status), budget and counts; conditions are set by the caller from ``rollout_conditions``."""
    pending = sorted(pending_nodes, key=lambda p: p.name)
    total = len(groups.all_nodes())
    return NodeImageStatus(
        outdated=_references(groups.outdated),
        up_to_date=_references(groups.up_to_date),
        donors=_references(groups.donors),
        heirs=_references(groups.heirs),
        mints=_references(mint.node for mint in groups.mints),
        pending=[
            ObjectReference(
                api_version=p.API_VERSION, kind=p.KIND, name=p.name, uid=str(p.metadata.get("uid", ""))
            )
            for p in pending
        ],
        obsolete=_references(groups.obsolete),
        invalid=_references(groups.invalid),
        awaiting_annotation=_references(groups.awaiting_annotation),
        budget=budget,
        total_nodes=total,
        up_to_date_nodes=len(groups.up_to_date) + len(groups.heirs) + len(groups.mints),
        observed_generation=observed_generation,
    )


@dataclass(frozen=True)
class ConditionState:
    """A condition's type, status, reason and message; the caller stamps times and generation."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


_STEP_ORDER = [
    ReplacementStep.DRAIN,
    ReplacementStep.CORDON,
    ReplacementStep.WAIT_FOR_HEIR_NETWORK,
    ReplacementStep.WAIT_FOR_HEIR_IDENTITIES,
    ReplacementStep.WAIT_FOR_HEIR_READY,
    ReplacementStep.COPY_LABELS,
    ReplacementStep.REMOVE,
    ReplacementStep.WAIT_FOR_EVICTED_PODS,
]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def rollout_conditions(
    groups: NodeGroups,
    pending_nodes: Sequence[PendingNode],
    *,
    image: str,
    image_error: str | None = None,
    steps: Iterable[ReplacementStep] = (),
    scale_out: ScaleOutPlan | None = None,
    stuck_drains: Sequence[str] = (),
    stuck_heir_networks: Sequence[str] = (),
) -> list[ConditionState]:
    """UpToDate, Progressing and Degraded for the NodeImage, worded for a human.

    ``steps`` are the current steps of the replacements and removals under way; Progressing's
    reason is the most telling of them (Draining before Cordoning before WaitingForHeirReady ...),
    else JoiningNodes, LeavingNodes, CreatingNodes, a wait (ScalingGroupImageNotApplied,
    AutoscalerRunning, WaitingForControlPlane), WaitingForBudget; Blocked when nothing can move.
    Degraded names the first problem needing a human: InvalidImageReference, a scale-out blocker
    in ``BLOCKING_PROBLEMS``, DrainStuck, HeirSubnetFull (heirs whose IP pool is short while their
    subnet is full: the wait cannot end by itself), InvalidNodes.
    """
    if image_error is not None:
        return [
            ConditionState(CONDITION_UP_TO_DATE, "Unknown", "InvalidImageReference", image_error),
            ConditionState(CONDITION_PROGRESSING, "False", "InvalidImageReference", "Nothing is replaced"),
            ConditionState(CONDITION_DEGRADED, "True", "InvalidImageReference", image_error),
        ]
    blockers = scale_out.blockers if scale_out is not None else []
    total = len(groups.all_nodes())
    if not rollout_in_progress(groups, pending_nodes):
        conditions = [
            ConditionState(
                CONDITION_UP_TO_DATE, "True", "AllNodesUpToDate", f"All {_plural(total, 'node')} run {image}"
            ),
            ConditionState(CONDITION_PROGRESSING, "False", "RolloutComplete", "Nothing to replace"),
        ]
    else:
        joins = [p for p in pending_nodes if p.spec.goal is PendingNodeGoal.JOIN]
        leaves = [p for p in pending_nodes if p.spec.goal is PendingNodeGoal.LEAVE]
        conditions = [
            _outdated_condition(groups, joins, leaves, image),
            _progressing_condition(groups, joins, leaves, steps, scale_out),
        ]
    conditions.append(_degraded_condition(groups, blockers, stuck_drains, stuck_heir_networks))
    return conditions


def _outdated_condition(
    groups: NodeGroups, joins: Sequence[PendingNode], leaves: Sequence[PendingNode], image: str
) -> ConditionState:
    """UpToDate False while a rollout runs: how many nodes run the image, and what the rest do."""
    total = len(groups.all_nodes())
    current = len(groups.up_to_date) + len(groups.heirs) + len(groups.mints)
    details = [
        text
        for count, text in (
            (len(groups.outdated), f"{len(groups.outdated)} outdated"),
            (len(groups.donors), f"{len(groups.donors)} being replaced"),
            (len(joins), f"{len(joins)} joining"),
            (len(leaves), f"{len(leaves)} leaving"),
            (len(groups.obsolete), f"{len(groups.obsolete)} obsolete"),
            (len(groups.awaiting_annotation), f"{len(groups.awaiting_annotation)} awaiting annotation"),
        )
        if count
    ]
    return ConditionState(
        CONDITION_UP_TO_DATE,
        "False",
        "NodesOutdated",
        f"{current} of {_plural(total, 'node')} run {image}; " + ", ".join(details),
    )


def _progressing_condition(
    groups: NodeGroups,
    joins: Sequence[PendingNode],
    leaves: Sequence[PendingNode],
    steps: Iterable[ReplacementStep],
    scale_out: ScaleOutPlan | None,
) -> ConditionState:
    """Progressing while a rollout runs: the most telling step or wait (see ``rollout_conditions``)."""
    blockers = scale_out.blockers if scale_out is not None else []
    waits = [b for b in blockers if b.reason not in BLOCKING_PROBLEMS]
    step_set = set(steps)
    step = next((s for s in _STEP_ORDER if s in step_set), None)
    created = scale_out.total if scale_out is not None else 0
    if step is not None:
        reason, message = step.value, _step_message(step_set)
    elif joins:
        reason, message = "JoiningNodes", f"Waiting for {_plural(len(joins), 'new node')} to join"
    elif leaves:
        reason, message = "LeavingNodes", f"Waiting for {_plural(len(leaves), 'machine')} to be deleted"
    elif created:
        reason, message = "CreatingNodes", f"Creating {_plural(created, 'node')}"
    elif waits:
        reason, message = waits[0].reason, "; ".join(dict.fromkeys(b.message for b in waits))
    elif groups.outdated and not blockers:
        reason, message = "WaitingForBudget", "No budget for new nodes yet"
    elif groups.awaiting_annotation:
        reason, message = "AnnotatingNodes", "Reading nodes' scaling groups and images from the cloud"
    else:
        reason, message = "Blocked", "; ".join(b.message for b in blockers) or "Nothing can move"
    return ConditionState(CONDITION_PROGRESSING, "False" if reason == "Blocked" else "True", reason, message)


def _degraded_condition(
    groups: NodeGroups,
    blockers: Sequence[ScaleOutBlocker],
    stuck_drains: Sequence[str],
    stuck_heir_networks: Sequence[str] = (),
) -> ConditionState:
    """Degraded: the first problem needing a human, with every problem in the message."""
    problems: list[tuple[str, str]] = []
    for blocker in blockers:
        if blocker.reason in BLOCKING_PROBLEMS:
            problems.append(
                (blocker.reason, f"{blocker.message} ({_plural(blocker.outdated, 'outdated node')})")
            )
    if stuck_drains:
        problems.append(("DrainStuck", "Drain not finished in time on " + ", ".join(sorted(stuck_drains))))
    if stuck_heir_networks:
        names = ", ".join(sorted(stuck_heir_networks))
        problems.append(("HeirSubnetFull", f"IP pools of heirs short while their subnet is full: {names}"))
    if groups.invalid:
        names = ", ".join(node.name for node in groups.invalid)
        problems.append(("InvalidNodes", f"Nodes without providerID or unknown to the cloud: {names}"))
    if problems:
        return ConditionState(CONDITION_DEGRADED, "True", problems[0][0], "; ".join(m for _, m in problems))
    return ConditionState(CONDITION_DEGRADED, "False", "AsExpected", "Nothing needs attention")


def _step_message(steps: set[ReplacementStep]) -> str:
    words = {
        ReplacementStep.DRAIN: "draining",
        ReplacementStep.CORDON: "cordoning",
        ReplacementStep.WAIT_FOR_HEIR_READY: "waiting for the new node to be Ready",
        ReplacementStep.WAIT_FOR_HEIR_NETWORK: "waiting for the new node's IP pool",
        ReplacementStep.WAIT_FOR_HEIR_IDENTITIES: "waiting for the new node's identities",
        ReplacementStep.COPY_LABELS: "copying labels",
        ReplacementStep.REMOVE: "removing the old node",
        ReplacementStep.WAIT_FOR_EVICTED_PODS: "waiting for the evicted pods to be Ready elsewhere",
    }
    return "Replacing nodes: " + ", ".join(words[s] for s in _STEP_ORDER if s in steps)


def degraded_to_report(
    before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], reported: tuple[str, str] | None
) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """The Degraded condition to report in a Warning Event (None: nothing new), and the problem
    to remember as reported. ``before`` is the status the write was decided from, which may be a
    cache that does not show this process's last write yet; ``reported`` is what this process
    reported last, so a lasting problem gets one Event however stale the cache."""
    degraded = next((c for c in after if c.get("type") == CONDITION_DEGRADED), None)
    if degraded is None or degraded.get("status") != "True":
        return None, None
    problem = (str(degraded.get("reason")), str(degraded.get("message")))
    if reported == problem:
        return None, problem
    previous = next((c for c in before if c.get("type") == CONDITION_DEGRADED), {})
    changed = any(previous.get(key) != degraded.get(key) for key in ("status", "reason", "message"))
    return (degraded if changed else None), problem
