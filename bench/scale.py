"""``python -m bench.scale [--nodes N | --full]``: the whole manager at cluster sizes.

Runs, on one machine: the real control plane with kwok nodes (``bench.scale_cluster``: lease and
node-monitor settings that hold at 1,000 nodes on two cores); the ARM emulator with a generated
estate in a process of its own with the node simulator (``bench.scale_world``: pools of at most
100 nodes, uniform scale sets with one NIC per instance, one identity per pool and one shared,
200 ms per ARM call, ARM's subscription buckets and Compute policies enforced); Deployments of 10
pods per node (per pool: ``web`` 4 per node and ``worker`` 2, unbound; ``api`` 2 per node bound
to the pool's identity; and ``shared`` 2 per node across every pool, bound to the shared
identity); and the manager as its own process (``python -m nodewright.controllers.main run``)
with config/manager/config.yaml as shipped. Where its config differs, and why each is not a
tuning (``bench.scale_config.DIFFERENCES``; a test holds the derived config to this list):

- ``metrics.bindAddress``, ``health.bindAddress``: free loopback ports instead of :8443 and
  :8081 on every interface (a shared machine; where metrics are served costs nothing);
- ``reconcilers.*.options.cloud``: ``subscriptionId``, ``armEndpoint``, ``caBundle`` and a static
  ``credential`` point the one shared cloud block at the emulator (workload identity needs Entra
  ID); ``mutationQps``/``mutationBurst`` and every other cloud setting stay as shipped (so the
  LRO ``pollingInterval`` is its default, 30 s);
- ``reconcilers.workload-identity-federation.enabled``: true (every reconciler enabled);
- ``reconcilers.node-image``, ``reconcilers.node-network-config``: added with only the shared
  cloud block, every option at its default (the shipped file does not list them);
- ``reconcilers.node-network-config.options.demandFromPods``: true, since no node agent (Azure
  CNS) runs on kwok nodes to write the NodeNetworkConfigs' spec: nodewright sizes each pool from
  the node's pods (the default, false, leaves every pool unrequested and the run never converges);
- ``reconcilers.identity-assignment.enabled``: false with ``--peer mic`` only.

``--peer mic``: aad-pod-identity's MIC v1.8.17, unmodified, assigns the identities instead of
the manager's identity reconciler (off; upstream's CRDs; MIC signs in as its own service
principal, ``bench.scale_peer``), same estate, workload and phases. Every run reports, per phase,
the identity tool's own figures as ``bench.identity --peer mic`` does: pod Running to Assigned
p50/p99/max, its ARM requests (identity assignment's: scale-set and machine GETs and PATCHes and
their polls) per pod, 404s and 429s from the emulator's log split by caller, and its API writes
from the audit log by user (``scale-N-mic.{json,md}`` beside ours, ``scale-N.{json,md}``).

Phases, each measured only once every Node and pod is Ready: cold start (the manager starts on
a cluster it has never seen); steady state (``--steady-seconds``, default 300); churn +20 %
(every pool and Deployment grows a fifth) and then -20 % (back); a manager restart (SIGTERM,
then a new process; converged once it leads, measured over ``--restart-seconds``); a NodeImage
rollout of pool 0 (100 nodes, or the whole pool when smaller) at maxSurge 10 % (rounded up).
Per phase: time to converge; p50/p99 per item (pod Running to identity Assigned; node Ready to
pool filled); ARM reads, writes (deletes included) and 429s per minute; API server requests and
writes (``apiserver_request_total``, every client's); CPU seconds of the manager, API server,
etcd, controller manager, scheduler, kwok, the world process (emulator + node simulator) and
the harness; the manager's peak RSS; and the bottleneck. Results: ``bench/results/scale-N.json``
and ``.md``, and ``scale.png`` (each cost against node count, over every ``scale-*.json``).

A manager that exits while a phase converges (it does when it loses its lease, as on a starved
machine) is started again, as the kubelet restarts its container; the phase's notes say so.
``--skip steady|churn|restart|rollout`` (repeatable) leaves a phase out: a comparison that needs
only the cold start and churn on a busy machine, or the cold start and steady state of a size
whose other phases this machine cannot hold.

Side effects: processes, loopback ports, a temporary directory, files under bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.pass_metrics import scrape_manager
from bench.processes import Contender, RunningProcess, cpu_seconds_of
from bench.rollout_timeline import RolloutTimeline, timeline_summary
from bench.scale_cluster import LEASE_SECONDS, ScaleControlPlane
from bench.scale_config import load_shipped, manager_config
from bench.scale_figures import (
    ArmCall,
    PhaseFigures,
    api_counts,
    arm_operations,
    arm_rates,
    item_latencies,
    name_bottleneck,
)
from bench.scale_peer import AUDIT_POLICY, MANAGER_TOKEN, MANAGER_USER, PEERS, IdentityTool, tool_figures
from bench.scale_report import write_results
from bench.scale_tracker import BINDING_LABEL, Tracker
from bench.scale_world import NEW_IMAGE, EstatePlan, World, plan_estate
from nodewright.controllers.identity.options import AZURE_IDENTITY, AZURE_IDENTITY_BINDING
from nodewright.controllers.node_image.resources import NODE_IMAGE, SCALING_GROUP
from nodewright.controllers.status import POOL_LABEL
from nodewright.devenv.controlplane import ControlPlane, free_port
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import LEASE, NAMESPACE, Kind

__all__ = ["GOALS", "main", "run"]

DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
BENCH_NAMESPACE = "bench-scale"
SYSTEM_NAMESPACE = "nodewright-system"
JOIN_SECONDS = 10.0
"""A new machine becomes a Node this long after it was created (boot and kubelet start)."""
POLL_SECONDS = 2.0
PER_NODE = {"web": 4, "worker": 2, "api": 2}
SHARED_PER_NODE = 2
GOALS = {
    "cold start": "converged; 0 429s; ARM writes inside the budget",
    "steady state": "~0 ARM writes/min; reads/min flat in node count; manager CPU flat",
    "churn +20 %": "converged; p99 per item within a minute",
    "churn -20 %": "converged: identities and pools of gone nodes released",
    "manager restart": "leading within the 15 s lease; no write storm",
    "rollout": "Complete; ARM writes inside the budget",
}


@dataclass
class Run:
    """Everything one run holds."""

    plan: EstatePlan
    plane: ControlPlane
    client: Client
    world: World
    tracker: Tracker
    work: Path
    pool_sizes: tuple[int, ...] = ()
    tool: IdentityTool = field(default_factory=IdentityTool)
    managers: list[RunningProcess] = field(default_factory=list)
    metrics_ports: list[int] = field(default_factory=list)
    """Each manager's metrics port, in ``managers``' order."""
    replicas: dict[str, int] = field(default_factory=dict)
    phases: list[PhaseFigures] = field(default_factory=list)

    @property
    def manager_kubeconfig(self) -> Path:
        """A kubeconfig of the manager's own API user, so the audit log tells its writes apart."""
        return self.plane.user_kubeconfig(MANAGER_USER, groups=("system:masters",))

    @property
    def pods(self) -> int:
        return sum(self.replicas.values())

    @property
    def nodes(self) -> int:
        return sum(self.pool_sizes)

    def pids(self) -> dict[str, Callable[[], float]]:
        """Process name -> its CPU seconds so far (the managers summed, the harness alone)."""
        plane = self.plane
        readers: dict[str, Callable[[], float]] = {
            "manager": lambda: sum(m.cpu_seconds() for m in self.managers),
            "kube-apiserver": _cpu_of(plane.apiserver_process),
            "etcd": _cpu_of(plane.etcd_process),
            "emulator+nodesim": lambda: cpu_seconds_of(self.world.pid),
            "harness": _own_cpu,
        }
        for name, process in plane.component_processes.items():
            readers[name] = _cpu_of(process)
        return readers


def _own_cpu() -> float:
    """The harness's own CPU seconds (not its reaped children's: the managers it stopped)."""
    times = os.times()
    return times.user + times.system


def _cpu_of(process: Any) -> Callable[[], float]:
    pid = process.pid
    return lambda: cpu_seconds_of(pid)


def _request_totals(client: Client) -> dict[str, float]:
    totals: dict[str, float] = {}
    families = text_string_to_metric_families(client.request("GET", "/metrics").text)
    for family in (f for f in families if f.name == "apiserver_request"):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                verb = sample.labels.get("verb", "")
                totals[verb] = totals.get(verb, 0.0) + sample.value
    return totals


def _wait(condition: Callable[[], list[str]], timeout: float, what: str) -> tuple[bool, float, list[str]]:
    """Poll ``condition`` (its problems) every ``POLL_SECONDS`` until none; (done, seconds, last)."""
    started = time.monotonic()
    problems = condition()
    while problems:
        if time.monotonic() - started > timeout:
            print(f"{what}: not converged after {timeout:g} s: {problems[:4]}", flush=True)
            return False, time.monotonic() - started, problems
        time.sleep(POLL_SECONDS)
        problems = condition()
    return True, time.monotonic() - started, []


def _measure(run: Run, name: str, body: Callable[[], tuple[bool, float, list[str]]]) -> PhaseFigures:
    """Wait for Nodes and pods Ready, then run ``body`` (which returns converged, seconds to
    converge and notes) and read every figure of the phase around it."""
    ready, _, problems = _wait(lambda: run.tracker.cluster_problems(run.nodes, run.pods), 900, name)
    readers = run.pids()
    cpu_before = {process: read() for process, read in readers.items()}
    tool_cpu = run.tool.cpu_seconds()
    totals_before = _request_totals(run.client)
    start, wall_start = time.monotonic(), time.time()
    converged, seconds, notes = body()
    end = time.monotonic()
    tool = tool_figures(run.tool, run.world, run.plane.audit_log, start, (wall_start, time.time()))
    tool["cpu_seconds"] = round(run.tool.cpu_seconds() - tool_cpu, 2)
    cpu = {process: read() - cpu_before[process] for process, read in readers.items()}
    requests, writes = api_counts(totals_before, _request_totals(run.client))
    calls = [ArmCall(*call) for call in run.world.call("arm_calls", start)]
    rates = arm_rates(calls, end - start)
    tracker = run.tracker
    figures = PhaseFigures(
        name=name,
        goal=GOALS[name.split(" (", maxsplit=1)[0]],
        seconds=seconds,
        converged=converged,
        identity=item_latencies(tracker.bound_pod_running(), tracker.assigned(), start, end),
        pool=item_latencies(tracker.node_ready(), tracker.pool_filled(), start, end),
        arm=rates,
        api_requests=requests,
        api_writes=writes,
        cpu_seconds=cpu,
        manager_peak_rss_bytes=max((m.sample_peak_rss() for m in run.managers), default=0),
        bottleneck=name_bottleneck(cpu, rates),
        operations=arm_operations(calls),
        notes=([] if ready else [f"not Ready before the phase: {problems[:3]}"]) + notes,
        tool=tool,
    )
    print(f"{name}: {figures.to_json()}", flush=True)
    run.phases.append(figures)
    return figures


def _deployment(name: str, replicas: int, *, pool: str | None, binding: str | None) -> dict[str, Any]:
    labels = {"app": name, **({BINDING_LABEL: binding} if binding else {})}
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
        "terminationGracePeriodSeconds": 0,
    }
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    return {
        "metadata": {"name": name, "namespace": BENCH_NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _workload(run: Run, pool_sizes: tuple[int, ...], *, create: bool) -> None:
    """Create (or scale) the Deployments to 10 pods per node of ``pool_sizes``."""
    wanted: dict[str, dict[str, Any]] = {}
    for index, size in enumerate(pool_sizes):
        pool = f"pool{index:02d}"
        for app, per_node in PER_NODE.items():
            binding = f"{BENCH_NAMESPACE}-{index}" if app == "api" else None
            wanted[f"{app}-{pool}"] = _deployment(
                f"{app}-{pool}", per_node * size, pool=pool, binding=binding
            )
    shared = len(pool_sizes)
    wanted["shared"] = _deployment(
        "shared", SHARED_PER_NODE * sum(pool_sizes), pool=None, binding=f"{BENCH_NAMESPACE}-{shared}"
    )
    for name, body in wanted.items():
        if create:
            run.client.create(DEPLOYMENT, body)
        else:
            patch = {"spec": {"replicas": body["spec"]["replicas"]}}
            run.client.patch(DEPLOYMENT, name, patch, BENCH_NAMESPACE)
        run.replicas[name] = body["spec"]["replicas"]


def _identities(run: Run) -> None:
    for index, (identity, client_id) in enumerate(run.world.info["identities"]):
        metadata = {"name": f"id-{index:02d}", "namespace": BENCH_NAMESPACE}
        spec = {"type": 0, "resourceID": identity, "clientID": client_id}
        run.client.create(AZURE_IDENTITY, {"metadata": metadata, "spec": spec})
        binding = {"azureIdentity": f"id-{index:02d}", "selector": f"{BENCH_NAMESPACE}-{index}"}
        name = {"name": f"binding-{index:02d}", "namespace": BENCH_NAMESPACE}
        run.client.create(AZURE_IDENTITY_BINDING, {"metadata": name, "spec": binding})


def _start_manager(run: Run) -> RunningProcess:
    info = run.world.info
    config = manager_config(
        load_shipped(),
        endpoint=info["endpoint"],
        ca_bundle=info["ca_file"],
        subscription=info["subscription"],
        token=MANAGER_TOKEN,
        metrics_port=(metrics_port := free_port()),
        health_port=free_port(),
    )
    run.metrics_ports.append(metrics_port)
    if run.tool.peer:  # the peer assigns identities: the manager's own reconciler stays off
        config["reconcilers"]["identity-assignment"]["enabled"] = False
    path = run.work / "manager-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    number = len(run.managers)
    contender = Contender(
        f"manager-{number}",
        "nodewright",
        (sys.executable, "-m", "nodewright.controllers.main", "run", "--config", str(path)),
        env={"KUBECONFIG": str(run.manager_kubeconfig), "POD_NAME": f"nodewright-bench-{number}"},
    )
    manager = RunningProcess(contender, run.work / "logs", env={})
    run.managers.append(manager)
    return manager


def _lease_holder(client: Client) -> str:
    with contextlib.suppress(Exception):
        lease = client.get(LEASE, "nodewright-leader", SYSTEM_NAMESPACE)
        return str((lease.get("spec") or {}).get("holderIdentity") or "")
    return ""


def _converge(
    run: Run, timeout: float, extra: Callable[[], list[str]] | None = None
) -> Callable[[], tuple[bool, float, list[str]]]:
    def body() -> tuple[bool, float, list[str]]:
        exits: list[str] = []

        def problems() -> list[str]:
            alive = []
            if not run.managers[-1].running():  # as the kubelet restarts an exited container
                exits.append(run.managers[-1].stderr_tail(1).strip())
                _start_manager(run)
                alive.append("the manager exited and was started again")
            alive += run.tool.problems()
            return alive + run.tracker.problems(run.nodes, run.pods) + (extra() if extra else [])

        converged, seconds, left = _wait(problems, timeout, "converge")
        notes = [f"left: {left[:3]}"] if left else []
        if exits:
            notes.append(f"the manager exited {len(exits)} times and was started again: {exits[:2]}")
        return converged, seconds, notes

    return body


def _cold_start(run: Run, timeout: float) -> None:
    def body() -> tuple[bool, float, list[str]]:
        _start_manager(run)
        run.tool.start(run.plane, run.world, run.work)
        return _converge(run, timeout)()

    _measure(run, "cold start", body)


def _steady(run: Run, seconds: float) -> None:
    """Nothing changes for ``seconds``; converged means still converged at the end."""

    def body() -> tuple[bool, float, list[str]]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not run.managers[-1].running():
                return False, seconds, ["the manager exited"]
            time.sleep(min(POLL_SECONDS * 5, max(0.0, deadline - time.monotonic())))
        problems = run.tracker.problems(run.nodes, run.pods)
        return not problems, seconds, [f"drifted: {problems[:3]}"] if problems else []

    _measure(run, "steady state", body)


def _churn(run: Run, sizes: tuple[int, ...], name: str, timeout: float) -> None:
    """Pools to ``sizes`` at once (new machines join ``JOIN_SECONDS`` later, removed ones go),
    Deployments to 10 pods per node of them."""

    def body() -> tuple[bool, float, list[str]]:
        started = time.monotonic()
        for index, size in enumerate(sizes):
            run.world.call("scale", index, size)
        run.pool_sizes = sizes
        _workload(run, sizes, create=False)
        converged, _, notes = _converge(run, timeout)()
        return converged, time.monotonic() - started, notes

    _measure(run, name, body)


def _restart(run: Run, window: float, timeout: float) -> None:
    """SIGTERM the manager, start a new one; converged once it leads; measured over ``window``."""

    def body() -> tuple[bool, float, list[str]]:
        run.managers[-1].stop()
        started = time.monotonic()
        manager = _start_manager(run)
        identity = manager.contender.env["POD_NAME"]
        leading, seconds, _ = _wait(
            lambda: [] if _lease_holder(run.client) == identity else ["not leading"], timeout, "restart"
        )
        time.sleep(max(0.0, window - (time.monotonic() - started)))
        problems = run.tracker.problems(run.nodes, run.pods)
        return leading and not problems, seconds, [f"left: {problems[:3]}"] if problems else []

    _measure(run, "manager restart", body)


def _rollout(run: Run, timeout: float) -> None:
    """A NodeImage on pool 0 (its ScalingGroup created with it) to the new image, maxSurge 10 %."""
    size = run.pool_sizes[0]
    surge = max(1, math.ceil(size / 10))
    node_image = "bench-rollout"

    def extra() -> list[str]:
        live, on_new = run.world.call("census", 0, NEW_IMAGE)
        status = run.client.get(NODE_IMAGE, node_image).get("status") or {}
        problems = [] if live == on_new == size else [f"pool00: {on_new} of {live} on the new image"]
        if status.get("rolloutState") != "Complete":
            problems.append(f"rollout state {status.get('rolloutState')}")
        return problems

    def body() -> tuple[bool, float, list[str]]:
        spec = {"image": NEW_IMAGE, "maxSurge": surge}
        run.client.create(NODE_IMAGE, {"metadata": {"name": node_image}, "spec": spec})
        group = {"groupID": run.world.info["scale_sets"][0], "nodeImage": node_image}
        timeline = RolloutTimeline(run.client, f"{POOL_LABEL}=pool00")
        timeline.start()
        run.client.create(SCALING_GROUP, {"metadata": {"name": "pool00"}, "spec": group})
        before = scrape_manager(run.client, run.metrics_ports[-1], BENCH_NAMESPACE)
        try:
            converged, seconds, notes = _converge(run, timeout, extra)()
        finally:
            timeline.stop()
        passes = scrape_manager(run.client, run.metrics_ports[-1], BENCH_NAMESPACE).since(before)
        decision = (
            f"decision time: {passes.passes:.0f} nodeimage passes, CPU per pass mean "
            f"{passes.mean_ms:.1f} ms, p99 <= {passes.p99_ms:g} ms (goal per wave <= 100 ms); wall time "
            f"per pass mean {passes.mean_wall_ms:.0f} ms"
        )
        print(decision, *timeline.table(JOIN_SECONDS, surge), sep="\n", flush=True)
        return converged, seconds, [decision, timeline_summary(timeline, JOIN_SECONDS), *notes]

    _measure(run, f"rollout (pool00, {size} nodes, maxSurge {surge})", body)


SKIPPABLE = ("steady", "churn", "restart", "rollout")
"""Phases ``--skip`` may leave out (the cold start is what every other phase stands on)."""


def _phases(
    run: Run, steady: float, restart_window: float, timeout: float, skip: frozenset[str] = frozenset()
) -> None:
    _cold_start(run, timeout)
    if "steady" not in skip:
        _steady(run, steady)
    base = run.pool_sizes
    if "churn" not in skip:
        _churn(run, tuple(math.ceil(size * 1.2) for size in base), "churn +20 %", timeout)
        _churn(run, base, "churn -20 %", timeout)
    if "restart" not in skip:
        _restart(run, restart_window, timeout)
    if "rollout" not in skip:
        _rollout(run, timeout)


def run(
    nodes: int,
    *,
    steady: float,
    restart_window: float,
    timeout: float | None = None,
    peer: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[PhaseFigures]:
    """Start everything, run the phases, stop everything; returns the phases' figures. With
    ``peer`` (``mic``) that tool assigns identities instead of the manager's reconciler."""
    plan = plan_estate(nodes)
    timeout = timeout or max(900.0, nodes * 3.0)
    tool = IdentityTool(peer or "nodewright")
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as directory,
        ScaleControlPlane(audit_policy=AUDIT_POLICY) as plane,
    ):
        client = Client.from_kubeconfig(plane.kubeconfig)
        tool.install_crds(client)
        for namespace in (SYSTEM_NAMESPACE, BENCH_NAMESPACE):
            client.create(NAMESPACE, {"metadata": {"name": namespace}})
        world = World(str(plane.kubeconfig), plan, JOIN_SECONDS, LEASE_SECONDS / 4)
        tracker = Tracker(client, BENCH_NAMESPACE)
        bench = Run(plan, plane, client, world, tracker, Path(directory), plan.pool_sizes, tool)
        try:
            tracker.start()
            _identities(bench)
            world.call("join")
            _workload(bench, plan.pool_sizes, create=True)
            _phases(bench, steady, restart_window, timeout, skip)
        finally:
            for manager in bench.managers:
                manager.stop()
            tool.stop()
            tracker.stop()
            world.stop()
            _keep_logs(Path(directory))
    return bench.phases


def _keep_logs(directory: Path) -> None:
    """Copy the managers' logs next to the results' raw logs (not committed), for a post-mortem."""
    target = Path(__file__).resolve().parent / "results" / "raw" / "scale"
    target.mkdir(parents=True, exist_ok=True)
    for path in (directory / "logs").glob("*"):
        (target / path.name).write_bytes(path.read_bytes()[-2_000_000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, action="append", help="node count (repeatable; default 200)")
    parser.add_argument("--full", action="store_true", help="1,000, 2,000 and 5,000 nodes")
    parser.add_argument("--steady-seconds", type=float, default=300.0)
    parser.add_argument("--restart-seconds", type=float, default=120.0)
    parser.add_argument("--timeout", type=float, help="per phase (default max(900, 3 s per node))")
    parser.add_argument("--peer", choices=PEERS, help="this tool assigns identities instead of ours")
    parser.add_argument("--skip", action="append", choices=SKIPPABLE, default=[], help="leave a phase out")
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results")
    arguments = parser.parse_args(argv)
    sizes = [1_000, 2_000, 5_000] if arguments.full else (arguments.nodes or [200])
    for nodes in sizes:
        load_before = os.getloadavg()
        phases = run(
            nodes,
            steady=arguments.steady_seconds,
            restart_window=arguments.restart_seconds,
            timeout=arguments.timeout,
            peer=arguments.peer,
            skip=frozenset(arguments.skip),
        )
        meta = {
            "nodes": nodes,
            "identity_tool": arguments.peer or "nodewright",
            "skipped": sorted(arguments.skip),
            "steady_seconds": arguments.steady_seconds,
            "load_average": [list(load_before), list(os.getloadavg())],
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "when": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        }
        for path in write_results(arguments.results, meta, phases):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
