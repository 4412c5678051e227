"""``bench.scale``'s results on disk: ``scale-N.json`` (every figure), ``scale-N.md`` (the tables,
each phase next to its goal and its bottleneck) and ``scale.png`` (each cost against node count,
drawn from every ``scale-*.json`` in the results directory).

Owns ``render_markdown`` (pure) and ``write_results``. Side effects: writes those files;
``draw_chart`` needs matplotlib (skipped without it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.scale_figures import PhaseFigures

__all__ = ["draw_chart", "render_markdown", "write_results"]

CPU_COLUMNS = (
    "manager",
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "emulator+nodesim",
    "harness",
)


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def render_markdown(meta: Mapping[str, Any], phases: Sequence[PhaseFigures]) -> str:
    """Pure: the run's tables (figures, then CPU by process), with the machine's load."""
    nodes = meta["nodes"]
    load = meta.get("load_average") or [[0.0], [0.0]]
    lines = [
        f"## bench.scale, {nodes:,} nodes ({meta.get('when', '')})",
        "",
        f"- {meta.get('cpus')} cores; load average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end "
        "(other work shared the machine: figures are indicative, latencies most of all)",
        f"- steady state {meta.get('steady_seconds', 0):g} s; ARM: 200 ms per call, subscription "
        "buckets and Compute policies enforced",
        "",
        "| phase | goal | converged (s) | ok | identity p50/p99 s (n) | pool p50/p99 s (n) "
        "| ARM reads/min (peak) | ARM writes/min (peak) | 429s/min | API requests | API writes "
        "| manager CPU s | manager peak RSS MiB | bottleneck |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phase in phases:
        identity, pool, arm = phase.identity, phase.pool, phase.arm
        lines.append(
            f"| {phase.name} | {phase.goal} | {phase.seconds:.1f} | {'yes' if phase.converged else 'NO'} "
            f"| {_seconds(identity.p50)}/{_seconds(identity.p99)} ({identity.count}) "
            f"| {_seconds(pool.p50)}/{_seconds(pool.p99)} ({pool.count}) "
            f"| {arm.reads_per_minute:.0f} ({arm.peak_reads_minute}) "
            f"| {arm.writes_per_minute:.0f} ({arm.peak_writes_minute}) | {arm.throttled_per_minute:.1f} "
            f"| {phase.api_requests:,} | {phase.api_writes:,} | {phase.cpu_seconds.get('manager', 0):.1f} "
            f"| {phase.manager_peak_rss_bytes / 2**20:.0f} | {phase.bottleneck} |"
        )
    lines += ["", "CPU seconds by process in each phase:", ""]
    lines.append("| phase | " + " | ".join(CPU_COLUMNS) + " |")
    lines.append("|---|" + "---|" * len(CPU_COLUMNS))
    for phase in phases:
        cells = " | ".join(f"{phase.cpu_seconds.get(name, 0.0):.1f}" for name in CPU_COLUMNS)
        lines.append(f"| {phase.name} | {cells} |")
    lines += _tool_table(meta, phases)
    lines += _operations_table(phases)
    notes = [f"- {phase.name}: {note}" for phase in phases for note in phase.notes]
    if notes:
        lines += ["", "Notes:", "", *notes]
    lines += [
        "",
        "converged (s): from the phase's change to every Node and pod Ready, every pod that uses "
        "an identity Assigned, every pool filled (for the restart: until the new manager leads; "
        "for steady state: the phase's length). Per item: pod Running (or the phase start) to its "
        "identity Assigned; node Ready (or the phase start) to its pool filled; n = items done in "
        "the phase. ARM: every request the emulator answered, deletes counted as writes; peak = "
        "busiest 60 s. API: every client's requests (apiserver_request_total). Bottleneck: ARM's "
        "budget when throttled or a bucket's busiest minute used 80 % of its refill, else the "
        "process with the most CPU.",
    ]
    return "\n".join(lines) + "\n"


def _tool_table(meta: Mapping[str, Any], phases: Sequence[PhaseFigures]) -> list[str]:
    """The identity tool's own figures per phase, as ``bench.identity --peer mic`` reports them."""
    tool = meta.get("identity_tool", "nodewright")
    lines = [
        "",
        f"Identity assignment by {tool} (ARM: its caller's requests for identity assignment, "
        "scale-set and machine GETs and PATCHes and their polls; per pod: per pod that needed an "
        "identity in the phase; API writes: its user's, from the audit log):",
        "",
        "| phase | Running→Assigned p50/p99/max s (n, missing) | ARM requests (per pod) | writes | "
        "polls | reads | 404s | 429s | all its ARM requests | API writes (identity kinds) | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phase in (p for p in phases if p.tool):
        arm, identity = phase.tool["arm_identity"], phase.identity
        pods = max(1, identity.count + identity.missing)
        lines.append(
            f"| {phase.name} | {_seconds(identity.p50)}/{_seconds(identity.p99)}/{_seconds(identity.max)} "
            f"({identity.count}, {identity.missing}) | {arm['requests']} ({arm['requests'] / pods:.2f}) "
            f"| {arm['writes']} | {arm['polls']} | {arm['reads']} | {arm['not_found']} | {arm['throttled']} "
            f"| {phase.tool['arm']['requests']} | {sum(phase.tool['api_writes'].values())} "
            f"({phase.tool['api_writes_identity']}) | {phase.tool.get('cpu_seconds', 0.0):.1f} |"
        )
    return lines


def _operations_table(phases: Sequence[PhaseFigures], top: int = 8) -> list[str]:
    """Pure: each phase's most frequent ARM requests (what its budget went on)."""
    rows = [phase for phase in phases if phase.operations]
    if not rows:
        return []
    lines = ["", f"ARM requests by operation, the {top} most frequent per phase:", ""]
    lines += ["| phase | requests by operation |", "|---|---|"]
    for phase in rows:
        cells = ", ".join(f"{name} {count:,}" for name, count in list(phase.operations.items())[:top])
        lines.append(f"| {phase.name} | {cells} |")
    return lines


def write_results(directory: Path, meta: Mapping[str, Any], phases: Sequence[PhaseFigures]) -> list[Path]:
    """Write ``scale-N.json``, ``scale-N.md`` (``scale-N-mic.*`` with MIC assigning identities)
    and (with matplotlib) ``scale.png``; returns paths."""
    directory.mkdir(parents=True, exist_ok=True)
    tool = meta.get("identity_tool", "nodewright")
    stem = directory / (f"scale-{meta['nodes']}" + ("" if tool == "nodewright" else f"-{tool}"))
    data = {"meta": dict(meta), "phases": [phase.to_json() for phase in phases]}
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    markdown = stem.with_suffix(".md")
    markdown.write_text(render_markdown(meta, phases))
    written = [json_path, markdown]
    chart = draw_chart(directory)
    if chart is not None:
        written.append(chart)
    return written


def _runs(directory: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted(directory.glob("scale-*.json")):
        data = json.loads(path.read_text())
        if data["meta"].get("identity_tool", "nodewright") == "nodewright":  # a peer's run apart
            runs.append(data)
    return sorted(runs, key=lambda r: r["meta"]["nodes"])


def draw_chart(directory: Path) -> Path | None:
    """``scale.png``: per phase, converge time, manager CPU, API requests, ARM reads and writes
    per minute and the manager's peak RSS against node count. None without matplotlib or runs."""
    try:
        import matplotlib  # noqa: PLC0415  # optional: only the chart needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    runs = _runs(directory)
    if not runs:
        return None
    panels: tuple[tuple[str, Callable[[dict[str, Any]], float]], ...] = (
        ("time to converge (s)", lambda p: p["seconds"]),
        ("manager CPU (s)", lambda p: p["cpu_seconds"].get("manager", 0.0)),
        ("API requests", lambda p: p["api_requests"]),
        ("ARM reads per minute", lambda p: p["arm"]["reads_per_minute"]),
        ("ARM writes per minute", lambda p: p["arm"]["writes_per_minute"]),
        ("manager peak RSS (MiB)", lambda p: p["manager_peak_rss_bytes"] / 2**20),
    )
    figure, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    names = [phase["name"].split(" (", maxsplit=1)[0] for phase in runs[-1]["phases"]]
    for axis, (title, value) in zip(axes.flat, panels, strict=True):
        for name in names:
            points = [
                (run["meta"]["nodes"], value(phase))
                for run in runs
                for phase in run["phases"]
                if phase["name"].split(" (", maxsplit=1)[0] == name
            ]
            axis.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
        axis.set_title(title)
        axis.set_xlabel("nodes")
    axes.flat[0].legend(fontsize="small")
    figure.suptitle("bench.scale: the whole manager, cost against node count (lower is better)")
    figure.tight_layout()
    path = directory / "scale.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
