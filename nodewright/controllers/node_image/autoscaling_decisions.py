"""Keeping the cluster autoscaler off while any rollout runs and putting back the value it had
before (pure). Neighbour: ``node_image`` (writes the AutoscalingStrategy).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AutoscalingChange",
    "decide_autoscaling",
]

# ---- autoscaling --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AutoscalingChange:
    """Write ``spec.enabled = enabled`` on the AutoscalingStrategy and set its
    ENABLED_BEFORE_ROLLOUT annotation to ``remembered`` (``None``: remove it)."""

    enabled: bool
    remembered: bool | None


def decide_autoscaling(
    spec_enabled: bool, remembered: bool | None, *, in_progress: bool
) -> AutoscalingChange | None:
    """Keep autoscaling off during a rollout and put back what was there before.

    Starting a rollout remembers ``spec.enabled`` and turns it off. If someone turns it on while
    the rollout runs, that wish is remembered instead and it is turned off again. When the rollout
    is over the remembered value is written back and forgotten. ``None``: nothing to change.
    """
    if in_progress:
        if remembered is None:
            return AutoscalingChange(enabled=False, remembered=spec_enabled)
        if spec_enabled:
            return AutoscalingChange(enabled=False, remembered=True)
        return None
    if remembered is None:
        return None
    return AutoscalingChange(enabled=remembered, remembered=None)
