"""The marks a node image rollout leaves where IPAM can read them before a heir is paired: the
donor annotation on a paired heir and the scale-out record on a ScalingGroup.

The NodeImage reconciler writes both; the node-network-config reconciler reads them (with the
rollout's Join PendingNodes) to tell a new Node that is about to become a heir, whose pool it
sizes once, with the donor's pods, from a Node it sizes at once (``incoming_pods`` says why).
Owns the two annotation names and ``ScaleOutRecord`` (what the scale-out annotation holds: the
scale set's instance IDs before the capacity step and how many machines it adds; pure parsing
and rendering). Imports nothing internal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["DONOR_ANNOTATION", "SCALE_OUT_ANNOTATION", "ScaleOutRecord"]

DONOR_ANNOTATION = "nodewright.io/donor"
"""On a heir: the name of the outdated node it replaces. Written in one patch with the heir's
``nodewright.io/incoming-pods`` announcement, so a Node that carries it is announced already."""

SCALE_OUT_ANNOTATION = "nodewright.io/instances-before-scale-out"
"""On a ScalingGroup while a scale-out is under way: a ``ScaleOutRecord`` (JSON), written before the
capacity changes and cleared once its operation ended and the new machines have their Join
PendingNodes; until then no other scale-out of that scale set starts. A restart finds the new
machines by difference; IPAM knows an instance not listed is the rollout's."""


@dataclass(frozen=True)
class ScaleOutRecord:
    """A scale-out recorded on its ScalingGroup before the capacity changes: ``before`` the
    instance IDs then, ``count`` the machines asked for."""

    before: frozenset[str]
    count: int

    def render(self) -> str:
        return json.dumps({"before": sorted(self.before), "count": self.count})

    @staticmethod
    def parse(value: str | None) -> ScaleOutRecord | None:
        """The record an annotation holds (``None``: no annotation). A record of an earlier
        version (a bare list: one machine at a time) reads as a count of 1; one that cannot be
        read has no instances before (every instance is compared against nothing known)."""
        if value is None:
            return None
        try:
            loaded = json.loads(value)
        except ValueError:
            return ScaleOutRecord(frozenset(), 0)
        if isinstance(loaded, list):
            return ScaleOutRecord(frozenset(str(i) for i in loaded), 1)
        if not isinstance(loaded, dict):
            return ScaleOutRecord(frozenset(), 0)
        before = loaded.get("before")
        count = loaded.get("count")
        return ScaleOutRecord(
            frozenset(str(i) for i in before) if isinstance(before, list) else frozenset(),
            count if isinstance(count, int) and count > 0 else 0,
        )
