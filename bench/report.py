"""Turning benchmark results into what people read: aligned stdout tables, a Markdown page,
JSON, and a PNG chart; plus the description of the machine they were measured on.

Owns ``machine_description``, ``render_tables`` (the same tables as plain text or Markdown),
``write_results`` (``<mode>.json``, ``<mode>.md``, ``<mode>.png`` and the ``README.md`` index
under the results directory) and ``draw_chart`` (matplotlib, Agg backend; skipped with a note
if matplotlib is not installed). Side effects: ``write_results`` and ``draw_chart`` write files.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["draw_chart", "machine_description", "render_tables", "write_results"]

MIB = 1024 * 1024


def machine_description() -> dict[str, Any]:
    """CPU model, cores, memory, kernel, load and tool versions of this machine."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    go = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        go = subprocess.run(["go", "version"], capture_output=True, text=True, timeout=10, check=False).stdout
    return {
        "cpu_model": model,
        "cpus": len(os.sched_getaffinity(0)),
        "memory_bytes": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "go": go.strip().removeprefix("go version "),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }


def _number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _mib(value: Any) -> str:
    return "—" if value is None else f"{value / MIB:,.1f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines.extend("| " + " | ".join(row) + " |" for row in rows)
        return "\n".join(lines)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [
        "  ".join(
            h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


def _ratio(value: Any, peer: Any) -> str:
    return f"{value / peer:.2f}x" if value and peer else "—"


def limited_table(widgets: Sequence[dict[str, Any]], markdown: bool) -> str:
    """The runs under a CPU limit, each against controller-runtime at the same workers (and kopf
    against nodewright at the most workers): converge time and CPU per Widget and per event."""
    limited = [r for r in widgets if r.get("cpu_limit_cores") and r["family"] != "raw"]
    peers = {r["workers"]: r for r in limited if r["family"] == "controller-runtime" and r["converged"]}
    rows = []
    for run in limited:
        peer = peers.get(run["workers"]) if run["family"] == "nodewright" else None
        rows.append(
            [
                run["contender"],
                _number(run["cpu_limit_cores"], 2),
                _number(run.get("converge_seconds"), 2),
                _ratio(run.get("converge_seconds"), peer and peer.get("converge_seconds")),
                _number(run.get("cpu_ms_per_widget"), 3),
                _ratio(run.get("cpu_ms_per_widget"), peer and peer.get("cpu_ms_per_widget")),
                _number(run.get("cpu_ms_per_event"), 3),
                _ratio(run.get("cpu_ms_per_event"), peer and peer.get("cpu_ms_per_event")),
                _number(run.get("throttled_seconds"), 1),
                _number(run.get("latency_p99_ms"), 0),
                "yes" if run["converged"] else f"NO: {run.get('error', '').splitlines()[0][:60]}",
            ]
        )
    headers = [
        "contender",
        "CPU limit (cores)",
        "converge s",
        "vs controller-runtime",
        "CPU ms/Widget",
        "vs controller-runtime",
        "CPU ms/event",
        "vs controller-runtime",
        "throttled s",
        "p99 ms",
        "converged",
    ]
    return _table(headers, rows, markdown) if rows else ""


def render_tables(results: dict[str, Any], *, markdown: bool = False) -> str:
    """Every figure of a run as tables (plain aligned text, or Markdown)."""
    parts: list[str] = []

    def heading(text: str) -> str:
        return f"### {text}" if markdown else f"== {text} =="

    widgets = results.get("widgets") or []
    if table := limited_table(widgets, markdown):
        cores = next(r["cpu_limit_cores"] for r in widgets if r.get("cpu_limit_cores"))
        parts.append(
            heading(f"Under a CPU limit of {cores:g} core per contender (cgroup CFS quota), as in a pod")
        )
        parts.append(table)
        widgets = [r for r in widgets if not r.get("cpu_limit_cores")]
    if widgets:
        ceiling = max(
            (r["reconciles_per_second"] or 0 for r in widgets if r["family"] == "raw" and r["converged"]),
            default=None,
        )
        rows = []
        for run in widgets:
            rate = run.get("reconciles_per_second")
            share = f"{100 * rate / ceiling:.0f} %" if rate and ceiling else "—"
            rows.append(
                [
                    run["contender"],
                    _number(run.get("converge_seconds"), 2),
                    _number(run.get("startup_seconds"), 2),
                    _number(rate, 0),
                    share,
                    _number(run.get("burst_seconds"), 2),
                    _number(run.get("latency_p50_ms"), 0),
                    _number(run.get("latency_p99_ms"), 0),
                    _number(run.get("cpu_seconds"), 2),
                    _number(run.get("apiserver_cpu_seconds"), 1),
                    _mib(run.get("peak_rss_bytes")),
                    f"{_number(run.get('reconciles'))}/{_number(run.get('patches'))}",
                    "yes" if run["converged"] else f"NO: {run.get('error', '').splitlines()[0][:60]}",
                ]
            )
        objects = widgets[0]["objects"]
        parts.append(heading(f"Reconcile: {objects:,} Widgets backlog + {objects:,} burst"))
        parts.append(
            _table(
                [
                    "contender",
                    "converge s",
                    "startup s",
                    "reconciles/s",
                    "of raw",
                    "burst s",
                    "p50 ms",
                    "p99 ms",
                    "CPU s",
                    "apiserver CPU s",
                    "peak RSS MiB",
                    "reconciles/patches",
                    "converged",
                ],
                rows,
                markdown,
            )
        )
    cache = results.get("cache") or []
    if cache:
        rows = [
            [
                run["contender"],
                "yes" if run["transform"] else "no",
                _number(run.get("objects")),
                _number(run.get("bytes_per_object"), 0),
                _number((run.get("bytes_per_object") or 0) / 1024, 2) if run.get("bytes_per_object") else "—",
                _number(run.get("heap_bytes_per_object"), 0),
                _mib(run.get("rss_delta_bytes")),
                _mib(run.get("peak_rss_bytes")),
                _number(run.get("sync_seconds"), 1),
                run.get("error", "").splitlines()[0][:60] if run.get("error") else "",
            ]
            for run in cache
        ]
        parts.append(heading(f"Cache memory: {cache[0].get('objects') or results.get('pods', 0):,} Pods"))
        parts.append(
            _table(
                [
                    "informer",
                    "transform",
                    "Pods",
                    "RSS B/Pod",
                    "RSS KiB/Pod",
                    "heap B/Pod",
                    "RSS delta MiB",
                    "peak RSS MiB",
                    "sync s",
                    "error",
                ],
                rows,
                markdown,
            )
        )
    queues = results.get("workqueue") or []
    if queues:
        parts.append(heading("Work queue: one producer, 8 workers, 200,000 adds over 10,000 keys"))
        parts.append(
            _table(
                ["queue", "workers", "adds", "gets", "seconds", "ops/s (add+get+done)", "adds/s", "gets/s"],
                [
                    [
                        queue["implementation"],
                        _number(queue["workers"]),
                        _number(queue["adds"]),
                        _number(queue["gets"]),
                        _number(queue["seconds"], 2),
                        _number(queue["operations_per_second"], 0),
                        _number(queue["adds_per_second"], 0),
                        _number(queue["gets_per_second"], 0),
                    ]
                    for queue in queues
                ],
                markdown,
            )
        )
    for note in results.get("notes") or ():
        parts.append(f"- {note}" if markdown else f"note: {note}")
    return "\n\n".join(parts)


def _machine_lines(results: dict[str, Any]) -> list[str]:
    machine = results.get("machine") or {}
    versions = results.get("versions") or {}
    return [
        f"- CPU: {machine.get('cpu_model', '?')}, {machine.get('cpus', '?')} cores (nproc)",
        f"- Memory: {machine.get('memory_bytes', 0) / 1024**3:.1f} GiB; kernel {machine.get('kernel', '?')}",
        f"- Python {machine.get('python', '?')}; {machine.get('go', '?')}",
        f"- Load average at start {results.get('load_before')}, at end {results.get('load_after')}",
        "- Versions: " + ", ".join(f"{name} {version}" for name, version in versions.items()),
    ]


def write_results(results: dict[str, Any], directory: Path, mode: str) -> list[Path]:
    """Write ``<mode>.json``, ``<mode>.md``, ``<mode>.png`` and refresh ``README.md``."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{mode}.json"
    json_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    written = [json_path]
    chart = draw_chart(results, directory / f"{mode}.png")
    if chart is not None:
        written.append(chart)
    page = [
        f"## {mode.capitalize()} run ({results.get('started', '')})",
        "",
        *_machine_lines(results),
        "",
        render_tables(results, markdown=True),
    ]
    if chart is not None:
        page += ["", f"![{mode} chart]({chart.name})"]
    markdown_path = directory / f"{mode}.md"
    markdown_path.write_text("\n".join(page) + "\n")
    written.append(markdown_path)
    sections = [
        "# nodewright benchmark results",
        "",
        "Produced by `make bench` (quick) and `make bench FULL=1` (full); see `bench/__init__.py`",
        "and `bench/widgets.py` for what each column means. Raw logs stay in `raw/` (not committed).",
        "`make bench CPU_LIMIT=0.5` runs every reconcile contender under a 0.5-core CFS quota in a",
        "cgroup of its own, as a pod with that CPU limit would (the API server stays outside); its",
        "table gives CPU per converged Widget and per object event side by side with",
        "controller-runtime at the same workers.",
        "",
        "Workload: N Widgets (a small namespaced CRD with a status subresource); a contender must",
        "merge-patch each one's status with observedGeneration and a Ready=True condition. Every",
        "contender runs alone, as its own process, in a fresh namespace of a private API server.",
        "",
        "Columns: *converge s* = contender start to the last of N pre-created Widgets converged",
        "(start-up and initial list included); *startup s* = to the first one; *reconciles/s* =",
        "those Widgets per second between the first and the last converged; *of raw* = that rate",
        "over the best raw ceiling (plain threads sending the same patches, 4 or 16 threads);",
        "*burst s* = first create to last converged for N more Widgets created while the contender",
        "runs; *p50/p99 ms* = their create-to-status latency (client-side send time of the POST to",
        "the harness's own watch seeing Ready); *CPU s* = user+system of the contender over the",
        "whole run; *apiserver CPU s* = the API server's over the same run; *peak RSS* = VmHWM;",
        "*reconciles/patches* = the contender's own counters.",
        "",
        "Settings: controller-runtime reads unstructured objects from its cache and runs without",
        "client-side rate limiting (QPS -1), like the Python contenders; kopf keeps its defaults",
        "except Event posting (off: nobody else posts Events). Cache memory: RSS delta after GC",
        "(Python: gc.collect + malloc_trim; Go: runtime.GC + FreeOSMemory) over the Pods cached;",
        "*heap* = Python deep size of the stored objects / Go live-heap delta. The Pods have",
        "realistic specs and managedFields but no status beyond Pending (no scheduler or kubelet).",
    ]
    for name in ("full-limited", "quick-limited", "full", "quick"):  # the pod-like runs head the page
        path = directory / f"{name}.md"
        if path.exists():
            sections += ["", path.read_text().rstrip()]
    readme = directory / "README.md"
    readme.write_text("\n".join(sections) + "\n")
    written.append(readme)
    return written


def draw_chart(results: dict[str, Any], path: Path) -> Path | None:
    """A PNG with reconcile throughput, latency and cache memory; None without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415  # optional: only the chart needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    widgets = [r for r in results.get("widgets") or [] if r.get("converged")]
    cache = [r for r in results.get("cache") or [] if r.get("bytes_per_object")]
    panels = sum(1 for present in (widgets, widgets, cache) if present)
    if not panels:
        return None
    figure, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.8), squeeze=False)
    column = 0

    def colour(family: str) -> str:
        return {
            "nodewright": "#2a9d8f",
            "kopf": "#e76f51",
            "controller-runtime": "#264653",
            "raw": "#9e9e9e",
            "client-go": "#264653",
        }.get(family, "#8d99ae")

    if widgets:
        axis = axes[0][column]
        names = [r["contender"] for r in widgets]
        axis.barh(
            names,
            [r["reconciles_per_second"] or 0 for r in widgets],
            color=[colour(r["family"]) for r in widgets],
        )
        axis.invert_yaxis()
        axis.set_xlabel("Widgets reconciled per second (higher is better)")
        axis.set_title(f"Reconcile throughput, {widgets[0]['objects']:,} Widgets")
        column += 1
        axis = axes[0][column]
        timed = [r for r in widgets if r.get("latency_p50_ms") is not None]
        names = [r["contender"] for r in timed]
        axis.barh(names, [r["latency_p99_ms"] for r in timed], color="#cccccc", label="p99")
        axis.barh(
            names,
            [r["latency_p50_ms"] for r in timed],
            color=[colour(r["family"]) for r in timed],
            label="p50",
        )
        axis.invert_yaxis()
        axis.set_xlabel("create-to-status latency, ms (lower is better)")
        axis.set_title("Latency under a burst of creates")
        axis.legend(loc="lower right")
        column += 1
    if cache:
        axis = axes[0][column]
        names = [f"{r['contender']}{' +transform' if r['transform'] else ''}" for r in cache]
        axis.barh(
            names, [r["bytes_per_object"] / 1024 for r in cache], color=[colour(r["family"]) for r in cache]
        )
        axis.invert_yaxis()
        axis.set_xlabel("KiB of RSS per cached Pod (lower is better)")
        axis.set_title(f"Informer memory, {cache[0]['objects']:,} Pods")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
