"""nodewright's IPAM and Cilium's Azure IPAM operator side by side (``python -m bench.ipam --peer
cilium``): the same workload (nodes, warm pods, churn, a steady window), one tool at a time on a
fresh cluster and emulator, and the report in ``bench/results/ipam-vs-cilium.{md,json,png}``.

nodewright runs its IPAM reconciler with the CRD consumer (the pod address agent reads
NodeNetworkConfig status, as Cilium's agent reads its CiliumNode): batch 16, buffer 50 %.
Cilium runs with ``pre-allocate`` 16. Measured for each:

- time to fill every node (from every Node joined to every node's pool holding 16 IPs);
- ARM writes per IP (every write of the run over the IP configurations added to the NICs,
  released ones included);
- ARM reads per minute in the steady window: after the churn, once the tool has made no ARM
  write for 30 s (at most 240 s), for ``--steady-seconds`` with no pod change;
- pod wait on IPs during churn (pods that found no free IP and how long until they got one).

Goal (issue 35): nodewright fills >= 2x faster, with no more ARM writes per IP and no more
steady-state reads. Side effects: everything ``bench.ipam`` and ``bench.ipam_cilium`` start, and
the result files.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from bench import ipam
from bench.ipam_cilium import build_operator, run_cilium

__all__ = ["compare", "goals", "render_side_by_side"]

RESULTS = Path(__file__).resolve().parent / "results"
ROWS = (
    ("time to fill every node (s)", "first_batches_seconds", "fill"),
    ("nodes filled (of N) when measured", "nodes_filled", "{}"),
    ("ARM writes per IP added", "arm_writes_per_ip", "{:.3f}"),
    ("IPs added / ARM writes (whole run)", ("ips_added", "arm_writes_total"), "{} / {}"),
    ("quiet (no ARM write for 30 s) after churn, s", "settle_seconds", "{:.0f}"),
    ("steady window, s", "steady_seconds_actual", "{:.0f}"),
    ("ARM reads per minute, steady state", "steady_reads_per_minute", "{:.1f}"),
    ("ARM writes in the steady window", "steady_writes", "{}"),
    ("pod wait on IPs in churn p50 (ms)", "pool_wait_p50", "ms"),
    ("pod wait on IPs in churn p99 (ms)", "pool_wait_p99", "ms"),
    ("pod wait on IPs in churn max (ms)", "pool_wait_max", "ms"),
    ("pods that found no free IP / started in churn", ("starved_pods", "churn_pods"), "{} / {}"),
    (
        "ARM reads/s, writes/s during churn",
        ("arm_reads_per_second", "arm_writes_per_second"),
        "{:.2f} / {:.3f}",
    ),
    ("429s answered by the emulator", "emulator_429s", "{}"),
)


def _cell(figures: dict[str, Any], key: Any, form: str) -> str:
    if not figures:
        return "not run"
    if isinstance(key, tuple):
        values = [figures.get(k) for k in key]
        return "-" if None in values else form.format(*values)
    value = figures.get(key)
    if value is None:
        return "-"
    if form == "ms":
        return "never" if value == float("inf") else f"{value * 1000:.0f}"
    if form == "fill":
        limit = figures.get("fill_limit_seconds")
        return f"> {limit:.0f} (not filled)" if value == float("inf") else f"{value:.1f}"
    return form.format(value)


def goals(nodewright: dict[str, Any], cilium: dict[str, Any]) -> dict[str, bool]:
    """The issue's three goals, judged on one pair of runs. Pure."""
    if not nodewright or not cilium or "arm_writes_per_ip" not in cilium:
        return {}
    return {
        "fills >= 2x faster": cilium["first_batches_seconds"] >= 2 * nodewright["first_batches_seconds"],
        "no more ARM writes per IP": nodewright["arm_writes_per_ip"] <= cilium["arm_writes_per_ip"],
        "no more steady-state reads": nodewright["steady_reads_per_minute"]
        <= cilium["steady_reads_per_minute"],
    }


def render_side_by_side(runs: dict[int, dict[str, dict[str, Any]]], notes: list[str]) -> str:
    """Markdown: one table per node count, the goals, the notes."""
    lines = ["# nodewright IPAM vs Cilium's Azure IPAM operator (v1.15.19)", ""]
    lines += [f"- {note}" for note in notes] + [""]
    for nodes, pair in sorted(runs.items()):
        tools = [t for t in ("nodewright", "cilium") if "conditions" in pair.get(t, {})]
        stamps = [f"- {tool}: {pair[tool]['conditions']}" for tool in tools]
        lines += [f"## {nodes} nodes", "", *stamps, *([""] if stamps else [])]
        lines += ["| | nodewright | Cilium operator |", "| --- | --- | --- |"]
        for label, key, form in ROWS:
            lines.append(
                f"| {label} | {_cell(pair.get('nodewright', {}), key, form)} | "
                f"{_cell(pair.get('cilium', {}), key, form)} |"
            )
        judged = goals(pair.get("nodewright", {}), pair.get("cilium", {}))
        if judged:
            lines += [
                "",
                "Goals: " + "; ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in judged.items()),
            ]
        lines.append("")
    return "\n".join(lines)


def draw(runs: dict[int, dict[str, dict[str, Any]]], path: Path) -> Path | None:
    """Bars per node count: fill time, writes per IP, steady reads per minute. None without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415  # optional: only the chart needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    panels = (
        ("first_batches_seconds", "time to fill every node, s"),
        ("arm_writes_per_ip", "ARM writes per IP"),
        ("steady_reads_per_minute", "ARM reads/min, steady"),
        ("pool_wait_p99", "pod wait on IPs p99 in churn, s (0: none waited)"),
    )
    figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4.2), squeeze=False)
    sizes = sorted(runs)
    for column, (key, title) in enumerate(panels):
        axis = axes[0][column]
        peak = 0.0
        for offset, (tool, colour) in enumerate((("nodewright", "#2a9d8f"), ("cilium", "#e76f51"))):
            figures = [runs[n].get(tool, {}) for n in sizes]
            values = [float(f.get(key) or 0.0) for f in figures]
            unfilled = [i for i, v in enumerate(values) if v == float("inf")]
            for index in unfilled:  # drawn up to the limit it was given, hatched and labelled
                values[index] = float(figures[index].get("fill_limit_seconds") or 0.0)
            peak = max([peak, *values])
            positions = [i + offset * 0.4 for i in range(len(sizes))]
            bars = axis.bar(positions, values, 0.4, label=tool, color=colour)
            for index in unfilled:
                bars[index].set_hatch("//")
                axis.annotate("not filled", (positions[index], values[index]), ha="center", va="bottom")
        axis.set_xticks([i + 0.2 for i in range(len(sizes))], [f"{n} nodes" for n in sizes])
        axis.set_ylim(bottom=0, top=None if peak > 0 else 1)
        axis.set_title(title)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _scenario(nodes: int, churn_seconds: float, steady_seconds: float) -> ipam.Scenario:
    return ipam.Scenario(
        consumer="crd", churn_seconds=churn_seconds, nodes=nodes, steady_seconds=steady_seconds
    )


def compare(
    node_counts: list[int],
    churn_seconds: float,
    steady_seconds: float,
    kubeconfig: str | None,
    fill_limit: float | None = None,
) -> dict[int, dict[str, dict[str, Any]]]:
    """Run both tools at each node count; write and return the results."""
    binary = build_operator()
    runs: dict[int, dict[str, dict[str, Any]]] = {}
    for nodes in node_counts:
        scenario = _scenario(nodes, churn_seconds, steady_seconds)
        pair = runs.setdefault(nodes, {})
        pair["nodewright"] = _stamped(ipam.measure(scenario, kubeconfig))
        write(runs, churn_seconds)
        pair["cilium"] = run_cilium(
            nodes,
            latency=ipam.LATENCY,
            kubeconfig=kubeconfig,
            drive=lambda rig, rng, s=scenario: ipam._drive(rig, s, rng),  # the same workload
            figures_of=lambda rig, initial, s=scenario: ipam.common_figures(rig, s, initial),
            binary=binary,
            fill_limit=fill_limit or 600.0 + 4 * nodes,
        )
        _stamped(pair["cilium"])
        write(runs, churn_seconds)
    return runs


def _stamped(figures: dict[str, Any]) -> dict[str, Any]:
    """``figures`` with when they were measured and the load average then (each node count's
    table keeps its own: a write keeps the node counts it did not run)."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    figures["conditions"] = f"measured {when}, load average {os.getloadavg()[0]:.1f}"
    return figures


def earlier_runs() -> dict[int, dict[str, dict[str, Any]]]:
    """The runs in ``ipam-vs-cilium.json`` now, by node count (empty if there is none)."""
    path = RESULTS / "ipam-vs-cilium.json"
    if not path.exists():
        return {}
    return {int(nodes): pair for nodes, pair in json.loads(path.read_text()).get("runs", {}).items()}


def write(
    runs: dict[int, dict[str, dict[str, Any]]], churn_seconds: float, extra_notes: tuple[str, ...] = ()
) -> None:
    """``ipam-vs-cilium.{json,md,png}`` under ``bench/results/``."""
    notes = [
        f"Workload per node count N: one uniform scale set of N instances, {ipam.LATENCY * 1000:.0f} ms per "
        f"ARM call, {ipam.WARM_POPULATION} x N/50 warm pods placed by kube-scheduler at {ipam.RATE:.0f}/s, "
        f"then {churn_seconds:.0f} s of churn ({ipam.RATE:.0f} pods/s created and deleted), then, once "
        "the tool made no ARM write for 30 s, a steady window with no pod change (its length in each "
        "table). IPs added count every IP configuration that was ever on a NIC (released ones too).",
        "nodewright: IPAM reconciler, CRD consumer, batch 16, buffer 50 %, mutation budget 10/s burst 20. "
        "Cilium: cilium-operator-azure v1.15.19 as built from upstream's module, its default flags "
        "(IPAM API limit 4 QPS burst 20, 50 allocation workers), pre-allocate 16; a harness plays its agent.",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores "
        f"({platform.python_version()}); each node count's table says when its tools were measured and "
        "the load then (a table without that line is from an earlier run).",
        *extra_notes,
    ]
    RESULTS.mkdir(exist_ok=True)
    runs = {**earlier_runs(), **runs}  # node counts not run this time keep their last figures
    clean = {
        n: {t: {k: v for k, v in f.items() if k != "operator_log_tail"} for t, f in p.items()}
        for n, p in runs.items()
    }
    (RESULTS / "ipam-vs-cilium.json").write_text(
        json.dumps({"notes": notes, "runs": clean}, indent=2, default=str) + "\n"
    )
    (RESULTS / "ipam-vs-cilium.md").write_text(render_side_by_side(runs, notes))
    draw(runs, RESULTS / "ipam-vs-cilium.png")
