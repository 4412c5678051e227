"""The timeline of a node image rollout, as the bench watches it: for each replaced node, when its
heir was requested (its Join PendingNode created), when the heir's Node registered and turned
Ready, when the donor was cordoned, handed to a Leave PendingNode (drained), and its Node deleted;
and how long a freed surge slot waited before the next heir was requested.

``RolloutTimeline`` runs two informers of its own (Nodes of the estate, PendingNodes) and stamps
each milestone with ``time.monotonic()`` the first time an event shows it, so the figures cost
the API server two watches, not a poll. ``breakdown()`` turns the stamps into per-segment
p50/p90/max and the mean cycle of one surge slot. Neighbour: ``bench.nodeimage`` (starts it
before the NodeImage is created, reads it once the rollout is done). Side effects: two watch
threads against the API server.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from nodewright.controllers.node_image.grouping import DONOR_ANNOTATION
from nodewright.controllers.node_image.resources import PENDING_NODE
from nodewright.runtime.informers.informer import Informer
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE
from nodewright.runtime.kube.objects import condition_is_true

__all__ = ["SEGMENTS", "RolloutTimeline", "Segment", "timeline_summary"]

SEGMENTS = (
    ("requested -> registered", "join_created", "registered"),
    ("registered -> Ready", "registered", "ready"),
    ("heir Ready -> donor cordoned", "ready", "cordoned"),
    ("cordoned -> Leave (drained)", "cordoned", "leave_created"),
    ("Leave -> donor Node deleted", "leave_created", "deleted"),
)
"""(label, start milestone, end milestone): the heir's milestones first, then its donor's."""


@dataclass(frozen=True)
class Segment:
    label: str
    count: int
    p50: float
    p90: float
    maximum: float
    mean: float


@dataclass
class _Stamps:
    """First-seen times (monotonic) of one node's milestones."""

    times: dict[str, float] = field(default_factory=dict)
    donor: str = ""

    def stamp(self, milestone: str, now: float) -> None:
        self.times.setdefault(milestone, now)


class RolloutTimeline:
    """Watches the estate's Nodes and every PendingNode and stamps milestones (module docstring)."""

    def __init__(self, client: Client, node_selector: str) -> None:
        self.nodes: dict[str, _Stamps] = {}
        self.started = time.monotonic()
        self._node_informer = Informer(client, NODE, label_selector=node_selector, transform=None)
        self._pending_informer = Informer(client, PENDING_NODE, transform=None)
        self._node_informer.add_event_handler(_Handler(self._node_seen, self._node_gone))
        self._pending_informer.add_event_handler(_Handler(self._pending_seen, lambda _: None))

    def start(self) -> None:
        self.started = time.monotonic()
        self._node_informer.start()
        self._pending_informer.start()

    def stop(self) -> None:
        self._node_informer.stop(2)
        self._pending_informer.stop(2)

    def _of(self, name: str) -> _Stamps:
        return self.nodes.setdefault(name, _Stamps())

    def _node_seen(self, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        stamps = self._of(str(obj["metadata"]["name"]))
        stamps.stamp("registered", now)
        if condition_is_true(obj):
            stamps.stamp("ready", now)
        if (obj.get("spec") or {}).get("unschedulable"):
            stamps.stamp("cordoned", now)
        donor = (obj["metadata"].get("annotations") or {}).get(DONOR_ANNOTATION)
        if donor and not stamps.donor:
            stamps.donor = donor
            stamps.stamp("paired", now)

    def _node_gone(self, obj: dict[str, Any]) -> None:
        self._of(str(obj["metadata"]["name"])).stamp("deleted", time.monotonic())

    def _pending_seen(self, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        spec = obj.get("spec") or {}
        name = str(spec.get("nodeName") or obj["metadata"]["name"])
        self._of(name).stamp("join_created" if spec.get("goal") == "Join" else "leave_created", now)

    # ---- the figures --------------------------------------------------------------------------

    def pairs(self) -> list[tuple[_Stamps, _Stamps]]:
        """(heir, donor) stamps of every replacement seen, by the heir's request time."""
        found = [
            (heir, self.nodes[heir.donor])
            for heir in self.nodes.values()
            if heir.donor and heir.donor in self.nodes
        ]
        return sorted(found, key=lambda pair: pair[0].times.get("join_created", float("inf")))

    def segments(self) -> list[Segment]:
        """Per-segment statistics over the replacements, then the slot's reuse gap."""
        pairs = self.pairs()
        rows: list[Segment] = []
        for label, start, end in SEGMENTS:
            values = []
            for heir, donor in pairs:
                merged = {**heir.times, **{k: v for k, v in donor.times.items() if k in _DONOR}}
                if start in merged and end in merged:
                    values.append(merged[end] - merged[start])
            rows.append(_segment(label, values))
        return [*rows, _segment("donor deleted -> next heir requested", self.slot_gaps(max_surge=0))]

    def slot_gaps(self, max_surge: int) -> list[float]:
        """How long each freed surge slot stayed unused: the k-th donor deletion frees the slot the
        (k + maxSurge)-th heir request takes (``max_surge`` 0: the surge is read from the stamps as
        the requests made before the first deletion)."""
        deleted = sorted(d.times["deleted"] for _, d in self.pairs() if "deleted" in d.times)
        requests = sorted(h.times["join_created"] for h, _ in self.pairs() if "join_created" in h.times)
        if not deleted:
            return []
        surge = max_surge or sum(1 for r in requests if r < deleted[0])
        return [requests[k + surge] - deleted[k] for k in range(len(deleted)) if k + surge < len(requests)]

    def table(self, join_seconds: float, max_surge: int) -> list[str]:
        """The breakdown as markdown lines, with the mean cycle of one surge slot."""
        rows = self.segments()
        lines = [
            "| segment (per replaced node) | n | p50 (s) | p90 (s) | max (s) | mean (s) |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.label} | {r.count} | {r.p50:.2f} | {r.p90:.2f} | {r.maximum:.2f} | {r.mean:.2f} |"
            for r in rows
        ]
        cycle = sum(r.mean for r in rows)
        lines += [
            "",
            f"one surge slot's cycle (sum of the means): {cycle:.2f} s against a join time of "
            f"{join_seconds:g} s ({cycle / join_seconds:.2f}x); {len(self.pairs())} replacements seen, "
            f"maxSurge {max_surge}.",
        ]
        return lines


def timeline_summary(timeline: RolloutTimeline, join_seconds: float) -> str:
    """The breakdown in one line (a report's note): each segment's mean, and the slot's cycle."""
    rows = timeline.segments()
    means = "; ".join(f"{row.label} {row.mean:.1f} s (p90 {row.p90:.1f})" for row in rows)
    cycle = sum(row.mean for row in rows)
    return (
        f"per replaced node, means: {means}; one surge slot's cycle {cycle:.1f} s "
        f"({cycle / join_seconds:.1f}x the join time), {len(timeline.pairs())} replacements seen"
    )


_DONOR = {"cordoned", "leave_created", "deleted"}
"""The milestones read from the donor of a pair (the others are the heir's)."""


def _segment(label: str, values: list[float]) -> Segment:
    if not values:
        return Segment(label, 0, 0.0, 0.0, 0.0, 0.0)
    ordered = sorted(values)
    return Segment(
        label,
        len(ordered),
        statistics.median(ordered),
        ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        ordered[-1],
        statistics.fmean(ordered),
    )


class _Handler:
    """An informer event handler calling ``seen`` on adds and updates and ``gone`` on deletes."""

    def __init__(self, seen: Any, gone: Any) -> None:
        self._seen, self._gone = seen, gone

    def on_add(self, obj: dict[str, Any]) -> None:
        self._seen(obj)

    def on_update(self, _old: dict[str, Any], new: dict[str, Any]) -> None:
        self._seen(new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        self._gone(obj)
