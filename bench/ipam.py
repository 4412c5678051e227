"""``python -m bench.ipam [--consumer crd|nodesubnet] [--churn-seconds N] [--full] ...``: the
network container IPAM benchmark.

50 nodes (one uniform scale set in the ARM emulator, every ARM call delayed by 200 ms), the
node_network_config reconciler (batch 16, buffer 50 %) and the node simulator. The node side is
either the pod address agent that reads NodeNetworkConfig status (consumer ``crd``) or the
simulated Azure CNS in NodeSubnet mode (consumer ``nodesubnet``, ``devenv.cns_nodesubnet``),
which discovers IPs from the NIC on CNS's schedule (4 s doubling to 1,024 s) and so makes pods
wait for discovery as they would on Azure. Pods are placed by kube-scheduler (``--placement
random`` binds each to a random node instead) and created at 20/s up to a warm population, then
created and deleted at 20/s each (quick: 30 s of churn; ``--full``: 10 minutes; on a loaded
machine the client may fall behind that rate, and "churn as run" says so). Long-running
operations take ``--operation-seconds`` (0 by default) in the emulator, which sends
``--retry-after`` while one runs (the emulator's 10 s by default, 0 for none); ``--workers``
sets the controller's workers (8).

Reported (a printable table):
- the cold start: seconds from the last node joining until every node's first batch is in its
  status, and the ARM requests and writes sent until then;
- pool-caused wait once warm: pods that found no free IP on their node (discovery included for
  NodeSubnet), and how long until they got one; 0 for a pod whose IP was ready; p50/p99;
- ARM writes (PUT, PATCH, DELETE, POST) per pod start during churn, and all ARM requests;
- 429s the emulator answered, and the 429s ARM's subscription buckets (reads 250 at 25/s,
  writes 200 at 10/s) would have answered for the recorded request times (a replay, so the
  figure holds whatever throttling the emulator models);
- idle IPs per node (on the NIC, not used by a pod, not pending release): peak, and the peak
  next to the configured buffer plus one batch; and the most IPs a node held beyond the highest
  demand it had seen (what ``release: never`` costs is the gap between the two);
- for NodeSubnet: addresses the consumer handed out that were no longer on the NIC (must be 0)
  and IP updates it refused because an assigned IP vanished.

Uses ``KUBECONFIG`` / ``--kubeconfig`` if given, else a private local control plane. Side
effects: a control plane, an emulator and threads, all stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench.cluster import cluster_kubeconfig
from bench.ipam_cilium import IpConfigurationTracker
from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.acn.v1alpha1 import ClusterSubnetState
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.request_log import RecordedRequest
from nodewright.cloud.emulator.state import DEFAULT_OPERATION_RETRY_AFTER
from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG, NodeNetworkConfigSettings, install
from nodewright.devenv.cns_nodesubnet import NodeSubnetConsumer
from nodewright.devenv.cns_nodesubnet_nmagent import answers_in_emulator
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.ipam import PoolScaler, address_count
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NAMESPACE, NODE, POD
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.node_agent import PodAddressAgent

NODES = 50
RATE = 20.0
LATENCY = 0.2
SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
WARM_POPULATION = 400
POD_SUBNET = "10.240.0.0/16"
"""The pod subnet beyond 50 nodes (a /18 holds 50 nodes' pools, not 500's)."""
CHURN_SECONDS = {"quick": 30.0, "full": 600.0}
WRITE_METHODS = frozenset({"PUT", "PATCH", "DELETE", "POST"})
READ_BUCKET = (250.0, 25.0)
WRITE_BUCKET = (200.0, 10.0)


class Consumer(Protocol):
    """What the bench reads from the node side (``PodAddressAgent`` or ``NodeSubnetConsumer``)."""

    first_seen: dict[str, float]
    assigned_at: dict[str, float]
    errors: list[BaseException]

    def starvation(self) -> dict[str, float]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Scenario:
    consumer: str = "nodesubnet"
    churn_seconds: float = CHURN_SECONDS["quick"]
    headroom: int = 0
    release: str = "never"
    scale_down_delay: float = 60.0
    prefix: bool = False
    """Experimental /28 blocks (standalone VMs: uniform scale-set models carry no prefix)."""
    vms: bool = False
    """Standalone VMs instead of one uniform scale set (always with ``prefix``)."""
    placement: str = "scheduler"
    """``scheduler``: kube-scheduler places each pod, as in a real cluster; ``random``: the bench
    binds each pod to a node chosen at random (a harsher, unrealistic spread)."""
    operation_seconds: float = 0.0
    """How long each long-running operation (a NIC or instance write) takes in the emulator."""
    retry_after: float | None = DEFAULT_OPERATION_RETRY_AFTER
    """``Retry-After`` the emulator sends while an operation runs (None: not sent)."""
    workers: int = 8
    nodes: int = NODES
    steady_seconds: float = 0.0
    """Seconds of no pod change after the churn, in which ARM reads are counted (steady state)."""

    @property
    def buffer_ips(self) -> float:
        return SCALER.batch_size * SCALER.request_threshold_percent / 100 + self.headroom


@dataclass
class IdleSampler:
    """Samples idle IPs per node (on the NIC, unused, not pending release) every ``interval`` s,
    and how far a node's pool exceeds the highest demand (pods bound to it) it has had so far:
    with ``release: never`` a pool may only stay above today's demand by what it kept from its
    peak."""

    client: Client
    namespace: str
    interval: float = 1.0
    peak_per_node: float = 0.0
    beyond_peak_demand: float = 0.0
    samples: list[float] = field(default_factory=list)
    peak_demand: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(errors.ApiError):
                self.sample()

    def sample(self) -> None:
        configs = [
            NodeNetworkConfig.from_object(o)
            for o in self.client.list(NODE_NETWORK_CONFIG, self.namespace).items
        ]
        used: dict[str, int] = {}
        bound: dict[str, int] = {}
        for pod in self.client.list(POD, self.namespace).items:
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            if node:
                bound[node] = bound.get(node, 0) + 1
            if (pod.get("status") or {}).get("podIP"):
                used[node] = used.get(node, 0) + 1
        for node, count in bound.items():
            self.peak_demand[node] = max(self.peak_demand.get(node, 0), count)
        total = 0.0
        for config in configs:
            held = sum(
                address_count(a.ip for a in c.ip_assignments) for c in config.status.network_containers
            ) - len(config.spec.ips_not_in_use)
            idle = held - used.get(config.name, 0)
            self.peak_per_node = max(self.peak_per_node, idle)
            beyond = held - self.peak_demand.get(config.name, 0)
            self.beyond_peak_demand = max(self.beyond_peak_demand, beyond)
            total += max(0, idle)
        self.samples.append(total / max(1, len(configs)))


def throttled_by_buckets(requests: Sequence[RecordedRequest]) -> tuple[int, int]:
    """(reads, writes) that ARM's subscription token buckets would have refused, replayed over
    the requests' arrival times. Pure."""
    refused = [0, 0]
    tokens = [READ_BUCKET[0], WRITE_BUCKET[0]]
    last = [None, None]  # type: list[float | None]
    for request in sorted(requests, key=lambda r: r.monotonic):
        kind = 1 if request.method in WRITE_METHODS else 0
        capacity, rate = (READ_BUCKET, WRITE_BUCKET)[kind]
        previous = last[kind]
        if previous is not None:
            tokens[kind] = min(capacity, tokens[kind] + (request.monotonic - previous) * rate)
        last[kind] = request.monotonic
        if tokens[kind] >= 1:
            tokens[kind] -= 1
        else:
            refused[kind] += 1
    return refused[0], refused[1]


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def _pod(name: str, namespace: str, *, node: str | None, owner: str) -> dict[str, Any]:
    """A bench pod: bound to ``node``, or (None) left to kube-scheduler among the bench's nodes."""
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
        "terminationGracePeriodSeconds": 0,
    }
    if node is None:
        spec["nodeSelector"] = {SIMULATED_LABEL: owner}
        spec["tolerations"] = [{"operator": "Exists"}]
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _paced(count: int, rate: float) -> Iterator[int]:
    start = time.monotonic()
    for index in range(count):
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield index


@dataclass
class _Rig:
    """Everything one run starts."""

    client: Client
    emulator: ArmEmulator
    namespace: str
    owner: str
    manager: Manager
    simulator: NodeSimulator
    consumer: Consumer
    sampler: IdleSampler
    cloud: Any
    nodes: list[str] = field(default_factory=list)
    created_at: dict[str, float] = field(default_factory=dict)
    churn_names: set[str] = field(default_factory=set)
    alive: list[str] = field(default_factory=list)
    churn_started: float = 0.0
    churn_ended: float = 0.0
    settle_seconds: float = 0.0
    steady_started: float = 0.0
    steady_ended: float = 0.0


def _settings(scenario: Scenario, namespace: str, owner: str) -> NodeNetworkConfigSettings:
    base = NodeNetworkConfigSettings(
        namespace=namespace, node_selector=f"{SIMULATED_LABEL}={owner}", scaler=SCALER, demand_from_pods=True
    )
    return dataclasses.replace(
        base,
        consumer="nodesubnet" if scenario.consumer == "nodesubnet" else "crd",
        discovery_headroom_ips=scenario.headroom,
        scale_down_delay_seconds=scenario.scale_down_delay,
        prefix_blocks=scenario.prefix,
    )


def _build(scenario: Scenario, path: str, emulator: ArmEmulator) -> _Rig:
    client = Client.from_kubeconfig(path)
    install_crds(client, [NodeNetworkConfig, ClusterSubnetState])
    time.sleep(1.0)  # let the API server serve the new resources before the informers list them
    namespace, owner = f"ipam-bench-{uuid.uuid4().hex[:6]}", f"ipam-bench-{uuid.uuid4().hex[:6]}"
    client.create(NAMESPACE, {"metadata": {"name": namespace}})
    estate = emulator.estate
    estate.add_resource_group("rg-bench")
    vnet = estate.add_virtual_network(
        "rg-bench", "vnet", subnets={"pods": POD_SUBNET if scenario.nodes > NODES else "10.240.0.0/18"}
    )
    if scenario.prefix or scenario.vms:
        for index in range(scenario.nodes):
            estate.add_virtual_machine("rg-bench", f"vmbench{index:02d}", subnet_id=vnet + "/subnets/pods")
    else:
        estate.add_scale_set(
            "rg-bench", "vmssbench", subnet_id=vnet + "/subnets/pods", capacity=scenario.nodes
        )
    emulator.faults.add_latency(LATENCY)
    emulator.state.operation_duration = scenario.operation_seconds
    emulator.state.operation_retry_after = scenario.retry_after or None
    cloud = cloud_for(emulator, mutation_qps=10.0, mutation_burst=20)
    config = parse_config(
        {
            "metrics": {"bindAddress": "0"},
            "health": {"bindAddress": "127.0.0.1:0"},
            "leaderElection": {"enabled": False},
            "reconcilers": {"nodenetworkconfig": {"maxConcurrentReconciles": scenario.workers}},
        },
        "bench",
    )
    manager = Manager(config, kubeconfig=path)
    install(manager, _settings(scenario, namespace, owner), cloud.network, cloud.compute)
    simulator = NodeSimulator(client, machines_in_emulator(emulator.state), owner=owner, interval=0.5)
    consumer: Consumer
    if scenario.consumer == "nodesubnet":
        consumer = NodeSubnetConsumer(
            client, answers_in_emulator(emulator.state), node_selector=f"{SIMULATED_LABEL}={owner}", seed=1
        )
    else:
        consumer = PodAddressAgent(client, node_network_config_namespace=namespace, pod_namespace=namespace)
    sampler = IdleSampler(client, namespace)
    return _Rig(client, emulator, namespace, owner, manager, simulator, consumer, sampler, cloud)


def _wait_for_nodes(rig: _Rig, nodes: int) -> tuple[float, float]:
    """Wait until every node has joined and holds its first batch; returns when the last node
    joined and when the last first batch was in status (``time.monotonic()``)."""
    selector = f"{SIMULATED_LABEL}={rig.owner}"
    deadline = time.monotonic() + 180 + nodes
    while len(rig.client.list(NODE, label_selector=selector).items) < nodes:
        assert time.monotonic() < deadline, "nodes did not join"
        time.sleep(0.5)
    rig.nodes = sorted(n["metadata"]["name"] for n in rig.client.list(NODE, label_selector=selector).items)
    started = time.monotonic()
    while True:
        configs = [
            NodeNetworkConfig.from_object(o)
            for o in rig.client.list(NODE_NETWORK_CONFIG, rig.namespace).items
        ]
        ready = [
            c
            for c in configs
            if c.status.network_containers and c.status.assigned_ip_count >= SCALER.batch_size
        ]
        if len(ready) == nodes:
            return started, time.monotonic()
        assert time.monotonic() - started < 240 + 2 * nodes, "first batches not allocated"
        time.sleep(0.5)


def _drive(rig: Any, scenario: Scenario, rng: random.Random) -> None:
    """Warm up to the warm population, then churn at RATE/s created and deleted, then (for
    ``steady_seconds``) change nothing. ``rig`` is a ``_Rig`` or Cilium's ``CiliumRig``."""
    alive = rig.alive

    def create() -> str:
        name = f"p-{uuid.uuid4().hex[:10]}"
        node = rng.choice(rig.nodes) if scenario.placement == "random" else None
        rig.client.create(POD, _pod(name, rig.namespace, node=node, owner=rig.owner), rig.namespace)
        rig.created_at[name] = time.monotonic()
        alive.append(name)
        return name

    for _ in _paced(WARM_POPULATION * scenario.nodes // NODES, RATE):
        create()
    time.sleep(5.0)
    rig.churn_started = time.monotonic()
    for _ in _paced(int(scenario.churn_seconds * RATE), RATE):
        victim = alive.pop(rng.randrange(len(alive)))
        rig.client.delete(POD, victim, rig.namespace, grace_period_seconds=0, ignore_not_found=True)
        rig.churn_names.add(create())
    rig.churn_ended = time.monotonic()
    time.sleep(5.0)
    if scenario.steady_seconds > 0:
        rig.settle_seconds = _settle(rig)
    rig.steady_started = time.monotonic()
    time.sleep(scenario.steady_seconds)
    rig.steady_ended = time.monotonic()


def _settle(rig: Any, quiet: float = 30.0, limit: float = 240.0) -> float:
    """Wait until the tool has made no ARM write for ``quiet`` seconds (the pools caught up with
    the churn and any release is done), at most ``limit``; returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        since = time.monotonic() - quiet
        writes = [r for r in rig.emulator.requests.entries(since=since) if r.method in WRITE_METHODS]
        if not writes and time.monotonic() - started >= quiet:
            break
        time.sleep(1.0)
    return time.monotonic() - started


def measure(scenario: Scenario, kubeconfig: str | None) -> dict[str, Any]:
    """Run one scenario; returns its figures."""
    rng = random.Random(7)
    with cluster_kubeconfig(kubeconfig) as path, ArmEmulator() as emulator:
        rig = _build(scenario, path, emulator)
        tracker = IpConfigurationTracker(emulator)
        thread = threading.Thread(target=rig.manager.run, daemon=True)
        rig.simulator.start()
        thread.start()
        try:
            joined, filled = _wait_for_nodes(rig, scenario.nodes)
            rig.consumer.start()
            rig.sampler.start()
            _drive(rig, scenario, rng)
        finally:
            rig.consumer.stop()
            rig.sampler.stop()
            rig.manager.stop()
            thread.join(timeout=30)
            rig.simulator.stop()
        figures = _figures(rig, scenario, tracker.added())
        figures["first_batches_seconds"] = filled - joined
        fill = [r for r in rig.emulator.requests.entries() if r.monotonic <= filled]
        figures["first_batches_arm_requests"] = len(fill)
        figures["first_batches_arm_writes"] = len([r for r in fill if r.method in WRITE_METHODS])
        _clean_up(rig)
        return figures


def common_figures(rig: Any, scenario: Scenario, ips_added: int) -> dict[str, Any]:
    """What both tools are measured by: pool waits and ARM traffic during churn, ARM writes per
    IP added over the whole run, ARM reads per minute in the steady window. ``rig`` is a ``_Rig``
    or Cilium's ``CiliumRig``."""
    churn_requests = rig.emulator.requests.entries(since=rig.churn_started)
    churn_requests = [r for r in churn_requests if r.monotonic <= rig.churn_ended]
    everything = rig.emulator.requests.entries()
    writes = [r for r in churn_requests if r.method in WRITE_METHODS]
    starved = {_name(p): w for p, w in rig.consumer.starvation().items() if _name(p) in rig.churn_names}
    assigned = {_name(p) for p in list(rig.consumer.assigned_at)}  # the consumer still runs
    pool_waits = [*starved.values(), *([0.0] * (len(rig.churn_names) - len(starved)))]
    seconds = max(1e-9, rig.churn_ended - rig.churn_started)
    steady = [r for r in everything if rig.steady_started <= r.monotonic <= rig.steady_ended]
    added = ips_added
    all_writes = len([r for r in everything if r.method in WRITE_METHODS])
    return {
        "scenario": dataclasses.asdict(scenario),
        "ips_added": added,
        "arm_writes_total": all_writes,
        "arm_writes_per_ip": all_writes / max(1, added),
        "steady_reads_per_minute": len([r for r in steady if r.method not in WRITE_METHODS])
        * 60
        / max(1e-9, rig.steady_ended - rig.steady_started),
        "steady_writes": len([r for r in steady if r.method in WRITE_METHODS]),
        "settle_seconds": rig.settle_seconds,
        "steady_seconds_actual": rig.steady_ended - rig.steady_started,
        "churn_pods": len(rig.churn_names),
        "churn_seconds_actual": seconds,
        "pool_wait_p50": percentile(pool_waits, 0.5),
        "pool_wait_p99": percentile(pool_waits, 0.99),
        "pool_wait_max": max(pool_waits, default=0.0),
        "starved_pods": len(starved),
        "unassigned_at_end": len([p for p in rig.alive if p not in assigned]),
        "arm_writes": len(writes),
        "arm_requests": len(churn_requests),
        "arm_writes_per_pod_start": len(writes) / max(1, len(rig.churn_names)),
        "arm_reads_per_second": (len(churn_requests) - len(writes)) / seconds,
        "arm_writes_per_second": len(writes) / seconds,
        "emulator_429s": len([r for r in everything if r.status == 429]),
        "bucket_429s_replayed": throttled_by_buckets(everything),
        "consumer_errors": len(rig.consumer.errors),
    }


def _figures(rig: _Rig, scenario: Scenario, ips_added: int) -> dict[str, Any]:
    figures = common_figures(rig, scenario, ips_added)
    figures.update(
        {
            "idle_peak_per_node": rig.sampler.peak_per_node,
            "idle_mean_per_node": sum(rig.sampler.samples) / max(1, len(rig.sampler.samples)),
            "idle_allowed_per_node": scenario.buffer_ips + SCALER.batch_size,
            "held_beyond_peak_demand": rig.sampler.beyond_peak_demand,
        }
    )
    if isinstance(rig.consumer, NodeSubnetConsumer):
        figures["stale_handouts"] = rig.consumer.stale_handouts
        figures["refused_updates"] = rig.consumer.refused_updates()
    return figures


def _name(key: str) -> str:
    """A pod's name from a consumer's key (``namespace/name`` for the CNS stand-in)."""
    return key.rsplit("/", 1)[-1]


def _clean_up(rig: _Rig) -> None:
    with contextlib.suppress(errors.ApiError):
        rig.client.delete(NAMESPACE, rig.namespace)
    for node in rig.nodes:
        with contextlib.suppress(errors.ApiError):
            rig.client.delete(NODE, node)
    rig.cloud.close()


def render(figures: dict[str, Any]) -> str:
    scenario = figures["scenario"]

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.0f} ms"

    reads, writes = figures["bucket_429s_replayed"]
    machines = "VMs" if scenario["vms"] or scenario["prefix"] else "a scale set"
    shape = f"{'/28 blocks' if scenario['prefix'] else 'single IPs'} on {machines}"
    rows = [
        (
            "consumer",
            f"{scenario['consumer']} (release {scenario['release']}, "
            f"headroom {scenario['headroom']}, {shape}, placement {scenario['placement']})",
        ),
        ("churn as run", f"{figures['churn_seconds_actual']:.0f} s"),
        (
            "workload",
            f"{scenario.get('nodes', NODES)} nodes, {RATE:.0f} pods/s churn for "
            f"{scenario['churn_seconds']:.0f} s, {LATENCY * 1000:.0f} ms per ARM call",
        ),
        (
            "operations",
            f"{scenario['operation_seconds']:.0f} s each, Retry-After {scenario['retry_after']}, "
            f"{scenario['workers']} workers",
        ),
        ("first batches on all nodes (after the last joined)", f"{figures['first_batches_seconds']:.1f} s"),
        (
            "ARM requests / writes until then (from the start)",
            f"{figures['first_batches_arm_requests']} / {figures['first_batches_arm_writes']}",
        ),
        ("pods started during churn", str(figures["churn_pods"])),
        (
            "pool-caused wait once warm p50 / p99 / max",
            " / ".join(ms(figures[key]) for key in ("pool_wait_p50", "pool_wait_p99", "pool_wait_max")),
        ),
        (
            "pods that found no free IP / unaddressed at end",
            f"{figures['starved_pods']} / {figures['unassigned_at_end']}",
        ),
        (
            "ARM writes per pod start",
            f"{figures['arm_writes_per_pod_start']:.4f} ({figures['arm_writes']} writes)",
        ),
        (
            "ARM reads/s, writes/s during churn",
            f"{figures['arm_reads_per_second']:.2f} / {figures['arm_writes_per_second']:.3f}",
        ),
        (
            "429s: emulator / replayed buckets (reads, writes)",
            f"{figures['emulator_429s']} / ({reads}, {writes})",
        ),
        (
            "idle IPs per node: peak / mean / buffer + one batch",
            f"{figures['idle_peak_per_node']:.0f} / {figures['idle_mean_per_node']:.1f} / "
            f"{figures['idle_allowed_per_node']:.0f}",
        ),
        ("IPs held beyond the node's peak demand (max)", f"{figures['held_beyond_peak_demand']:.0f}"),
    ]
    if "stale_handouts" in figures:
        rows.append(
            (
                "stale hand-outs / refused IP updates (CNS)",
                f"{figures['stale_handouts']} / {figures['refused_updates']}",
            )
        )
    width = max(len(label) for label, _ in rows)
    return "\n".join(["network container IPAM (bench/ipam.py)", *(f"{k.ljust(width)}  {v}" for k, v in rows)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ipam", description=__doc__.split("\n")[0])
    parser.add_argument("--consumer", choices=("crd", "nodesubnet"), default="nodesubnet")
    parser.add_argument("--full", action="store_true", help="10 minutes of churn instead of 30 s")
    parser.add_argument("--churn-seconds", type=float, help="churn duration (overrides --full)")
    parser.add_argument("--headroom", type=int, default=0, help="discoveryHeadroomIPs")
    parser.add_argument(
        "--release", choices=("never",), default="never", help="idle is refused (docs/ipam.md)"
    )
    parser.add_argument("--prefix", action="store_true", help="experimental /28 blocks (standalone VMs)")
    parser.add_argument("--vms", action="store_true", help="standalone VMs instead of a scale set")
    parser.add_argument(
        "--placement",
        choices=("scheduler", "random"),
        default="scheduler",
        help="who places pods: kube-scheduler (default) or the bench at random",
    )
    parser.add_argument("--operation-seconds", type=float, default=0.0, help="each operation's duration")
    parser.add_argument(
        "--retry-after",
        type=float,
        default=DEFAULT_OPERATION_RETRY_AFTER,
        help="Retry-After while an operation runs (0: none)",
    )
    parser.add_argument("--workers", type=int, default=8, help="the controller's worker threads")
    parser.add_argument("--kubeconfig", help="use this cluster instead of a private control plane")
    parser.add_argument(
        "--peer",
        choices=("cilium",),
        help="run Cilium's Azure IPAM operator on the same workload too (bench/ipam_versus.py)",
    )
    parser.add_argument("--nodes", type=int, action="append", help="node count (repeatable; default 50)")
    parser.add_argument("--steady-seconds", type=float, default=120.0, help="steady window with --peer")
    parser.add_argument("--fill-limit", type=float, help="with --peer: give up filling after this many s")
    arguments = parser.parse_args(argv)
    churn = arguments.churn_seconds or CHURN_SECONDS["full" if arguments.full else "quick"]
    kubeconfig = arguments.kubeconfig or os.environ.get("KUBECONFIG")
    if arguments.peer == "cilium":
        from bench.ipam_versus import compare, render_side_by_side  # noqa: PLC0415 - it imports us

        runs = compare(
            arguments.nodes or [NODES], churn, arguments.steady_seconds, kubeconfig, arguments.fill_limit
        )
        print(render_side_by_side(runs, []))
        return 0
    scenario = Scenario(
        arguments.consumer,
        churn,
        arguments.headroom,
        arguments.release,
        prefix=arguments.prefix,
        vms=arguments.vms,
        placement=arguments.placement,
        operation_seconds=arguments.operation_seconds,
        retry_after=arguments.retry_after,
        workers=arguments.workers,
        nodes=(arguments.nodes or [NODES])[0],
    )
    print(render(measure(scenario, kubeconfig)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
