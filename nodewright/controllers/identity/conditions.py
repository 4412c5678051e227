"""Status conditions in the metav1.Condition shape for the identity reconcilers: setting one
condition in a list the way apimachinery's ``SetStatusCondition`` does. Pure; no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Literal

from nodewright.api.meta import Condition
from nodewright.runtime import format_time

__all__ = ["ConditionStatus", "with_condition"]

ConditionStatus = Literal["True", "False", "Unknown"]


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
    updated = Condition(
        type=condition_type,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=format_time(now),
        observed_generation=observed_generation,
    )
    result: list[Condition] = []
    found = False
    for condition in conditions:
        if condition.type != condition_type:
            result.append(condition)
        elif condition.status == status:
            found = True
            result.append(replace(updated, last_transition_time=condition.last_transition_time))
        else:
            found = True
            result.append(updated)
    if not found:
        result.append(updated)
    return result
