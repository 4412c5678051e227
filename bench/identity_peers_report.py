"""The side-by-side report of ``bench.identity --peer mic``: figures per tool and phase from the
runs of :mod:`bench.identity_peers`, the issue's goals judged from them, and the files under
``bench/results/`` (``identity-vs-mic[-quick].{json,md,png}``; the PNG needs matplotlib and is
skipped with a note without it). Side effects: ``write`` writes files.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.identity_peers import (
    LATENCY,
    POLLING_INTERVAL,
    RETRY_AFTER,
    THROTTLES,
    PhaseRun,
    ToolRun,
    Workload,
)
from bench.report import machine_description

__all__ = ["main", "render", "summarise", "write"]

SCENARIOS = {"clean": "clean", "throttled": f"{THROTTLES} x 429 (Retry-After {RETRY_AFTER:g} s) per phase"}


def _percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _phase_figures(phase: PhaseRun, scale_sets: int) -> dict[str, Any]:
    changed = max(1, phase.pods_changed)
    return {
        "phase": phase.name,
        "seconds": round(phase.seconds, 2),
        "converged": phase.converged,
        "pods_changed": phase.pods_changed,
        "assigned": len(phase.latencies),
        "last_assigned_seconds": None if phase.last_assigned is None else round(phase.last_assigned, 2),
        "unassigned": phase.unassigned,
        "running_to_assigned": {
            "p50": _percentile(phase.latencies, 0.5),
            "p99": _percentile(phase.latencies, 0.99),
            "max": max(phase.latencies, default=None),
        },
        "flexible_pods": phase.flexible_pods,
        "flexible_assigned": phase.flexible_assigned,
        "seeded_identity_kept": phase.seeded_kept,
        "arm": dict(phase.arm),
        "arm_per_pod": {key: round(value / changed, 2) for key, value in phase.arm.items()},
        "arm_per_scale_set": {key: round(value / scale_sets, 2) for key, value in phase.arm.items()},
        "api_writes": dict(sorted(phase.api_writes.items())),
        "api_writes_total": sum(phase.api_writes.values()),
    }


def summarise(runs: list[ToolRun], workload: Workload, mode: str) -> dict[str, Any]:
    """Everything the report shows, JSON-ready."""
    return {
        "benchmark": "identity assignment: nodewright vs aad-pod-identity MIC v1.8.17",
        "mode": mode,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_description(),
        "workload": {
            **dataclasses.asdict(workload),
            "scale_sets": workload.scale_sets,
            "nodes": workload.scale_sets * workload.instances,
            "arm_latency_seconds": LATENCY,
            "polling_interval_seconds": POLLING_INTERVAL,
            "scenarios": SCENARIOS,
        },
        "runs": [
            {
                "tool": run.tool,
                "scenario": run.scenario,
                "cpu_seconds": round(run.cpu_seconds, 2),
                "exit_code": run.exit_code,
                "phases": [_phase_figures(phase, workload.scale_sets) for phase in run.phases],
            }
            for run in runs
        ],
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _converged_cell(phase: dict[str, Any], timeout: float) -> str:
    if phase["converged"]:
        return f"{phase['seconds']:.1f}"
    return f"never (> {timeout:.0f})"


def _table(results: dict[str, Any], scenario: str) -> list[str]:
    timeout = results["workload"]["phase_timeout"]
    lines = [
        "| phase | tool | all assigned (s) | Running→Assigned p50 / p99 / max (s) | never assigned "
        "| Flexible assigned | seeded id-web kept | ARM requests (per pod, per scale set) | writes "
        "| polls | 404s | 429s | API writes (tool's user) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs = [run for run in results["runs"] if run["scenario"] == scenario]
    for index in range(max((len(run["phases"]) for run in runs), default=0)):
        for run in runs:
            if index >= len(run["phases"]):
                continue
            phase = run["phases"][index]
            latency = phase["running_to_assigned"]
            arm, per_pod, per_set = phase["arm"], phase["arm_per_pod"], phase["arm_per_scale_set"]
            writes = ", ".join(f"{name} {count}" for name, count in phase["api_writes"].items()) or "0"
            lines.append(
                f"| {phase['phase']} | {run['tool']} | {_converged_cell(phase, timeout)} "
                f"| {_seconds(latency['p50'])} / {_seconds(latency['p99'])} / {_seconds(latency['max'])} "
                f"| {phase['unassigned']} | {phase['flexible_assigned']} of {phase['flexible_pods']} "
                f"| {_yes(phase['seeded_identity_kept'])} "
                f"| {arm.get('requests', 0)} "
                f"({per_pod.get('requests', 0):g}, {per_set.get('requests', 0):g}) "
                f"| {arm.get('writes', 0)} | {arm.get('polls', 0)} | {arm.get('not_found', 0)} "
                f"| {arm.get('throttled', 0)} | {phase['api_writes_total']}: {writes} |"
            )
    return lines


def _yes(value: bool) -> str:
    return "yes" if value else "**no**"


def _run(results: dict[str, Any], tool: str, scenario: str) -> dict[str, Any] | None:
    return next((r for r in results["runs"] if r["tool"] == tool and r["scenario"] == scenario), None)


def _arm_per_pod(run: dict[str, Any]) -> float:
    requests = sum(int(phase["arm"].get("requests", 0)) for phase in run["phases"])
    pods = sum(int(phase["pods_changed"]) for phase in run["phases"])
    return requests / max(1, pods)


def _time_goal(
    scenario: str, ours: dict[str, Any], theirs: dict[str, Any], timeout: float
) -> tuple[str, str, str]:
    """All assigned in <= 0.5x MIC's time. When MIC never got every pod assigned, its time is
    at least when it made its last assignment: nodewright is compared with that lower bound."""
    goal = f"{scenario}, {ours['phase']}: all assigned <= 0.5x MIC's time"
    if theirs["converged"]:
        ratio = ours["seconds"] / max(theirs["seconds"], 1e-9)
        measured = f"{ours['seconds']:.1f} s vs MIC {theirs['seconds']:.1f} s ({ratio:.2f}x)"
        return goal, measured, _verdict(ours["converged"] and ratio <= 0.5)
    last = theirs.get("last_assigned_seconds")
    flexible = theirs["flexible_pods"] - theirs["flexible_assigned"]
    measured = (
        f"{ours['seconds']:.1f} s; MIC never (> {timeout:.0f} s: {theirs['unassigned']} pods never "
        f"assigned, {flexible} of them on Flexible members)"
    )
    if not last:
        return goal, measured, _verdict(ours["converged"])
    ratio = ours["seconds"] / last
    measured += f"; its last assignment came at {last:.1f} s, {ratio:.2f}x that lower bound"
    return goal, measured, _verdict(ours["converged"] and ratio <= 0.5)


def goals(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(goal, measured, verdict) for each of the issue's goals, per scenario."""
    rows: list[tuple[str, str, str]] = []
    for scenario in SCENARIOS:
        ours, mic = _run(results, "nodewright", scenario), _run(results, "mic", scenario)
        if ours is None or mic is None:
            continue
        timeout = results["workload"]["phase_timeout"]
        for index, phase in enumerate(ours["phases"][:2]):
            rows.append(_time_goal(scenario, phase, mic["phases"][index], timeout))
        ours_rate, mic_rate = _arm_per_pod(ours), _arm_per_pod(mic)
        rows.append(
            (
                f"{scenario}: ARM requests per pod <= 0.5x MIC's",
                f"{ours_rate:.2f} vs {mic_rate:.2f} ({ours_rate / max(mic_rate, 1e-9):.2f}x)",
                _verdict(ours_rate <= 0.5 * mic_rate),
            )
        )
        flexible = [(p["flexible_assigned"], p["flexible_pods"]) for p in ours["phases"]]
        made, wanted = sum(f[0] for f in flexible), sum(f[1] for f in flexible)
        mic_made = sum(p["flexible_assigned"] for p in mic["phases"])
        rows.append(
            (
                f"{scenario}: every identity assigned on Flexible members",
                f"nodewright {made} of {wanted}, MIC {mic_made} of {wanted}",
                _verdict(made == wanted),
            )
        )
        kept = all(p["seeded_identity_kept"] for p in ours["phases"])
        mic_kept = all(p["seeded_identity_kept"] for p in mic["phases"])
        rows.append(
            (
                f"{scenario}: never removes an identity it did not add (seeded id-web)",
                f"nodewright {_kept(kept)}, MIC {_kept(mic_kept)}",
                _verdict(kept),
            )
        )
    return rows


def _kept(kept: bool) -> str:
    return "kept it" if kept else "removed it"


def _verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def render(results: dict[str, Any]) -> str:
    """The Markdown report: workload, one table per scenario, the goals."""
    workload, machine = results["workload"], results["machine"]
    lines = [
        f"# Identity assignment: nodewright vs aad-pod-identity MIC v1.8.17 ({results['mode']})",
        "",
        f"{results['date']}; {machine['cpus']} cores ({machine['cpu_model']}), load average "
        f"{', '.join(str(v) for v in machine['load_average'])} at the end (a shared machine: "
        "other work ran beside the bench, so times are indicative).",
        "",
        f"Workload, the same seed for both tools, one tool at a time, each on a fresh control plane "
        f"and ARM emulator: {workload['pods']} pods on {len(workload['identities'])} identities "
        f"({', '.join(workload['identities'])}) over {workload['nodes']} nodes in "
        f"{workload['uniform_scale_sets']} Uniform and {workload['flexible_scale_sets']} Flexible scale sets "
        f"of {workload['instances']}; id-web is on the first Uniform scale set before the tool starts. "
        f"Phases: burst (every pod at once), {workload['churn_percent']} % churn, scale to zero; "
        f"phase timeout {workload['phase_timeout']:.0f} s. "
        f"ARM latency {workload['arm_latency_seconds'] * 1000:.0f} ms "
        f"per call; both tools poll long-running operations every {workload['polling_interval_seconds']:g} s "
        "(MIC's fixed go-autorest delay).",
        "",
    ]
    for scenario, label in SCENARIOS.items():
        lines += [f"## {label}", "", *_table(results, scenario), ""]
        cpu = ", ".join(
            f"{run['tool']} {run['cpu_seconds']:.1f} s"
            for run in results["runs"]
            if run["scenario"] == scenario
        )
        lines += [f"CPU of the tool's process over the run: {cpu}.", ""]
    lines += [
        "ARM figures are the tool's own requests (split by its bearer token; MIC's was issued to its "
        "client ID by the emulator's v1 token route): writes are PUT/PATCH/POST/DELETE, polls are "
        "operation-status GETs; per pod = divided by the pods the phase changed, per scale set = "
        f"divided by {workload['scale_sets']}. API writes are from the API server's audit log, by the "
        "tool's own user, by resource. Running→Assigned: from the first time a pod was seen Running to "
        "the first time its AzureAssignedIdentity was seen Assigned.",
        "",
        "## Goals",
        "",
        "| goal | measured | verdict |",
        "|---|---|---|",
        *(f"| {goal} | {measured} | {verdict} |" for goal, measured, verdict in goals(results)),
        "",
    ]
    return "\n".join(lines)


def _draw(results: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib  # noqa: PLC0415 - optional: only the chart needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        from matplotlib.patches import Patch  # noqa: PLC0415
    except ImportError:
        return None
    figure, (times, requests) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels: list[str] = []
    colours = {"mic": "#c0504d", "nodewright": "#4f81bd"}
    for position, run in enumerate(results["runs"]):
        for index, phase in enumerate(run["phases"]):
            x = index * (len(results["runs"]) + 1) + position
            hatch = "" if phase["converged"] else "//"
            times.bar(x, phase["seconds"], color=colours.get(run["tool"], "grey"), hatch=hatch)
            requests.bar(x, phase["arm_per_pod"].get("requests", 0), color=colours.get(run["tool"], "grey"))
        labels.append(f"{run['tool']} ({run['scenario']})")
    phases = [phase["phase"] for phase in results["runs"][0]["phases"]] if results["runs"] else []
    ticks = [
        index * (len(results["runs"]) + 1) + (len(results["runs"]) - 1) / 2 for index in range(len(phases))
    ]
    for axis, title in (
        (times, "time to converge (s); hatched: never converged (timeout)"),
        (requests, "ARM requests per pod changed"),
    ):
        axis.set_xticks(ticks, phases)
        axis.set_title(title, fontsize=10)
    handles = [Patch(color=colour) for colour in colours.values()]
    figure.legend(handles, list(colours), loc="upper right")
    figure.suptitle("identity assignment, each bar one run (clean, then throttled)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write(results: dict[str, Any], directory: Path) -> list[Path]:
    """``identity-vs-mic[-quick].{json,md,png}`` under ``directory``; returns the paths written."""
    stem = "identity-vs-mic" if results["mode"] == "full" else "identity-vs-mic-quick"
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / f"{stem}.json", directory / f"{stem}.md"]
    written[0].write_text(json.dumps(results, indent=2) + "\n")
    written[1].write_text(render(results))
    chart = _draw(results, directory / f"{stem}.png")
    return written + ([chart] if chart else [])


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.identity_peers_report JSON [DIR]``: render the Markdown and the chart
    again from a recorded JSON (into DIR, default the JSON's directory)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    source = Path(arguments[0])
    results = json.loads(source.read_text())
    for path in write(results, Path(arguments[1]) if len(arguments) > 1 else source.parent):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
