"""Planning a node's drain as the Eviction API would allow it (pure): DaemonSet, mirror and
finished pods skipped, PodDisruptionBudgets counted, a timeout after which the drain is stuck.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from nodewright.controllers.node_image.grouping import MIRROR_POD_ANNOTATION
from nodewright.runtime import condition_is_true, parse_time

__all__ = [
    "DrainPlan",
    "PodKey",
    "SkipReason",
    "plan_drain",
    "selector_matches",
]

# ---- draining -----------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class PodKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class SkipReason(enum.Enum):
    """Why a pod on a draining node is not evicted."""

    DAEMON_SET = "DaemonSet"
    """Its DaemonSet would put it straight back; it goes with the node."""
    MIRROR_POD = "MirrorPod"
    """A static pod's mirror: the Eviction API cannot remove it."""
    TERMINATING = "Terminating"
    """Already being deleted and past its grace period: nothing more to wait for."""
    FINISHED = "Finished"
    """Succeeded or Failed: no workload left to move."""


@dataclass
class DrainPlan:
    """What to do with a draining node's pods now. ``blocked`` pods wait for a
    PodDisruptionBudget to allow a disruption; ``terminating`` pods are within their grace period."""

    evict: list[PodKey] = field(default_factory=list)
    blocked: dict[PodKey, str] = field(default_factory=dict)
    terminating: list[PodKey] = field(default_factory=list)
    skipped: dict[PodKey, SkipReason] = field(default_factory=dict)
    stuck: bool = False

    @property
    def done(self) -> bool:
        """Nothing left to evict or wait for: the node can be removed."""
        return not self.evict and not self.blocked and not self.terminating


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics as policy/v1 PodDisruptionBudgets use them: a missing
    selector matches nothing, an empty one matches every pod of the namespace."""
    if selector is None:
        return False
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _skip_reason(pod: Mapping[str, Any], now: datetime) -> SkipReason | Literal["wait"] | None:
    metadata = pod.get("metadata") or {}
    if MIRROR_POD_ANNOTATION in (metadata.get("annotations") or {}):
        return SkipReason.MIRROR_POD
    owners = metadata.get("ownerReferences") or []
    if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
        return SkipReason.DAEMON_SET
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return SkipReason.FINISHED
    if metadata.get("deletionTimestamp"):
        deletion = parse_time(metadata.get("deletionTimestamp"))
        if deletion is not None and deletion > now:
            return "wait"
        return SkipReason.TERMINATING
    return None


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return condition_is_true(pod)


def plan_drain(
    pods: Iterable[Mapping[str, Any]],
    pod_disruption_budgets: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    drain_started: datetime | None,
    timeout: timedelta,
) -> DrainPlan:
    """Decide which pods of a cordoned node to evict now, as the Eviction API would allow it.

    Skipped: DaemonSet pods, mirror pods, finished pods, and pods being deleted whose grace period
    is over (those within it are waited for). Pending pods are evicted whatever their budget says
    (the API server deletes pods that are not running without consulting budgets). A running pod
    covered by one PodDisruptionBudget is evicted while that budget's ``disruptionsAllowed`` lasts,
    counting the evictions planned in this call; a pod that is not Ready is evicted when the budget
    lets unhealthy pods go (``AlwaysAllow``, or enough healthy pods). A pod under two budgets, or a
    budget whose status is older than its spec, waits: the API server would refuse it. The drain is
    ``stuck`` when it is not done ``timeout`` after ``drain_started``.
    """
    budgets = list(pod_disruption_budgets)
    allowed = _disruptions_allowed(budgets)
    plan = DrainPlan()
    for pod in sorted(pods, key=_pod_key):
        key = _pod_key(pod)
        reason = _skip_reason(pod, now)
        if reason == "wait":
            plan.terminating.append(key)
            continue
        if isinstance(reason, SkipReason):
            plan.skipped[key] = reason
            continue
        if (pod.get("status") or {}).get("phase") == "Pending":
            plan.evict.append(key)
            continue
        covering = _covering_budgets(budgets, pod, key.namespace)
        if not covering:
            plan.evict.append(key)
            continue
        if len(covering) > 1:
            names = ", ".join(sorted((b.get("metadata") or {}).get("name", "") for b in covering))
            plan.blocked[key] = f"covered by more than one PodDisruptionBudget ({names})"
            continue
        budget = covering[0]
        budget_key = PodKey(key.namespace, (budget.get("metadata") or {}).get("name", ""))
        if not _pod_ready(pod) and _unhealthy_may_go(budget):
            plan.evict.append(key)
        elif allowed[budget_key] > 0:
            allowed[budget_key] -= 1
            plan.evict.append(key)
        else:
            plan.blocked[key] = f"PodDisruptionBudget {budget_key.name} allows no disruption now"
    plan.stuck = not plan.done and drain_started is not None and now - drain_started >= timeout
    return plan


def _disruptions_allowed(budgets: Iterable[Mapping[str, Any]]) -> dict[PodKey, int]:
    """Each budget's ``disruptionsAllowed``; 0 for a budget whose status is older than its spec."""
    allowed: dict[PodKey, int] = {}
    for budget in budgets:
        metadata = budget.get("metadata") or {}
        status = budget.get("status") or {}
        key = PodKey(metadata.get("namespace", ""), metadata.get("name", ""))
        current = int(status.get("observedGeneration", 0)) >= int(metadata.get("generation", 0))
        allowed[key] = int(status.get("disruptionsAllowed", 0)) if current else 0
    return allowed


def _covering_budgets(
    budgets: Iterable[Mapping[str, Any]], pod: Mapping[str, Any], namespace: str
) -> list[Mapping[str, Any]]:
    """The budgets of the pod's namespace whose selector matches its labels."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return [
        budget
        for budget in budgets
        if (budget.get("metadata") or {}).get("namespace", "") == namespace
        and selector_matches((budget.get("spec") or {}).get("selector"), labels)
    ]


def _pod_key(pod: Mapping[str, Any]) -> PodKey:
    metadata = pod.get("metadata") or {}
    return PodKey(metadata.get("namespace", ""), metadata.get("name", ""))


def _unhealthy_may_go(budget: Mapping[str, Any]) -> bool:
    """Whether the API server evicts a not-Ready pod under this budget regardless of
    disruptionsAllowed (policy/v1 unhealthyPodEvictionPolicy)."""
    if (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = budget.get("status") or {}
    return int(status.get("currentHealthy", 0)) >= int(status.get("desiredHealthy", 0)) > 0
