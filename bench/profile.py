"""``python -m bench.profile [--objects N] [--pods N]``: where the nodewright contender's CPU goes.

Flame graphs (py-spy, 250 Hz, only the thread holding the GIL: the Python code that ran, not
threads waiting on a socket; sampling without stopping the process) of
1. the reconcile contender at 1 and at 16 workers on the Widget workload (``bench/widgets.py``:
   N Widgets backlog, then N burst), attached once the process has exec'd;
2. one informer's initial sync of 10,000 Pods (the cache contender, compressed store).
Each profile is written twice under ``bench/results/profiles/``: an SVG flame graph and the
collapsed stacks (``.txt``), from which ``summary.md`` lists the functions with the most samples
on top of the stack (self) and on it anywhere (total).

Side effects: a private control plane, processes (py-spy needs ptrace rights: root, or
``kernel.yama.ptrace_scope`` 0), files under ``bench/results/profiles/``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench.cache_memory import create_pods, run_cache_contender
from bench.kube import Api, install_crd
from bench.processes import Contender
from bench.widgets import run_widget_contender
from bench.workload import widget_crd

HERE = Path(__file__).resolve().parent
PROFILES = HERE / "results" / "profiles"
PY_SPY = str(Path(sys.executable).with_name("py-spy"))
RATE = "250"
FORMATS = (("flamegraph", "svg"), ("raw", "txt"))
"""Each profile twice: the flame graph, and the collapsed stacks ``summarize`` reads."""


def py_spy(form: str, output: Path, *target: str) -> tuple[str, ...]:
    """A py-spy command sampling ``target`` (``--pid N`` or ``-- command ...``) into ``output``."""
    common = ("--rate", RATE, "--nonblocking", "--gil", "--format", form, "--output", str(output))
    return (PY_SPY, "record", *common, *target)


class Profiler:
    """Two py-spy samplers (flame graph and collapsed stacks) on one pid, until it exits."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.samplers: list[subprocess.Popen[bytes]] = []

    def attach(self, pid: int) -> None:
        deadline = time.monotonic() + 10
        while "python" not in os.path.basename(os.readlink(f"/proc/{pid}/exe")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"pid {pid} never became a Python process")
            time.sleep(0.01)
        for form, suffix in FORMATS:
            command = py_spy(form, PROFILES / f"{self.name}.{suffix}", "--pid", str(pid))
            self.samplers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

    def finish(self) -> None:
        for sampler in self.samplers:
            _, error = sampler.communicate(timeout=120)
            if sampler.returncode != 0:
                raise RuntimeError(f"py-spy failed for {self.name}: {error.decode()[-500:]}")


def summarize(name: str, top: int = 15) -> list[str]:
    """The top functions by self and by total samples, from ``<name>.txt`` (collapsed stacks)."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    samples = 0
    for line in (PROFILES / f"{name}.txt").read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]  # a function, not a line
        weight = int(count)
        samples += weight
        own[frames[-1]] += weight
        for frame in set(frames):
            anywhere[frame] += weight
    lines = [f"### {name} ({samples:,} samples at {RATE} Hz)", ""]
    for title, counter in (("self", own), ("total", anywhere)):
        lines += ["", f"| {title} % | function (file) |", "|---|---|"]
        lines += [f"| {100 * n / samples:.1f} | `{frame}` |" for frame, n in counter.most_common(top)]
    return [*lines, ""]


def widget_profile(api: Api, workers: int, objects: int, log_dir: Path) -> str:
    name = f"nodewright-{workers}-workers"
    contender = Contender(
        name,
        "nodewright",
        (
            sys.executable,
            "-m",
            "bench.contenders.nodewright_widget",
            "--kubeconfig",
            "{kubeconfig}",
            "--namespace",
            "{namespace}",
            "--workers",
            str(workers),
        ),
        workers=workers,
    )
    profiler = Profiler(name)
    outcome = run_widget_contender(api, contender, objects, log_dir, on_start=profiler.attach)
    profiler.finish()
    if not outcome.converged:
        raise RuntimeError(f"{name} did not converge: {outcome.error}")
    return name


def informer_profile(api: Api, pods: int, log_dir: Path) -> str:
    name = f"informer-sync-{pods}-pods"
    namespace, _ = create_pods(api, pods)
    contender: tuple[str, ...] = (sys.executable, "-m", "bench.contenders.nodewright_cache")
    contender += ("--kubeconfig", "{kubeconfig}", "--namespace", "{namespace}", "--expect", "{expect}")
    contender += ("--transform", "compressed")
    variants = [py_spy(form, PROFILES / f"{name}.{suffix}", "--", *contender) for form, suffix in FORMATS]
    for variant in variants:
        run = run_cache_contender(
            api, Contender(name, "nodewright", variant), namespace, pods, log_dir, transform=True
        )
        if run.error:
            raise RuntimeError(f"{name}: {run.error}")
    api.delete_namespace(namespace)
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=2_000, help="Widgets (backlog and burst each)")
    parser.add_argument("--pods", type=int, default=10_000, help="Pods for the informer sync")
    args = parser.parse_args(argv)
    from nodewright.devenv import ControlPlane  # noqa: PLC0415  # a private, bare API server

    PROFILES.mkdir(parents=True, exist_ok=True)
    log_dir = HERE / "results" / "raw" / "profiles"
    with ControlPlane(bare=True) as plane:
        api = Api(plane.kubeconfig)
        install_crd(api, widget_crd())
        names = [widget_profile(api, workers, args.objects, log_dir) for workers in (1, 16)]
        names.append(informer_profile(api, args.pods, log_dir))
    page = [
        "# Where the nodewright contender's CPU goes",
        "",
        f"Made by `python -m bench.profile` "
        f"({args.objects:,} Widgets, {args.pods:,} Pods); flame graphs beside this file.",
        "",
    ]
    for name in names:
        page += summarize(name)
    (PROFILES / "summary.md").write_text("\n".join(page))
    print("\n".join(page))
    return 0


if __name__ == "__main__":
    sys.exit(main())
