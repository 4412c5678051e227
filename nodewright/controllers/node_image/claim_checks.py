"""The NodeImage reconciler's I/O around its claims (the decisions are ``targeting``'s): the
confirmation, from a fresh list of the API server rather than the cache, that a rollout pass still
holds every scale set it is about to write to, and one Warning Event per new Conflict.

Side effects: a LIST of ScalingGroups (only for a pass that may write), Events. Neighbours:
``node_image`` (calls both), ``targeting`` (who holds what).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodewright.api.nodewright.v1alpha1 import CONFLICT
from nodewright.controllers.node_image.resources import SCALING_GROUP, Clock
from nodewright.controllers.node_image.targeting import claim_scaling_groups, parse_scaling_groups
from nodewright.runtime import Client, EventRecorder, get_logger

__all__ = ["ClaimChecks"]

log = get_logger(__name__)


class ClaimChecks:
    """Confirms claims fresh and reports conflicts once (see the module docstring)."""

    def __init__(self, client: Client, events: EventRecorder, clock: Clock) -> None:
        self._client = client
        self._events = events
        self._clock = clock
        self._reported: dict[str, str] = {}
        """The Conflict message last sent in an Event, per NodeImage."""

    def still_held(self, node_image: str, claimed: frozenset[str]) -> bool:
        """Whether the API server's ScalingGroups, listed now, still give ``node_image`` every scale
        set of ``claimed`` (lowercased IDs) with a settled claim."""
        fresh = parse_scaling_groups(self._client.list(SCALING_GROUP).items)
        lost = claimed - claim_scaling_groups(fresh, node_image, now=self._clock()).scale_set_ids
        if lost:
            log.info("Held back rollout pass: claim not confirmed", node_image=node_image, lost=sorted(lost))
        return not lost

    def report_conflict(self, obj: dict[str, Any], conflicts: Sequence[str]) -> None:
        """One Warning Event when the NodeImage's Conflict condition turns True or names other
        holders; the last one sent is remembered, since the cache may not show its status yet."""
        name, message = str(obj["metadata"]["name"]), "; ".join(conflicts)
        if not message:
            self._reported.pop(name, None)
            return
        before = (obj.get("status") or {}).get("conditions") or []
        previous: dict[str, Any] = next((c for c in before if c.get("type") == CONFLICT), {})
        new = (previous.get("status"), previous.get("message")) != ("True", message)
        if new and self._reported.get(name) != message:
            self._events.event(obj, "Warning", "ScaleSetClaimed", message)
        self._reported[name] = message
