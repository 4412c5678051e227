"""The figures of one ``bench.scale`` phase, computed from what the harness recorded: pure
functions and the records they fill.

Owns ``item_latencies`` (per item: from when it was due, pod Running or node Ready, or the
phase start if later, to when it was done), ``ArmCall`` and ``arm_rates`` (ARM reads, writes and
429s per minute over a phase, and the busiest 60 s of each), ``api_counts`` (the API server's
requests and writes between two ``apiserver_request_total`` readings), ``name_bottleneck`` (the
process with the most CPU in the phase, or ARM's request budget when the phase used most of it)
and ``PhaseFigures``, one phase's row. No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BUDGET_PER_MINUTE",
    "NEAR_BUDGET",
    "ArmCall",
    "ArmRates",
    "Latencies",
    "PhaseFigures",
    "api_counts",
    "arm_operations",
    "arm_rates",
    "item_latencies",
    "name_bottleneck",
    "percentile",
]

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
BUDGET_PER_MINUTE = {"reads": 25.0 * 60, "writes": 10.0 * 60}
"""ARM's subscription buckets refill this many requests a minute (reads 25/s, writes 10/s)."""
NEAR_BUDGET = 0.8
"""A phase whose busiest minute used this share of a bucket's refill is limited by ARM's budget."""


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


@dataclass(frozen=True)
class Latencies:
    """How long items took in one phase: how many, p50 and p99 (seconds), and how many were due
    but not done when the phase ended."""

    count: int
    p50: float | None
    p99: float | None
    missing: int = 0
    max: float | None = None


def item_latencies(
    due: Mapping[str, float], done: Mapping[str, float], start: float, end: float
) -> Latencies:
    """Pure: for each item done within [start, end], done minus max(due, start), or 0 when it
    was done before it was due (an identity Assigned while its pod was still starting); an item
    due (by ``end``) and not done counts as missing. ``due`` and ``done`` map an item to a
    monotonic time (pod Running / identity Assigned; node Ready / pool filled)."""
    values: list[float] = []
    missing = 0
    for item, due_at in due.items():
        if due_at > end:
            continue
        done_at = done.get(item)
        if done_at is None:
            missing += 1
        elif start <= done_at <= end:
            values.append(max(0.0, done_at - max(due_at, start)))
    return Latencies(
        len(values), percentile(values, 0.5), percentile(values, 0.99), missing, max(values, default=None)
    )


@dataclass(frozen=True)
class ArmCall:
    """One ARM request as the emulator answered it: when (monotonic), its class, its status."""

    monotonic: float
    kind: str
    """``reads`` (GET/HEAD), ``writes`` (PUT/PATCH/POST) or ``deletes``."""
    status: int
    operation: str = ""
    """The emulator's SDK-style name of the route (``VirtualMachineScaleSetVMs.update``)."""


@dataclass(frozen=True)
class ArmRates:
    """ARM requests per minute over a phase, and the most within any 60 s of it."""

    reads_per_minute: float
    writes_per_minute: float
    throttled_per_minute: float
    peak_reads_minute: int
    peak_writes_minute: int
    reads: int
    writes: int
    throttled: int


def _peak(times: Sequence[float], window: float) -> int:
    ordered = sorted(times)
    best = first = 0
    for last, moment in enumerate(ordered):
        while moment - ordered[first] >= window:
            first += 1
        best = max(best, last - first + 1)
    return best


def arm_rates(calls: Iterable[ArmCall], seconds: float) -> ArmRates:
    """Pure: per-minute rates over ``seconds`` (deletes count as writes: ARM's delete bucket
    has the write bucket's size)."""
    listed = list(calls)
    reads = [c.monotonic for c in listed if c.kind == "reads"]
    writes = [c.monotonic for c in listed if c.kind in ("writes", "deletes")]
    throttled = sum(1 for c in listed if c.status == 429)
    minutes = max(seconds, 1e-9) / 60
    return ArmRates(
        reads_per_minute=len(reads) / minutes,
        writes_per_minute=len(writes) / minutes,
        throttled_per_minute=throttled / minutes,
        peak_reads_minute=_peak(reads, 60.0),
        peak_writes_minute=_peak(writes, 60.0),
        reads=len(reads),
        writes=len(writes),
        throttled=throttled,
    )


def arm_operations(calls: Iterable[ArmCall]) -> dict[str, int]:
    """Pure: requests per ``"<class> <operation>"`` (``reads VirtualMachineScaleSetVMs.get``),
    with the status appended when it was an error (``writes VirtualMachineScaleSetVMs.update
    412``), most first: what a phase spent its ARM budget on."""
    counts: dict[str, int] = {}
    for call in calls:
        key = f"{call.kind} {call.operation or '?'}" + (f" {call.status}" if call.status >= 400 else "")
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def api_counts(before: Mapping[str, float], after: Mapping[str, float]) -> tuple[int, int]:
    """Pure: (requests, writes) between two readings of ``apiserver_request_total`` summed by
    verb (``{"GET": n, "LIST": n, "PATCH": n, ...}``)."""
    delta = {verb: after.get(verb, 0.0) - before.get(verb, 0.0) for verb in after.keys() | before.keys()}
    return int(sum(delta.values())), int(sum(v for k, v in delta.items() if k.upper() in WRITE_VERBS))


def name_bottleneck(cpu_seconds: Mapping[str, float], rates: ArmRates | None) -> str:
    """Pure: ``ARM write budget`` / ``ARM read budget`` when the phase was throttled or its busiest
    minute used ``NEAR_BUDGET`` of a bucket's refill, else the process with the most CPU."""
    if rates is not None:
        writes = rates.peak_writes_minute / BUDGET_PER_MINUTE["writes"]
        reads = rates.peak_reads_minute / BUDGET_PER_MINUTE["reads"]
        if rates.throttled or max(writes, reads) >= NEAR_BUDGET:
            return "ARM write budget" if writes >= reads else "ARM read budget"
    if not cpu_seconds:
        return "unknown"
    return max(sorted(cpu_seconds), key=lambda name: cpu_seconds[name])


@dataclass
class PhaseFigures:
    """One phase's row of the report."""

    name: str
    goal: str
    seconds: float
    converged: bool
    identity: Latencies
    pool: Latencies
    arm: ArmRates
    api_requests: int
    api_writes: int
    cpu_seconds: dict[str, float]
    manager_peak_rss_bytes: int
    bottleneck: str
    notes: list[str] = field(default_factory=list)
    operations: dict[str, int] = field(default_factory=dict)
    """ARM requests per operation in the phase (``arm_operations``), most first."""
    tool: dict[str, Any] = field(default_factory=dict)
    """The identity tool's own figures (``bench.scale_peer.tool_figures``): which tool, its ARM
    requests (all, and identity assignment's alone) and its API writes by resource."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "goal": self.goal,
            "seconds": round(self.seconds, 2),
            "converged": self.converged,
            "identity": vars(self.identity),
            "pool": vars(self.pool),
            "arm": vars(self.arm),
            "api_requests": self.api_requests,
            "api_writes": self.api_writes,
            "cpu_seconds": {k: round(v, 2) for k, v in self.cpu_seconds.items()},
            "manager_peak_rss_bytes": self.manager_peak_rss_bytes,
            "bottleneck": self.bottleneck,
            "notes": self.notes,
            "arm_operations": self.operations,
            "identity_tool": self.tool,
        }
