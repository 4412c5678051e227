"""``python -m bench.reconcile_rate [--widgets N] [--rounds R] [--workers W]``: the framework's
reconciles a second per core, with no write and with a status write, on this machine with the
API server beside it (issue 32 item 5; targets >= 2,000 and >= 200).

A private API server (bare: no scheduler or kwok, nothing else writing) holds ``N`` Widgets
(``bench.workload``). Each mode runs in a child process of its own (``--child``: a Manager with
one Widget controller of ``W`` workers over the shared cache, no leader election, no metrics
server) so that its CPU seconds are its own, read with ``getrusage`` over the measured window:

- ``status-write``: every Widget starts without status; each reconcile reads it from the cache
  and merge-patches its status subresource (observedGeneration, Ready=True), as ``make bench``'s
  contenders do. Window: from the first reconcile to the N-th.
- ``no-write``: every Widget is converged; once the initial list's N reconciles are done, the
  child enqueues every key ``R`` times (``Controller.enqueue``, one round at a time, as events
  would); each reconcile reads the Widget from the cache, sees it converged and returns. Window:
  those ``N x R`` reconciles.

Reported per mode: reconciles, seconds, reconciles a second (wall), the child's CPU seconds, and
reconciles per CPU second (= per core: one Python process runs on at most one core at a time
for this work), next to its target. Results: ``bench/results/reconcile-rate.{json,md}``.

Side effects: a control plane, child processes, files under bench/results/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.kube import Api, create_many, install_crd
from bench.workload import (
    WIDGET_API_VERSION,
    WIDGET_PLURAL,
    is_converged,
    ready_status,
    widget_body,
    widget_crd,
)
from nodewright.devenv.controlplane import ControlPlane
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.observe.logs import configure
from nodewright.runtime.process.config import HealthConfig, LeaderElectionConfig, ManagerConfig, MetricsConfig
from nodewright.runtime.process.manager import Manager

__all__ = ["TARGETS", "RateFigures", "main", "measure"]

WIDGET = Kind(WIDGET_API_VERSION, "Widget", WIDGET_PLURAL)
TARGETS = {"no-write": 2_000.0, "status-write": 200.0}
"""Reconciles per CPU second each mode must reach (issue 32 item 5)."""


@dataclass(frozen=True)
class RateFigures:
    mode: str
    workers: int
    reconciles: int
    seconds: float
    cpu_seconds: float

    @property
    def per_second(self) -> float:
        return self.reconciles / self.seconds if self.seconds else 0.0

    @property
    def per_core(self) -> float:
        return self.reconciles / self.cpu_seconds if self.cpu_seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "per_second": self.per_second, "per_core": self.per_core}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Counter:
    """Counts reconciles; ``wait(n)`` blocks until ``n`` were done; marks the window."""

    def __init__(self) -> None:
        self.count = 0
        self.condition = threading.Condition()
        self.first: tuple[float, float] | None = None  # (monotonic, cpu) at the first reconcile

    def tick(self) -> None:
        with self.condition:
            if self.first is None:
                self.first = (time.monotonic(), _cpu())
            self.count += 1
            self.condition.notify_all()

    def wait(self, count: int, timeout: float = 600.0) -> None:
        with self.condition:
            if not self.condition.wait_for(lambda: self.count >= count, timeout):
                raise TimeoutError(f"{self.count} of {count} reconciles")


def _child(
    kubeconfig: str, namespace: str, mode: str, *, widgets: int, rounds: int, workers: int
) -> RateFigures:
    """In the child: run the controller, measure the window, return the figures."""
    configure("warning", "json")
    config = ManagerConfig(
        metrics=MetricsConfig(bind_address="0"),
        health=HealthConfig(bind_address="0"),
        leader_election=LeaderElectionConfig(enabled=False),
    )
    manager = Manager(config, kubeconfig=kubeconfig)
    counter = _Counter()
    client: Client = manager.client

    def reconcile(request: Request) -> Result:
        widget = manager.cache.get(WIDGET, request.name, request.namespace)
        if mode == "status-write" and not is_converged(widget):
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = ready_status(int(widget["metadata"].get("generation", 0)), now)
            client.patch(
                WIDGET, request.name, body, request.namespace, patch_type="merge", subresource="status"
            )
        counter.tick()
        return Result()

    controller = (
        manager.controller("widget")
        .for_(WIDGET, namespace=namespace)
        .with_options(max_concurrent_reconciles=workers)
        .complete(reconcile)
    )
    runner = threading.Thread(target=manager.run, daemon=True)
    runner.start()
    counter.wait(widgets)
    if mode == "status-write":
        assert counter.first is not None
        end, cpu_end = time.monotonic(), _cpu()
        figures = RateFigures(mode, workers, widgets, end - counter.first[0], cpu_end - counter.first[1])
    else:
        time.sleep(1.0)  # the initial reconciles' own events are in; the window starts clean
        keys = [Request(namespace, f"w-{index:06d}") for index in range(widgets)]
        start, cpu_start, done = time.monotonic(), _cpu(), counter.count
        for round_number in range(1, rounds + 1):
            for key in keys:
                controller.enqueue(key)
            counter.wait(done + widgets * round_number)
        figures = RateFigures(mode, workers, widgets * rounds, time.monotonic() - start, _cpu() - cpu_start)
    manager.stop()
    runner.join(30)
    return figures


def _widgets(api: Api, namespace: str, count: int, converged: bool) -> None:
    path = f"/apis/{WIDGET_API_VERSION}/namespaces/{namespace}/{WIDGET_PLURAL}"
    create_many(api, path, (widget_body(f"w-{index:06d}", index) for index in range(count)))
    if converged:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for index in range(count):
            name = f"w-{index:06d}"
            api.request(
                "PATCH",
                f"{path}/{name}/status",
                ready_status(1, now),
                content_type="application/merge-patch+json",
            )


def measure(widgets: int, rounds: int, workers: int) -> list[RateFigures]:
    """Both modes on a private bare API server; each in a child process."""
    results: list[RateFigures] = []
    with ControlPlane(bare=True) as plane:
        api = Api(plane.kubeconfig)
        install_crd(api, widget_crd())
        for mode in ("no-write", "status-write"):
            namespace = f"rate-{mode}-{uuid.uuid4().hex[:6]}"
            api.create_namespace(namespace)
            _widgets(api, namespace, widgets, converged=mode == "no-write")
            command = [sys.executable, "-m", "bench.reconcile_rate", "--child", mode]
            command += ["--kubeconfig", str(plane.kubeconfig), "--namespace", namespace]
            command += ["--widgets", str(widgets), "--rounds", str(rounds), "--workers", str(workers)]
            output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800)
            results.append(RateFigures(**json.loads(output.stdout.strip().splitlines()[-1])))
            api.delete_namespace(namespace)
    return results


def render(figures: list[RateFigures], load: tuple[list[float], list[float]]) -> str:
    lines = [
        "## Reconciles a second per core (`python -m bench.reconcile_rate`)",
        "",
        f"- {os.cpu_count()} cores; load average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end; "
        "the API server runs beside the measured process on the same cores",
        "",
        "| mode | workers | reconciles | seconds | reconciles/s | CPU s | reconciles per CPU s "
        "| target | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for item in figures:
        target = TARGETS[item.mode]
        lines.append(
            f"| {item.mode} | {item.workers} | {item.reconciles:,} | {item.seconds:.2f} "
            f"| {item.per_second:,.0f} "
            f"| {item.cpu_seconds:.2f} | {item.per_core:,.0f} | >= {target:,.0f} "
            f"| {'yes' if item.per_core >= target else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reconcile_rate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--widgets", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=50, help="no-write: times every key is enqueued")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--child", choices=sorted(TARGETS), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child:
        figures = _child(
            arguments.kubeconfig,
            arguments.namespace,
            arguments.child,
            widgets=arguments.widgets,
            rounds=arguments.rounds,
            workers=arguments.workers,
        )
        print(json.dumps(asdict(figures)), flush=True)
        return 0
    before = list(os.getloadavg())
    results = measure(arguments.widgets, arguments.rounds, arguments.workers)
    text = render(results, (before, list(os.getloadavg())))
    print(text)
    arguments.results.mkdir(parents=True, exist_ok=True)
    (arguments.results / "reconcile-rate.md").write_text(text)
    data = {"load_average": [before, list(os.getloadavg())], "modes": [r.to_json() for r in results]}
    (arguments.results / "reconcile-rate.json").write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
