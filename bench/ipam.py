"""``python -m bench.ipam [--full] [--kubeconfig PATH]``: the network container IPAM benchmark.

50 nodes (one uniform scale set in the ARM emulator, every ARM call delayed by 200 ms), the
node_network_config reconciler (demand from pods, batch 16, buffer 50 %), the node simulator and a
pod address agent standing in for Azure CNS on the nodes. Pods are created at 20/s up to a warm
population, then created and deleted at 20/s each (quick: 30 s of churn; full: 2 minutes).
Reported (``run(full) -> str``, a printable table):

- the pool-caused wait: pods the agent found with no free IP on their node, and how long until
  they got one (a pod whose IP was ready waited 0 for the pool), p50/p99 over pods once warm;
- the end-to-end wait from the agent first seeing a pod, and from pod creation (these include
  the agent's own polling, serial writes and API latency, which are not the pool's);
- ARM calls per allocated IP (all ARM requests during the run / IPs added to NICs), and the
  ARM requests by operation;
- idle IPs beyond the configured buffer (status IPs not used by a pod, minus batch x buffer):
  peak per node and peak summed over the cluster.

Uses ``KUBECONFIG`` / ``--kubeconfig`` if given, else a private local control plane. Side
effects: a control plane, an emulator and threads, all stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.cluster import cluster_kubeconfig
from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.acn.v1alpha1 import ClusterSubnetState
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.models import NicInfo
from nodewright.controllers.node_network_config import (
    NODE_NETWORK_CONFIG,
    NodeNetworkConfigSettings,
    install,
)
from nodewright.controllers.node_network_config.cloud import MachineNicLocator, NetworkOperations
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.ipam import PoolScaler
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.config import parse_config
from nodewright.runtime.kinds import NAMESPACE, NODE, POD
from nodewright.runtime.manager import Manager
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.node_agent import PodAddressAgent

NODES = 50
RATE = 20.0
LATENCY = 0.2
SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
WARM_POPULATION = 400
CHURN_SECONDS = {"quick": 30.0, "full": 120.0}


class CountingNetwork:
    """``NetworkOperations`` that counts the IPs added (the denominator of calls per IP)."""

    def __init__(self, inner: NetworkOperations) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.added = 0
        self.removed = 0

    def get_network_interface(self, nic: str) -> NicInfo:
        return self._inner.get_network_interface(nic)

    def add_secondary_ip_configurations(
        self, nic: str, names: Sequence[str], subnet_id: str | None = None
    ) -> NicInfo:
        result = self._inner.add_secondary_ip_configurations(nic, names, subnet_id)
        with self._lock:
            self.added += len(names)
        return result

    def remove_secondary_ip_configurations(self, nic: str, names: Sequence[str]) -> NicInfo:
        result = self._inner.remove_secondary_ip_configurations(nic, names)
        with self._lock:
            self.removed += len(names)
        return result

    def get_subnet(self, subnet: str) -> Any:
        return self._inner.get_subnet(subnet)


@dataclass
class IdleSampler:
    """Samples idle IPs beyond the buffer every ``interval`` seconds in a thread."""

    client: Client
    namespace: str
    buffer_ips: float
    interval: float = 0.5
    peak_per_node: float = 0.0
    peak_total: float = 0.0
    samples: list[float] = field(default_factory=list)
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
        for pod in self.client.list(POD, self.namespace).items:
            if (pod.get("status") or {}).get("podIP"):
                node = str((pod.get("spec") or {}).get("nodeName"))
                used[node] = used.get(node, 0) + 1
        total = 0.0
        for config in configs:
            held = sum(len(c.ip_assignments) for c in config.status.network_containers)
            beyond = held - len(config.spec.ips_not_in_use) - used.get(config.name, 0) - self.buffer_ips
            self.peak_per_node = max(self.peak_per_node, beyond)
            total += max(0.0, beyond)
        self.peak_total = max(self.peak_total, total)
        self.samples.append(total)


def _percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def _pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _paced(count: int, rate: float) -> Iterator[int]:
    start = time.monotonic()
    for index in range(count):
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield index


def run(full: bool = False, kubeconfig: str | None = None) -> str:
    """Run the benchmark; returns the table of figures."""
    mode = "full" if full else "quick"
    figures = measure(CHURN_SECONDS[mode], kubeconfig or os.environ.get("KUBECONFIG"))
    return render(figures, mode)


def measure(churn_seconds: float, kubeconfig: str | None) -> dict[str, Any]:
    rng = random.Random(7)
    with cluster_kubeconfig(kubeconfig) as path, ArmEmulator() as emulator:
        client = Client.from_kubeconfig(path)
        install_crds(client, [NodeNetworkConfig, ClusterSubnetState])
        time.sleep(1.0)  # let the API server serve the new resources before the informers list them
        namespace = f"ipam-bench-{uuid.uuid4().hex[:6]}"
        client.create(NAMESPACE, {"metadata": {"name": namespace}})
        owner = f"ipam-bench-{uuid.uuid4().hex[:6]}"
        estate = emulator.estate
        estate.add_resource_group("rg-bench")
        vnet = estate.add_virtual_network("rg-bench", "vnet", subnets={"pods": "10.240.0.0/18"})
        estate.add_scale_set("rg-bench", "vmssbench", subnet_id=vnet + "/subnets/pods", capacity=NODES)
        emulator.faults.add_latency(LATENCY)
        cloud = cloud_for(emulator, mutation_qps=10.0, mutation_burst=20)
        network = CountingNetwork(cloud.network)
        settings = NodeNetworkConfigSettings(
            namespace=namespace, node_selector=f"{SIMULATED_LABEL}={owner}", scaler=SCALER
        )
        config = parse_config(
            {
                "metrics": {"bindAddress": "0"},
                "health": {"bindAddress": "127.0.0.1:0"},
                "leaderElection": {"enabled": False},
                "reconcilers": {"nodenetworkconfig": {"maxConcurrentReconciles": 8}},
            },
            "bench",
        )
        manager = Manager(config, kubeconfig=path)
        install(manager, settings, network, MachineNicLocator(cloud))
        simulator = NodeSimulator(client, machines_in_emulator(emulator.state), owner=owner, interval=0.5)
        agent = PodAddressAgent(
            client, node_network_config_namespace=namespace, pod_namespace=namespace, interval=0.05
        )
        sampler = IdleSampler(client, namespace, SCALER.batch_size * SCALER.request_threshold_percent / 100)
        thread = threading.Thread(target=manager.run, daemon=True)
        simulator.start()
        thread.start()
        try:
            deadline = time.monotonic() + 120
            while len(client.list(NODE, label_selector=f"{SIMULATED_LABEL}={owner}").items) < NODES:
                assert time.monotonic() < deadline, "nodes did not join"
                time.sleep(0.5)
            nodes = sorted(
                n["metadata"]["name"]
                for n in client.list(NODE, label_selector=f"{SIMULATED_LABEL}={owner}").items
            )
            ready_started = time.monotonic()
            while True:
                configs = client.list(NODE_NETWORK_CONFIG, namespace).items
                ready = [
                    c
                    for c in configs
                    if len(
                        ((c.get("status") or {}).get("networkContainers") or [{}])[0].get("ipAssignments")
                        or []
                    )
                    >= SCALER.batch_size
                ]
                if len(ready) == NODES:
                    break
                assert time.monotonic() - ready_started < 180, "first batches not allocated"
                time.sleep(0.5)
            first_batches_seconds = time.monotonic() - ready_started
            agent.start()
            sampler.start()
            created_at: dict[str, float] = {}
            alive: list[str] = []
            requests_before = emulator.requests.count()
            added_before = network.added
            # Warm-up: create at RATE/s up to the warm population.
            for _ in _paced(WARM_POPULATION, RATE):
                name = f"p-{uuid.uuid4().hex[:10]}"
                client.create(POD, _pod(name, namespace, rng.choice(nodes)), namespace)
                created_at[name] = time.monotonic()
                alive.append(name)
            warm_names = set(created_at)
            time.sleep(5.0)
            # Churn: create and delete at RATE/s each.
            for _ in _paced(int(churn_seconds * RATE), RATE):
                name = f"p-{uuid.uuid4().hex[:10]}"
                client.create(POD, _pod(name, namespace, rng.choice(nodes)), namespace)
                created_at[name] = time.monotonic()
                victim = alive.pop(rng.randrange(len(alive)))
                client.delete(POD, victim, namespace, grace_period_seconds=0, ignore_not_found=True)
                alive.append(name)
            time.sleep(5.0)
        finally:
            agent.stop()
            sampler.stop()
            manager.stop()
            thread.join(timeout=30)
            simulator.stop()
        requests_total = emulator.requests.count()
        requests = requests_total - requests_before
        by_operation = emulator.requests.counts_by_operation()
        added = network.added - added_before
        churn_names = set(created_at) - warm_names

        def waits(names: set[str], since_creation: bool) -> list[float]:
            result = []
            for pod in names:
                if pod not in agent.assigned_at:
                    continue
                start = created_at[pod] if since_creation else agent.first_seen.get(pod, created_at[pod])
                result.append(max(0.0, agent.assigned_at[pod] - start))
            return result

        unassigned = [pod for pod in alive if pod not in agent.assigned_at]
        with contextlib.suppress(errors.ApiError):
            client.delete(NAMESPACE, namespace)
        for node in nodes:
            with contextlib.suppress(errors.ApiError):
                client.delete(NODE, node)
        cloud.close()
        return {
            "nodes": NODES,
            "rate": RATE,
            "latency": LATENCY,
            "churn_seconds": churn_seconds,
            "pods": len(created_at),
            "churn_pods": len(churn_names),
            "first_batches_seconds": first_batches_seconds,
            "warm_wait": waits(warm_names, False),
            "churn_wait": waits(churn_names, False),
            "warm_wait_created": waits(warm_names, True),
            "churn_wait_created": waits(churn_names, True),
            "warm_starved": {p: w for p, w in agent.starvation().items() if p in warm_names},
            "churn_starved": {p: w for p, w in agent.starvation().items() if p in churn_names},
            "unassigned_at_end": len(unassigned),
            "arm_requests": requests,
            "arm_requests_total": requests_total,
            "ips_added_total": network.added,
            "ips_added": added,
            "ips_removed": network.removed,
            "by_operation": by_operation,
            "idle_peak_per_node": sampler.peak_per_node,
            "idle_peak_total": sampler.peak_total,
            "idle_mean_total": statistics.fmean(sampler.samples) if sampler.samples else 0.0,
            "agent_errors": len(agent.errors),
        }


def _pool_waits(figures: dict[str, Any]) -> list[float]:
    """Per pod created once warm: how long it waited because no IP was free (0 if one was)."""
    starved: dict[str, float] = figures["churn_starved"]
    return [*starved.values(), *([0.0] * (figures["churn_pods"] - len(starved)))]


def render(figures: dict[str, Any], mode: str) -> str:
    def ms(values: list[float], fraction: float) -> str:
        return f"{_percentile(values, fraction) * 1000:.0f} ms" if values else "n/a"

    starved_waits = list(figures["churn_starved"].values())
    per_ip = figures["arm_requests"] / figures["ips_added"] if figures["ips_added"] else float("nan")
    rows = [
        (
            "mode",
            f"{mode}: {figures['nodes']} nodes, {figures['rate']:.0f} pods/s, "
            f"{figures['latency'] * 1000:.0f} ms per ARM call, {figures['churn_seconds']:.0f} s churn",
        ),
        ("pods created", str(figures["pods"])),
        ("first batches on all nodes", f"{figures['first_batches_seconds']:.1f} s"),
        (
            "wait for an address, warm-up (p50 / p99)",
            f"{ms(figures['warm_wait'], 0.5)} / {ms(figures['warm_wait'], 0.99)}",
        ),
        (
            "wait for an address, once warm (p50 / p99)",
            f"{ms(figures['churn_wait'], 0.5)} / {ms(figures['churn_wait'], 0.99)}",
        ),
        (
            "  from creation, warm-up (p50 / p99)",
            f"{ms(figures['warm_wait_created'], 0.5)} / {ms(figures['warm_wait_created'], 0.99)}",
        ),
        (
            "  from creation, once warm (p50 / p99)",
            f"{ms(figures['churn_wait_created'], 0.5)} / {ms(figures['churn_wait_created'], 0.99)}",
        ),
        (
            "pods that found no free IP, warm-up / once warm",
            f"{len(figures['warm_starved'])} / {len(figures['churn_starved'])}",
        ),
        (
            "  their wait for an IP, once warm (p50 / p99)",
            f"{ms(starved_waits, 0.5)} / {ms(starved_waits, 0.99)}",
        ),
        (
            "pool-caused wait once warm, over all pods (p50 / p99)",
            f"{ms(_pool_waits(figures), 0.5)} / {ms(_pool_waits(figures), 0.99)}",
        ),
        ("pods without an address at the end", str(figures["unassigned_at_end"])),
        (
            "ARM requests / IPs added / removed",
            f"{figures['arm_requests']} / {figures['ips_added']} / {figures['ips_removed']}",
        ),
        ("ARM calls per allocated IP (pod workload)", f"{per_ip:.2f}"),
        (
            "ARM calls per allocated IP (whole run)",
            f"{figures['arm_requests_total'] / max(1, figures['ips_added_total']):.2f}",
        ),
        ("idle IPs beyond buffer: peak per node", f"{figures['idle_peak_per_node']:.0f}"),
        (
            "idle IPs beyond buffer: peak / mean cluster",
            f"{figures['idle_peak_total']:.0f} / {figures['idle_mean_total']:.0f}",
        ),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [
        "network container IPAM (bench/ipam.py)",
        *(f"{label.ljust(width)}  {value}" for label, value in rows),
    ]
    operations = sorted(figures["by_operation"].items(), key=lambda item: -item[1])
    lines.append("ARM requests by operation: " + ", ".join(f"{op} {n}" for op, n in operations[:8]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ipam", description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="2 minutes of churn instead of 30 s")
    parser.add_argument("--kubeconfig", help="use this cluster instead of a private control plane")
    arguments = parser.parse_args(argv)
    print(run(arguments.full, arguments.kubeconfig))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
