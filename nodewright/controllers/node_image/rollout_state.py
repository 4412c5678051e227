"""Canary, soak, health gates and automatic rollback (pure): where a rollout stands and what it may
do next.

The state lives in the NodeImage's status (``rolloutState``, ``targetImage``, ``previousImage``,
``canaryPassed``, ``batchInFlight``, ``soakUntil``, ``failureReason``/``failureMessage``), so a
restart at any point resumes it. A new ``spec.image`` starts a rollout in ``Canary`` (``Rolling``
when ``spec.canary`` is 0), remembering the image most outdated nodes run as the rollback target.

- Canary: at most ``canary`` new machines per ScalingGroup are in flight; once they are all done,
  the rollout soaks.
- Soaking: no machine is created until ``soakDuration`` has passed and every user gate condition
  is True; then ``Rolling``. With a soak, later batches (as many machines as the surge allows) are
  each followed by a soak too, the last one included (the rollout is ``Complete`` only after it);
  without one they are pipelined within the surge.
- Health gates (``gate_failure``), checked while a rollout runs: a new-image node that was
  Ready and is not; a new-image node not Ready ``heirReadyTimeout`` after it registered; pods
  evicted from a donor not Running and Ready elsewhere ``evictedPodsReadyTimeout`` after the
  latest eviction (``evicted_pods``); a user gate condition set False. A failed gate turns the
  rollout into ``RollingBack``: the desired image becomes ``previousImage`` (the ScalingGroups
  put it back into the scale sets' models) and the new-image nodes are replaced by old-image
  ones with the same donor/heir safety; when that is done, ``RolledBack`` (which stays until
  ``spec.image`` changes). Without a previous image the rollout is ``Failed`` and stops. No I/O.
  Neighbours: ``node_image`` (reads the status and the nodes, writes what is decided),
  ``scaling_group`` (applies ``desired_image``).
- Complete only when the pool is whole: while nodes that could not be drained in time are left
  quarantined (``undrainableNodeBehavior: Cordon``), a rollout with nothing else to do is
  ``Quarantined`` (not running: autoscaling comes back), and ``Complete`` once they are gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from nodewright.api.meta import Condition
from nodewright.api.nodewright.v1alpha1 import (
    CONDITION_DEGRADED,
    CONDITION_PROGRESSING,
    CONFLICT,
    NodeImage,
    NodeImageStatus,
    RolloutState,
)
from nodewright.controllers.node_image.conditions import ConditionState
from nodewright.controllers.node_image.grouping import ClusterNode

__all__ = [
    "ACTIVE_STATES",
    "READY_SEEN_ANNOTATION",
    "GateFailure",
    "RolloutDecision",
    "RolloutMemory",
    "any_rollout_running",
    "decide_rollout",
    "desired_image_of",
    "gate_failure",
    "overlay_conditions",
    "user_gates_passed",
]

READY_SEEN_ANNOTATION = "nodewright.io/ready-seen"
"""On a node on the rollout's new image whose replacement is done (its donor gone): when it was
first seen Ready (RFC 3339). A node that carries it and is not Ready fails the health gate; a heir
still waiting for its donor may flap (its donor waits) until ``heirReadyTimeout``."""

ACTIVE_STATES = frozenset(
    {RolloutState.CANARY, RolloutState.SOAKING, RolloutState.ROLLING, RolloutState.ROLLING_BACK}
)
"""States in which a rollout runs (autoscaling stays off while any NodeImage is in one)."""


@dataclass(frozen=True)
class RolloutMemory:
    """The rollout's state as kept in the NodeImage status."""

    state: RolloutState | None = None
    target_image: str = ""
    previous_image: str = ""
    canary_passed: bool = False
    batch_in_flight: bool = False
    soak_until: datetime | None = None
    failure_reason: str = ""
    failure_message: str = ""

    @classmethod
    def from_status(cls, status: NodeImageStatus) -> RolloutMemory:
        try:
            state: RolloutState | None = RolloutState(status.rollout_state)
        except ValueError:
            state = None
        try:
            soak_until = datetime.fromisoformat(status.soak_until) if status.soak_until else None
        except ValueError:
            soak_until = None
        return cls(
            state=state,
            target_image=status.target_image,
            previous_image=status.previous_image,
            canary_passed=status.canary_passed,
            batch_in_flight=status.batch_in_flight,
            soak_until=soak_until,
            failure_reason=status.failure_reason,
            failure_message=status.failure_message,
        )

    def status_fields(self) -> dict[str, Any]:
        """The NodeImageStatus fields (Python names) that hold this memory."""
        return {
            "rollout_state": self.state.value if self.state is not None else "",
            "target_image": self.target_image,
            "previous_image": self.previous_image,
            "canary_passed": self.canary_passed,
            "batch_in_flight": self.batch_in_flight,
            "soak_until": self.soak_until.isoformat().replace("+00:00", "Z") if self.soak_until else "",
            "failure_reason": self.failure_reason,
            "failure_message": self.failure_message,
        }


def _same(first: str, second: str) -> bool:
    return first.lower() == second.lower()


def desired_image_of(memory: RolloutMemory, spec_image: str) -> str:
    """The image nodes should run now: the previous image while a rollback of this spec image runs
    or is done, else the spec's."""
    rolling_back = memory.state in (RolloutState.ROLLING_BACK, RolloutState.ROLLED_BACK)
    if rolling_back and _same(memory.target_image, spec_image) and memory.previous_image:
        return memory.previous_image
    return spec_image


@dataclass(frozen=True)
class GateFailure:
    """A failed health gate: a condition reason and a message naming the nodes."""

    reason: str
    message: str


def user_gates_passed(conditions: Iterable[Condition], gate_conditions: Sequence[str]) -> bool:
    """Whether every user gate condition is present and True."""
    status = {c.type: c.status for c in conditions}
    return all(status.get(gate) == "True" for gate in gate_conditions)


def gate_failure(
    new_nodes: Iterable[ClusterNode],
    *,
    now: datetime,
    heir_ready_timeout: timedelta,
    conditions: Iterable[Condition] = (),
    gate_conditions: Sequence[str] = (),
    evicted_pods_overdue: Sequence[str] = (),
) -> GateFailure | None:
    """The first failed health gate among the nodes on the rollout's new image, if any;
    ``evicted_pods_overdue`` describes donors whose evicted pods are not back in time
    (``evicted_pods``)."""
    nodes = sorted(new_nodes, key=lambda n: n.name)
    went_down = [n.name for n in nodes if not n.ready and READY_SEEN_ANNOTATION in n.annotations]
    if went_down:
        return GateFailure("NodeNotReady", "New-image nodes went NotReady: " + ", ".join(went_down))
    never_ready = [
        n.name
        for n in nodes
        if not n.ready
        and READY_SEEN_ANNOTATION not in n.annotations
        and n.created is not None
        and now - n.created >= heir_ready_timeout
    ]
    if never_ready:
        return GateFailure(
            "HeirNeverReady",
            f"New-image nodes not Ready {heir_ready_timeout} after they registered: "
            + ", ".join(never_ready),
        )
    if evicted_pods_overdue:
        return GateFailure("EvictedPodsNotReady", "; ".join(evicted_pods_overdue))
    failed = sorted(c.type for c in conditions if c.type in gate_conditions and c.status == "False")
    if failed:
        return GateFailure("GateFailed", "Gate conditions False: " + ", ".join(failed))
    return None


@dataclass(frozen=True)
class RolloutDecision:
    """The next memory, what nodes should run, and what may happen now. ``canary_cap``: new
    machines in flight per ScalingGroup (``None``: only the surge limits them). ``started_rollback``:
    the rollout turned to RollingBack in this decision (an Event and the rollbacks metric)."""

    memory: RolloutMemory
    desired_image: str
    scale_out: bool = True
    canary_cap: int | None = None
    requeue_at: datetime | None = None
    started_rollback: bool = False


_ROLLBACK_STATES = (RolloutState.ROLLING_BACK, RolloutState.ROLLED_BACK)


def _most_common(images: Sequence[str]) -> str:
    """The image most of ``images`` name (the rollback target), or "" when there is none."""
    counts = Counter(image for image in images if image)
    return counts.most_common(1)[0][0] if counts else ""


def _start(spec: NodeImage, outdated_images: Sequence[str]) -> RolloutMemory:
    previous = _most_common(outdated_images)
    canary = spec.spec.canary > 0
    return RolloutMemory(
        state=RolloutState.CANARY if canary else RolloutState.ROLLING,
        target_image=spec.spec.image,
        previous_image=previous,
        canary_passed=not canary,
    )


def _fail(memory: RolloutMemory, failure: GateFailure) -> RolloutDecision:
    state = RolloutState.ROLLING_BACK if memory.previous_image else RolloutState.FAILED
    failed = replace(
        memory,
        state=state,
        batch_in_flight=False,
        soak_until=None,
        failure_reason=failure.reason,
        failure_message=failure.message,
    )
    return RolloutDecision(
        failed, memory.target_image, scale_out=False, started_rollback=state is RolloutState.ROLLING_BACK
    )


def decide_rollout(
    memory: RolloutMemory,
    node_image: NodeImage,
    *,
    outdated_images: Sequence[str],
    outdated_left: bool,
    in_flight: bool,
    failure: GateFailure | None,
    now: datetime,
    canary_placed: bool = False,
    quarantined: bool = False,
) -> RolloutDecision:
    """Where the rollout goes from ``memory`` (see the module docstring). ``outdated_images``: the
    images of the nodes not on the desired image (the rollback target of a new rollout);
    ``outdated_left``: some have no replacement yet; ``in_flight``: replacements are under way;
    ``canary_placed``: every scale set already has its canary machines on the new image;
    ``quarantined``: nodes left quarantined after a drain timed out remain."""
    spec_image = node_image.spec.image
    if memory.state is None or not _same(memory.target_image, spec_image):
        memory = _start(node_image, outdated_images)
    elif not memory.previous_image and not memory.canary_passed and memory.state not in _ROLLBACK_STATES:
        # started before any outdated node was seen (the NodeImage came first): the nodes its
        # canary replaces run the image to go back to
        memory = replace(memory, previous_image=_most_common(outdated_images))
    if memory.state in _ROLLBACK_STATES:
        done = not outdated_left and not in_flight
        state = RolloutState.ROLLED_BACK if done else memory.state
        return RolloutDecision(replace(memory, state=state), memory.previous_image)
    if memory.state is RolloutState.FAILED:
        return RolloutDecision(memory, spec_image, scale_out=False)
    if failure is not None:
        return _fail(memory, failure)
    settled = not memory.batch_in_flight and memory.state is not RolloutState.SOAKING
    if not outdated_left and not in_flight and settled:
        return RolloutDecision(_complete(memory, quarantined), spec_image)
    if memory.state is RolloutState.CANARY and canary_placed and not in_flight:
        memory = replace(memory, batch_in_flight=True)  # its record was lost: the batch is there
    return _advance(
        memory, node_image, in_flight=in_flight, outdated_left=outdated_left, now=now, quarantined=quarantined
    )


def _complete(memory: RolloutMemory, quarantined: bool) -> RolloutMemory:
    """Nothing left to do: Complete, or Quarantined while quarantined nodes keep the pool unwhole."""
    state = RolloutState.QUARANTINED if quarantined else RolloutState.COMPLETE
    return replace(memory, state=state, batch_in_flight=False, soak_until=None)


def _advance(
    memory: RolloutMemory,
    node_image: NodeImage,
    *,
    in_flight: bool,
    outdated_left: bool,
    now: datetime,
    quarantined: bool,
) -> RolloutDecision:
    soak = node_image.spec.soak
    if memory.state in (RolloutState.COMPLETE, RolloutState.QUARANTINED):
        memory = replace(memory, state=RolloutState.ROLLING)
    if in_flight:
        memory = replace(memory, batch_in_flight=True)
    elif memory.batch_in_flight:
        memory = replace(memory, batch_in_flight=False)
        if not memory.canary_passed or soak > timedelta(0):
            memory = replace(memory, state=RolloutState.SOAKING, soak_until=now + soak)
    if memory.state is RolloutState.SOAKING:
        gates = user_gates_passed(node_image.status.conditions, node_image.spec.gate_conditions)
        until = memory.soak_until or now
        if now < until or not gates:
            return RolloutDecision(memory, node_image.spec.image, scale_out=False, requeue_at=until)
        memory = replace(memory, state=RolloutState.ROLLING, canary_passed=True, soak_until=None)
        if not outdated_left and not in_flight:
            return RolloutDecision(_complete(memory, quarantined), node_image.spec.image)
    if memory.state is RolloutState.CANARY:
        return RolloutDecision(memory, node_image.spec.image, canary_cap=node_image.spec.canary)
    pipelined = soak <= timedelta(0)
    return RolloutDecision(memory, node_image.spec.image, scale_out=pipelined or not in_flight)


def any_rollout_running(node_images: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any NodeImage's status says its rollout runs."""
    for obj in node_images:
        try:
            state = RolloutState(str((obj.get("status") or {}).get("rolloutState") or ""))
        except ValueError:
            continue
        if state in ACTIVE_STATES:
            return True
    return False


def _replace_condition(conditions: list[ConditionState], new: ConditionState) -> None:
    conditions[:] = [c for c in conditions if c.type != new.type] + [new]


def overlay_conditions(
    conditions: Sequence[ConditionState],
    memory: RolloutMemory,
    *,
    conflicts: Sequence[str] = (),
    broken_groups: Sequence[str] = (),
    evicted_pods_waiting: bool = False,
    quarantined: Sequence[str] = (),
) -> list[ConditionState]:
    """The grouping's conditions with what the rollout state adds: Progressing says Soaking,
    RollingBack, RolledBack, Failed or NodesQuarantined (naming ``quarantined``); Degraded names
    the failed gate or the quarantined nodes, else a ScalingGroup that
    cannot apply the image (``broken_groups``) when nothing else is wrong; Conflict lists
    ScalingGroups whose scale set another NodeImage claims. While the pods evicted from a donor are
    not back (``evicted_pods_waiting``) and nothing else is said to progress, Progressing says
    WaitingForEvictedPods."""
    result = list(conditions)
    progressing = next((c for c in result if c.type == CONDITION_PROGRESSING), None)
    if evicted_pods_waiting and (progressing is None or progressing.status != "True"):
        message = "Waiting for the pods evicted from replaced nodes to be Running and Ready elsewhere"
        _replace_condition(
            result, ConditionState(CONDITION_PROGRESSING, "True", "WaitingForEvictedPods", message)
        )
    degraded = next((c for c in result if c.type == CONDITION_DEGRADED), None)
    if broken_groups and (degraded is None or degraded.status != "True"):
        problem = ConditionState(CONDITION_DEGRADED, "True", "ScalingGroupFailed", "; ".join(broken_groups))
        _replace_condition(result, problem)
    _state_conditions(result, memory, quarantined)
    if conflicts:
        _replace_condition(result, ConditionState(CONFLICT, "True", "ScaleSetClaimed", "; ".join(conflicts)))
    else:
        _replace_condition(result, ConditionState(CONFLICT, "False", "NoConflict", "No scale set is shared"))
    return result


def _state_conditions(
    result: list[ConditionState], memory: RolloutMemory, quarantined: Sequence[str]
) -> None:
    """Progressing and Degraded as the rollout state says (Soaking, RollingBack, RolledBack,
    Failed, Quarantined); other states leave the grouping's conditions."""
    state = memory.state
    failure = f"{memory.failure_reason}: {memory.failure_message}"
    if state is RolloutState.SOAKING:
        until = memory.soak_until.isoformat() if memory.soak_until else "now"
        message = f"New nodes soak until {until} and wait for the gate conditions"
        _replace_condition(result, ConditionState(CONDITION_PROGRESSING, "True", "Soaking", message))
    elif state is RolloutState.ROLLING_BACK:
        message = f"Rolling back to {memory.previous_image} after {failure}"
        _replace_condition(result, ConditionState(CONDITION_PROGRESSING, "True", "RollingBack", message))
        _replace_condition(result, ConditionState(CONDITION_DEGRADED, "True", memory.failure_reason, message))
    elif state is RolloutState.ROLLED_BACK:
        message = f"Rolled back to {memory.previous_image} after {failure}"
        _replace_condition(result, ConditionState(CONDITION_PROGRESSING, "False", "RolledBack", message))
        _replace_condition(result, ConditionState(CONDITION_DEGRADED, "True", memory.failure_reason, message))
    elif state is RolloutState.FAILED:
        message = f"Rollout stopped: {failure}"
        _replace_condition(result, ConditionState(CONDITION_PROGRESSING, "False", "Failed", message))
        _replace_condition(result, ConditionState(CONDITION_DEGRADED, "True", memory.failure_reason, message))
    elif state is RolloutState.QUARANTINED:
        names = ", ".join(quarantined) or "none left"
        message = f"Every other node runs the image; left quarantined for a human to remove: {names}"
        _replace_condition(
            result, ConditionState(CONDITION_PROGRESSING, "False", "NodesQuarantined", message)
        )
        _replace_condition(result, ConditionState(CONDITION_DEGRADED, "True", "NodesQuarantined", message))
