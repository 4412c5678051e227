"""``python -m bench [--full] [--only NAME ...]``: run nodewright's benchmarks side by side.

Starts a private control plane (or uses ``--kubeconfig``), installs the Widget CRD, builds the
Go peers once (``bench/peers/build.sh``), then runs the reconcile benchmark for every
contender, the cache-memory benchmark and the work-queue micro-benchmark, one at a time,
prints every figure as tables and writes ``bench/results/<mode>.{json,md,png}`` plus
``README.md`` (raw logs under ``bench/results/raw/``). Quick: 2,000 Widgets and 10,000 Pods;
full: 10,000 Widgets and 50,000 Pods.

``--only`` takes contender names (``nodewright-4``), families (``nodewright``, ``kopf``,
``controller-runtime``, ``raw``, ``client-go``) or benchmarks (``widgets``, ``cache``,
``workqueue``). Side effects: processes, files under the results directory, network I/O on
loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cache_memory import CacheRun, create_pods, run_cache_contender
from bench.kube import Api, install_crd
from bench.processes import Contender
from bench.report import machine_description, render_tables, write_results
from bench.widgets import WidgetRun, run_widget_contender
from bench.workload import widget_crd

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("NODEWRIGHT_CACHE", Path.home() / ".cache" / "nodewright"))
PYTHON = sys.executable
SIZES = {"quick": (2_000, 10_000), "full": (10_000, 50_000)}


def widget_contenders(peer_bin: Path | None) -> list[Contender]:
    """Every reconcile contender, in the order they run."""
    common = ("--kubeconfig", "{kubeconfig}", "--namespace", "{namespace}")
    raw = (PYTHON, "-m", "bench.contenders.raw_ceiling", *common, "--names", "{names}")
    contenders = [
        Contender(f"raw-ceiling-{n}", "raw", (*raw, "--workers", str(n)), workers=n, oneshot=True)
        for n in (4, 16)
    ]
    if peer_bin is not None:
        contenders += [
            Contender(
                f"controller-runtime-{n}",
                "controller-runtime",
                (str(peer_bin / "controller-runtime"), *common, "--workers", str(n)),
                workers=n,
            )
            for n in (1, 4, 16)
        ]
    contenders += [
        Contender(
            f"nodewright-{n}",
            "nodewright",
            (PYTHON, "-m", "bench.contenders.nodewright_widget", *common, "--workers", str(n)),
            workers=n,
        )
        for n in (1, 4, 16)
    ]
    contenders.append(Contender("kopf", "kopf", (PYTHON, "-m", "bench.contenders.kopf_widget", *common)))
    return contenders


def cache_contenders(peer_bin: Path | None) -> list[tuple[Contender, bool]]:
    """Every cache-memory contender and whether it strips managedFields."""
    common = ("--kubeconfig", "{kubeconfig}", "--namespace", "{namespace}", "--expect", "{expect}")
    module = (PYTHON, "-m", "bench.contenders.nodewright_cache", *common)
    contenders = [
        (Contender("nodewright", "nodewright", (*module, "--transform", "default")), True),
        (Contender("nodewright-compressed", "nodewright", (*module, "--transform", "compressed")), True),
        (Contender("nodewright", "nodewright", (*module, "--transform", "none")), False),
    ]
    if peer_bin is not None:
        binary = str(peer_bin / "client-go-informer")
        contenders += [
            (Contender("client-go", "client-go", (binary, *common, "-transform")), True),
            (Contender("client-go", "client-go", (binary, *common)), False),
        ]
    return contenders


def selected(only: list[str], benchmark: str, contender: Contender | None = None) -> bool:
    if not only:
        return True
    names = {benchmark}
    if contender is not None:
        names |= {contender.name, contender.family}
    return bool(names & set(only))


def available(module: str) -> str:
    """'' when ``python -c 'import module'`` works, else the last line of the error."""
    check = subprocess.run(
        [PYTHON, "-c", f"import {module}"], capture_output=True, text=True, timeout=120, check=False
    )
    if check.returncode == 0:
        return ""
    lines = check.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {check.returncode}"


def build_peers() -> tuple[Path | None, str]:
    """Build the Go peers (once); returns their directory, or None and why not."""
    try:
        build = subprocess.run(
            ["bash", str(HERE / "peers" / "build.sh")],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return None, str(error)
    if build.returncode != 0:
        return None, build.stderr.strip()[-500:]
    return Path(build.stdout.strip().splitlines()[-1]), ""


def versions(api: Api) -> dict[str, str]:
    """Versions of everything measured."""
    found: dict[str, str] = {}
    with contextlib.suppress(Exception):
        found["kube-apiserver"] = str(api.request("GET", "/version").get("gitVersion"))
    for package in ("nodewright", "kopf", "pykube-ng"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[package] = importlib.metadata.version(package)
    for peer, module in (
        ("controller-runtime", "sigs.k8s.io/controller-runtime"),
        ("client-go-informer", "k8s.io/client-go"),
    ):
        with contextlib.suppress(OSError):
            text = (HERE / "peers" / peer / "go.mod").read_text()
            match = re.search(rf"^\s*{re.escape(module)} (v\S+)", text, re.MULTILINE)
            if match:
                found[module] = match.group(1)
    return found


@contextlib.contextmanager
def cluster(kubeconfig: str | None) -> Iterator[tuple[Path, int | None]]:
    """The kubeconfig to use and the API server's pid (None for a cluster we did not start)."""
    if kubeconfig:
        yield Path(kubeconfig), None
        return
    from nodewright.devenv import ControlPlane  # noqa: PLC0415  # only when we start our own

    # A bare API server: the framework's figures, undisturbed by controllers or a scheduler.
    with ControlPlane(bare=True) as plane:
        pid = plane.apiserver_process.pid if plane.apiserver_process else None
        yield plane.kubeconfig, pid


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the selected benchmarks; returns the results (also printed as they come)."""
    mode = "full" if args.full else "quick"
    objects, pods = SIZES[mode]
    objects = args.objects or objects
    pods = args.pods or pods
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = args.results / "raw" / f"{mode}-{stamp}"
    results: dict[str, Any] = {
        "mode": mode,
        "cpu_limit_cores": args.cpu_limit,
        "started": stamp,
        "objects": objects,
        "pods": pods,
        "machine": machine_description(),
        "load_before": [round(v, 2) for v in os.getloadavg()],
        "widgets": [],
        "cache": [],
        "workqueue": [],
        "notes": [],
    }
    notes: list[str] = results["notes"]
    peer_bin, why = build_peers()
    if peer_bin is None:
        notes.append(f"Go peers unavailable: {why.splitlines()[-1] if why else '?'}")
    missing = {
        "nodewright": available("bench.contenders.nodewright_widget"),
        "kopf": available("kopf"),
    }
    for family, why in missing.items():
        if why:
            notes.append(f"{family} contender pending: {why}")

    if selected(args.only, "workqueue"):  # first: nothing else runs yet (no cluster, no Pods to delete)
        from bench.workqueue import run_go_workqueue, run_workqueue_process  # noqa: PLC0415

        print("Running the work-queue micro-benchmark ...", flush=True)
        if not missing["nodewright"]:
            results["workqueue"].append(run_workqueue_process().as_dict())
        if peer_bin is not None:
            try:
                results["workqueue"].append(run_go_workqueue(str(peer_bin / "client-go-informer")).as_dict())
            except (OSError, subprocess.SubprocessError, ValueError) as error:
                notes.append(f"client-go work queue failed: {error}")

    with cluster(args.kubeconfig) as (kubeconfig, apiserver_pid):
        api = Api(kubeconfig)
        results["versions"] = versions(api)
        install_crd(api, widget_crd())
        for contender in widget_contenders(peer_bin):
            if not selected(args.only, "widgets", contender) or missing.get(contender.family):
                continue
            print(f"Running {contender.name} on {objects:,} Widgets ...", flush=True)
            started = time.monotonic()
            try:
                outcome = run_widget_contender(
                    api, contender, objects, log_dir, apiserver_pid=apiserver_pid, cpu_limit=args.cpu_limit
                )
            except Exception as error:
                outcome = WidgetRun(contender.name, contender.family, contender.workers, objects, False)
                outcome.error = f"harness error: {error!r}"
            results["widgets"].append(outcome.as_dict())
            state = "converged" if outcome.converged else f"FAILED: {outcome.error}"
            print(f"  {state} in {time.monotonic() - started:.1f} s", flush=True)

        cache_runs = [
            (c, t)
            for c, t in cache_contenders(peer_bin)
            if selected(args.only, "cache", c) and not missing.get(c.family)
        ]
        if cache_runs:
            print(f"Creating {pods:,} Pods ...", flush=True)
            namespace, seconds = create_pods(api, pods)
            print(f"  created in {seconds:.1f} s ({pods / seconds:,.0f}/s)", flush=True)
            for contender, transform in cache_runs:
                label = f"{contender.name} ({'with' if transform else 'without'} transform)"
                print(f"Caching {pods:,} Pods with {label} ...", flush=True)
                try:
                    cache_result = run_cache_contender(
                        api, contender, namespace, pods, log_dir, transform=transform
                    )
                except Exception as error:
                    cache_result = CacheRun(contender.name, contender.family, transform)
                    cache_result.error = f"harness error: {error!r}"
                results["cache"].append(cache_result.as_dict())
            if not args.keep:
                api.delete_namespace(namespace)

    results["load_after"] = [round(v, 2) for v in os.getloadavg()]
    cpus = results["machine"]["cpus"]
    if max(results["load_before"][0], results["load_after"][0]) > cpus:
        notes.append(
            f"The machine was busy with other work (load average {results['load_before'][0]} at start, "
            f"{results['load_after'][0]} at end, on {cpus} cores): figures are indicative, "
            "latencies most of all."
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="full sizes: 10,000 Widgets, 50,000 Pods")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="contenders or benchmarks")
    parser.add_argument("--objects", type=int, default=0, help="override the number of Widgets")
    parser.add_argument("--pods", type=int, default=0, help="override the number of Pods")
    parser.add_argument("--kubeconfig", help="use this cluster instead of a private control plane")
    parser.add_argument("--results", type=Path, default=HERE / "results", help="where to write results")
    parser.add_argument("--keep", action="store_true", help="keep the Pods namespace afterwards")
    parser.add_argument(
        "--cpu-limit",
        type=float,
        default=None,
        metavar="CORES",
        help="run each reconcile contender under this CFS quota (a pod's CPU limit), e.g. 0.5",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run(args)
    results["seconds"] = round(time.monotonic() - started, 1)
    print()
    print(render_tables(results))
    mode = results["mode"]
    if args.cpu_limit:
        mode = f"{mode}-limited"
    if args.objects or args.pods:
        mode = f"{mode}-custom"
    written = write_results(results, args.results, mode)
    print(f"\nTook {results['seconds']:.0f} s. Wrote " + ", ".join(str(p) for p in written))
    raw = args.results / "raw" / f"{mode}-{results['started']}.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=2))
    failed = [r["contender"] for r in results["widgets"] if not r["converged"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
