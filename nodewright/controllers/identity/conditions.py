"""Status conditions in the metav1.Condition shape for the identity reconcilers: setting one
condition in a list the way apimachinery's ``SetStatusCondition`` does, and the timestamp format.
Pure; no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from nodewright.api.meta import Condition

__all__ = ["ConditionStatus", "format_time", "parse_time", "with_condition"]

ConditionStatus = Literal["True", "False", "Unknown"]


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC, seconds precision, as Kubernetes writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> datetime | None:
    """The time ``format_time`` wrote; None for an empty or malformed value."""
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def with_condition(
    conditions: Sequence[Condition],
    condition_type: str,
    *,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """A copy of ``conditions`` with one condition set; its lastTransitionTime moves only when its
    status changes (apimachinery's SetStatusCondition)."""
    result: list[Condition] = []
    found = False
    for condition in conditions:
        if condition.type != condition_type:
            result.append(condition)
            continue
        found = True
        transition = condition.last_transition_time if condition.status == status else format_time(now)
        result.append(
            Condition(
                type=condition_type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=transition,
                observed_generation=observed_generation,
            )
        )
    if not found:
        result.append(
            Condition(
                type=condition_type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=format_time(now),
                observed_generation=observed_generation,
            )
        )
    return result
