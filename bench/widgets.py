"""The reconcile benchmark: N Widgets, one contender at a time, each in a fresh namespace.

For every contender the harness
1. creates N "backlog" Widgets while no contender runs, then starts the contender and times
   how long it takes from process start until the harness's own watch sees every Widget
   converged (``converge_seconds``, which includes start-up and the initial list), and the
   steady rate between the first and the last converged Widget (``reconciles_per_second``);
2. (controllers only) creates N more "burst" Widgets while the contender runs and measures each
   one's create-to-status latency: from the client-side moment its POST was sent to the moment
   the harness's watch saw it converged (p50/p99), and the burst's wall time;
3. stops the contender with SIGTERM and records its CPU seconds (user+system, from ``os.wait4``
   and ``/proc``), its peak RSS (VmHWM), the API server's CPU seconds over the run, and the
   counters the contender printed.

With ``cpu_limit`` (cores) the contender runs in a cgroup of its own with that CFS quota, as a pod
with that CPU limit would (``bench/cpu_limit.py``); the API server and the harness stay outside.
CPU is then also given per Widget converged (2N: backlog and burst) and per object event (the N
objects of the initial list plus every watch event the harness saw while the contender ran; the
contender's watch carries the same stream).

The raw ceiling takes part in step 1 only: it is handed the list of backlog Widgets.
Side effects: creates namespaces and Widgets, starts processes, writes logs under ``log_dir``.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.cpu_limit import CpuLimit
from bench.kube import Api, ConvergenceWatch, create_many
from bench.processes import Contender, RunningProcess, cpu_seconds_of
from bench.workload import WIDGET_API_VERSION, WIDGET_PLURAL, widget_body

__all__ = ["WidgetRun", "percentile", "run_widget_contender"]

CREATE_WORKERS = 16


@dataclass
class WidgetRun:
    """The figures of one contender's run (times in seconds, memory in bytes)."""

    contender: str
    family: str
    workers: int | None
    objects: int
    converged: bool
    converge_seconds: float | None = None
    startup_seconds: float | None = None
    reconciles_per_second: float | None = None
    burst_seconds: float | None = None
    burst_per_second: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    cpu_seconds: float | None = None
    cpu_seconds_backlog: float | None = None
    apiserver_cpu_seconds: float | None = None
    peak_rss_bytes: int | None = None
    reconciles: int | None = None
    patches: int | None = None
    create_per_second: float | None = None
    exit_code: int | None = None
    cpu_limit_cores: float | None = None
    throttled_seconds: float | None = None
    object_events: int | None = None
    cpu_ms_per_widget: float | None = None
    cpu_ms_per_event: float | None = None
    error: str = ""

    def account_cpu(self, cpu_seconds: float, converged_widgets: int, object_events: int) -> None:
        """CPU over the run, and per converged Widget and per object event."""
        self.cpu_seconds = cpu_seconds
        self.object_events = object_events
        if converged_widgets:
            self.cpu_ms_per_widget = cpu_seconds * 1000 / converged_widgets
        if object_events:
            self.cpu_ms_per_event = cpu_seconds * 1000 / object_events

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _timeout(objects: int) -> float:
    return 120.0 + objects * 0.25


def run_widget_contender(
    api: Api,
    contender: Contender,
    objects: int,
    log_dir: Path,
    *,
    apiserver_pid: int | None = None,
    cpu_limit: float | None = None,
    on_start: Callable[[int], None] | None = None,
) -> WidgetRun:
    """Run one contender through the workload (see the module docstring) and measure it."""
    namespace = f"bench-{contender.name.replace('_', '-')[:30]}-{uuid.uuid4().hex[:6]}"
    result = WidgetRun(contender.name, contender.family, contender.workers, objects, converged=False)
    collection = f"/apis/{WIDGET_API_VERSION}/namespaces/{namespace}/{WIDGET_PLURAL}"
    api.create_namespace(namespace)
    watch = ConvergenceWatch(api, collection).start()
    process: RunningProcess | None = None
    limit, why = CpuLimit.make(contender.name, cpu_limit) if cpu_limit else (None, "")
    if why:
        result.error = why
        return result
    result.cpu_limit_cores = cpu_limit
    events_before = 0
    try:
        backlog = [f"backlog-{i:06d}" for i in range(objects)]
        started = time.monotonic()
        create_many(api, collection, (widget_body(name, i) for i, name in enumerate(backlog)))
        result.create_per_second = objects / (time.monotonic() - started)
        names_file = log_dir / f"{contender.name}.names"
        names_file.parent.mkdir(parents=True, exist_ok=True)
        names_file.write_text("".join(f"{name} 1\n" for name in backlog))

        apiserver_before = cpu_seconds_of(apiserver_pid) if apiserver_pid else None
        command = tuple(
            part.format(namespace=namespace, names=names_file, kubeconfig=api.kubeconfig)
            for part in contender.command
        )
        command = limit.wrap(command) if limit else command
        events_before = watch.events
        process = RunningProcess(
            Contender(contender.name, contender.family, command, contender.workers, contender.env),
            log_dir,
            {"KUBECONFIG": str(api.kubeconfig)},
        )
        running = process
        if on_start is not None:
            on_start(process.pid)  # e.g. a profiler attaching

        def alive() -> bool:
            # A one-shot contender that exited cleanly has sent everything: keep watching.
            return running.running() or (contender.oneshot and running.exit_code == 0)

        if not watch.wait_for(backlog, _timeout(objects), alive):
            result.error = f"backlog: {watch.count(backlog)}/{objects} converged; {_why(process, watch)}"
            return result
        times = [watch.converged[name] for name in backlog]
        first, last = min(times), max(times)
        result.converge_seconds = last - process.started
        result.startup_seconds = first - process.started
        result.reconciles_per_second = objects / (last - first) if last > first else None
        result.cpu_seconds_backlog = process.cpu_seconds()

        if not contender.oneshot:
            burst = [f"burst-{i:06d}" for i in range(objects)]
            sent = create_many(
                api,
                collection,
                (widget_body(name, i) for i, name in enumerate(burst)),
                workers=CREATE_WORKERS,
            )
            if not watch.wait_for(burst, _timeout(objects), alive):
                result.error = f"burst: {watch.count(burst)}/{objects} converged; {_why(process, watch)}"
                return result
            latencies = [(watch.converged[name] - sent[name]) * 1000 for name in burst]
            result.burst_seconds = max(watch.converged[n] for n in burst) - min(sent.values())
            result.burst_per_second = objects / result.burst_seconds
            result.latency_p50_ms = percentile(latencies, 0.50)
            result.latency_p99_ms = percentile(latencies, 0.99)
            result.latency_max_ms = max(latencies)
        else:
            process.wait(60)
        result.converged = True
        if apiserver_pid and apiserver_before is not None:
            result.apiserver_cpu_seconds = cpu_seconds_of(apiserver_pid) - apiserver_before
        return result
    finally:
        watch.stop()
        if process is not None:
            process.stop()
            result.exit_code = process.exit_code
            converged_widgets = sum(1 for name in watch.converged if name.startswith(("backlog-", "burst-")))
            result.account_cpu(
                process.cpu_seconds(), converged_widgets, objects + watch.events - events_before
            )
            result.peak_rss_bytes = process.peak_rss_bytes
            report = process.report()
            result.reconciles = report.get("reconciles")
            result.patches = report.get("patches")
            if result.error:
                result.error += f"\n{process.stderr_tail()}"
        if limit is not None:
            result.throttled_seconds = limit.throttling()[1]
            limit.close()
        api.delete_namespace(namespace)


def _why(process: RunningProcess, watch: ConvergenceWatch) -> str:
    if watch.error is not None:
        return f"the harness's watch failed: {watch.error}"
    if not process.running():
        return f"the contender exited with code {process.exit_code}"
    return "timed out"
