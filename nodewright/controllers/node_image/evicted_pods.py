"""The health gate "the pods evicted from a donor are Running and Ready elsewhere within a
deadline" (pure): the record a drain leaves on the heir, and what it says once the pods are read.

Before the reconciler evicts pods from a donor it writes (merges) them into an annotation on the
donor's heir (``nodewright.io/evicted-pods``): the donor, when the first and the latest evictions
were asked for, and per pod its controller (a ReplicaSet, StatefulSet, ... by kind, name and uid).
Pods without a controller are not recorded: nothing brings them back. Written before the eviction,
the record survives a crash between the two and outlives the donor (which leaves the cluster).

A record is checked against the pods of its namespaces: per controller, each recorded pod that has
left the donor (gone, or being deleted) must be matched by a pod of the same controller created
since the first eviction, not on the donor, not being deleted, and Running and Ready (or
Succeeded). All matched: ``SATISFIED`` (the record is removed once its donor is gone or no longer
paired with this heir). Not matched ``evictedPodsReadyTimeout`` after the latest eviction:
``OVERDUE``, which fails the rollout's health gate (``EvictedPodsNotReady``). Else ``WAITING``: the
batch is still in flight, so the canary's soak does not start before its donor's pods are back.
Neighbours: ``replacement`` (writes the record before evicting), ``node_image`` (reads the pods,
checks, removes finished records), ``rollout_state`` (the gate).
"""

from __future__ import annotations

import bisect
import enum
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from nodewright.runtime import condition_is_true, format_time, parse_time
from nodewright.runtime import controller_of as controller_reference

__all__ = [
    "EVICTED_PODS_ANNOTATION",
    "EvictedPodsVerdict",
    "EvictionCheck",
    "EvictionRecord",
    "PodFacts",
    "PodFactsCache",
    "check_eviction_facts",
    "check_evictions",
    "controller_of",
    "new_record",
]

EVICTED_PODS_ANNOTATION = "nodewright.io/evicted-pods"
"""On a heir while the pods evicted from its donor are not yet back: the record (JSON)."""


class EvictedPodsVerdict(enum.Enum):
    SATISFIED = "Satisfied"
    WAITING = "Waiting"
    OVERDUE = "Overdue"


def controller_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's controller as ``Kind/name/uid``, or ``None`` when nothing controls it."""
    owner = controller_reference(pod)
    if owner is None:
        return None
    return f"{owner.get('kind', '')}/{owner.get('name', '')}/{owner.get('uid', '')}"


@dataclass(frozen=True)
class EvictionRecord:
    """The pods evicted from ``donor`` (``namespace/name`` -> controller), and when."""

    donor: str
    since: datetime
    latest: datetime
    pods: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> EvictionRecord | None:
        """The record in an annotation; ``None`` when there is none or it does not parse."""
        if not text:
            return None
        try:
            data = json.loads(text)
            since, latest = parse_time(data["since"]), parse_time(data["latest"])
            pods = {str(key): str(value) for key, value in dict(data["pods"]).items()}
            donor = str(data["donor"])
        except (ValueError, TypeError, KeyError):
            return None
        if since is None or latest is None:
            return None
        return cls(donor, since, latest, pods)

    def format(self) -> str:
        data = {
            "donor": self.donor,
            "since": format_time(self.since),
            "latest": format_time(self.latest),
            "pods": dict(sorted(self.pods.items())),
        }
        return json.dumps(data, separators=(",", ":"))

    def merged(self, pods: Mapping[str, str], now: datetime) -> EvictionRecord:
        """This record with ``pods`` added and the latest eviction at ``now``."""
        return replace(self, latest=now, pods={**self.pods, **pods})

    @property
    def namespaces(self) -> list[str]:
        return sorted({key.split("/", 1)[0] for key in self.pods})


def new_record(donor: str, pods: Mapping[str, str], now: datetime) -> EvictionRecord:
    return EvictionRecord(donor, now, now, dict(pods))


@dataclass(frozen=True)
class EvictionCheck:
    """A record's verdict; ``missing`` names the controllers still short of pods."""

    heir: str
    record: EvictionRecord
    verdict: EvictedPodsVerdict
    missing: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        short = ", ".join(
            f"{owner.rsplit('/', 1)[0]} ({count})" for owner, count in sorted(self.missing.items())
        )
        return f"pods evicted from {self.record.donor} not Ready elsewhere: {short}"


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") == "Succeeded":
        return True
    return condition_is_true(pod) and status.get("phase") == "Running"


def _key(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


@dataclass(frozen=True)
class PodFacts:
    """What the gate reads of one pod: its key, node, whether it is being deleted, its
    namespace-qualified controller, creation time and readiness."""

    key: str
    node: str
    deleting: bool
    owner: str | None
    created: datetime | None
    ready: bool

    @staticmethod
    def of(pod: Mapping[str, Any]) -> PodFacts:
        metadata = pod.get("metadata") or {}
        owner = controller_of(pod)
        return PodFacts(
            key=_key(pod),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            deleting=bool(metadata.get("deletionTimestamp")),
            owner=None if owner is None else f"{metadata.get('namespace', '')}/{owner}",
            created=parse_time(metadata.get("creationTimestamp")),
            ready=_pod_ready(pod),
        )


class PodFactsCache:
    """``PodFacts`` kept per pod while it is unchanged: a rollout's passes read the same pods of
    the recorded controllers again and again (thousands in a large cluster), and decode and parse
    each one only when it changed. The pods come as an informer store's stored forms, each kept
    per key while the store holds the same form, so an unchanged pod is not even decoded. Holds
    at most the pods of the last passes (entries not read in a pass are dropped once they
    outnumber those read). Not thread-safe: one per reconciler, whose passes run one at a time."""

    def __init__(self, keep_at_least: int = 4096) -> None:
        self._stored: dict[str, tuple[object, PodFacts]] = {}
        self._keep_at_least = keep_at_least

    def of_stored(
        self, entries: Iterable[tuple[str, object]], decode: Callable[[Any], Mapping[str, Any]]
    ) -> list[PodFacts]:
        """The facts of (key, stored form) pairs; ``decode`` only for forms not seen before."""
        out: list[PodFacts] = []
        for key, stored in entries:
            kept = self._stored.get(key)
            if kept is None or kept[0] is not stored:
                kept = (stored, PodFacts.of(decode(stored)))
                self._stored[key] = kept
            out.append(kept[1])
        if len(self._stored) > max(self._keep_at_least, 2 * len(out)):
            seen = {pod.key for pod in out}
            self._stored = {key: entry for key, entry in self._stored.items() if key in seen}
        return out

    def __len__(self) -> int:
        return len(self._stored)


@dataclass(frozen=True)
class _Replacements:
    """The pods that may stand in for evicted ones, read once per pass: per namespace-qualified
    controller, the creation time and node of each Ready pod not being deleted, oldest first (a
    record reads only those created since its first eviction); and the pods still on each node."""

    ready: Mapping[str, list[tuple[datetime, str]]]
    on_node: Mapping[str, set[str]]

    @staticmethod
    def of(pods: Iterable[PodFacts]) -> _Replacements:
        ready: dict[str, list[tuple[datetime, str]]] = {}
        on_node: dict[str, set[str]] = {}
        for pod in pods:
            if pod.deleting:
                continue
            on_node.setdefault(pod.node, set()).add(pod.key)
            if pod.owner is not None and pod.created is not None and pod.ready:
                ready.setdefault(pod.owner, []).append((pod.created, pod.node))
        for entries in ready.values():
            entries.sort(key=lambda entry: entry[0])
        return _Replacements(ready, on_node)

    def count(self, owner: str, since: datetime, donor: str) -> int:
        entries = self.ready.get(owner, [])
        first = bisect.bisect_left(entries, since, key=lambda entry: entry[0])
        return sum(1 for _, node in entries[first:] if node != donor)


def _missing(record: EvictionRecord, replacements: _Replacements) -> dict[str, int]:
    """Per controller (namespace-qualified), how many evicted pods have no Ready replacement."""
    on_donor = replacements.on_node.get(record.donor, set())
    evicted: Counter[str] = Counter()
    for key, recorded_owner in record.pods.items():
        if key not in on_donor:  # still on the donor: not evicted yet (refused, or a restart)
            evicted[f"{key.split('/', 1)[0]}/{recorded_owner}"] += 1
    since = record.since.replace(microsecond=0)
    found = {owner: replacements.count(owner, since, record.donor) for owner in evicted}
    return {owner: count - found[owner] for owner, count in evicted.items() if count > found[owner]}


def check_evictions(
    records: Mapping[str, EvictionRecord],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    timeout: timedelta,
) -> list[EvictionCheck]:
    """Each heir's record (by heir name) checked against ``pods`` (those of the records'
    namespaces), in heir order (see the module docstring)."""
    return check_eviction_facts(records, [PodFacts.of(pod) for pod in pods], now=now, timeout=timeout)


def check_eviction_facts(
    records: Mapping[str, EvictionRecord], pods: Iterable[PodFacts], *, now: datetime, timeout: timedelta
) -> list[EvictionCheck]:
    """``check_evictions`` of pods already read (``PodFactsCache.of_stored``)."""
    replacements = _Replacements.of(pods)
    checks: list[EvictionCheck] = []
    for heir, record in sorted(records.items()):
        missing = _missing(record, replacements)
        if not missing:
            verdict = EvictedPodsVerdict.SATISFIED
        elif now - record.latest >= timeout:
            verdict = EvictedPodsVerdict.OVERDUE
        else:
            verdict = EvictedPodsVerdict.WAITING
        checks.append(EvictionCheck(heir, record, verdict, missing))
    return checks
