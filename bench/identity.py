"""``python -m bench.identity [--full] [--kubeconfig PATH]``: identity assignment at scale;
``--peer mic`` runs aad-pod-identity's MIC beside nodewright instead (:mod:`bench.identity_peers`).

Pods over nodes of scale sets and standalone VMs (full: 1,000 pods over 200 nodes in 10 scale
sets and 20 VMs, 50 identities; quick: 200 pods over 40 nodes in 2 scale sets and 8 VMs, 20
identities), ARM emulator latency 200 ms on every call, the cloud's default mutation rate limit
(10 writes/s, burst 5), three 429s with Retry-After 2 s on the first scale-set writes. Reports,
from cold start and after 10 % pod churn (as many pods deleted as new ones created): ARM GETs and
PATCHes, the most PATCHes one VM or scale set received, requests to a throttled endpoint before
its Retry-After (must be 0), the AzureAssignedIdentity and Event writes the API server counted,
and the time to converge (every pod's AzureAssignedIdentity Assigned, every target carrying
exactly the identities its pods need) next to the latency floor. Convergence is read in process
(the emulator's state, a watch of the objects); the churn wave starts once cold start's Events
are written.

``run(full)`` returns the table as text. Starts a private control plane unless ``--kubeconfig``
is given. Side effects: processes and threads, loopback network I/O, a temporary directory.
"""

from __future__ import annotations

import argparse
import functools
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.cluster import cluster_kubeconfig
from nodewright.api.aadpodidentity.v1 import RESOURCES
from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator, RecordedRequest
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.controllers.cloud_access import settings_as_options
from nodewright.controllers.identity import EVENT_COMPONENT
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
)
from nodewright.devenv.crds import install_crds
from nodewright.devenv.kwok import LEASE_SECONDS
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.runtime.informers.informer import Informer
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NAMESPACE, NODE, POD
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager

__all__ = ["Phase", "Scale", "run"]

LATENCY = 0.2
WORKERS = 8
THROTTLES = 3
RETRY_AFTER = 2.0
IN_FLIGHT_GRACE = 0.05
JOIN_STEPS = 10
"""Nodes join in this many steps over one lease-renewal period (``Bench._join_spread``)."""


@dataclass(frozen=True)
class Scale:
    scale_sets: int
    instances_per_scale_set: int
    virtual_machines: int
    pods: int
    identities: int


QUICK = Scale(scale_sets=2, instances_per_scale_set=16, virtual_machines=8, pods=200, identities=20)
FULL = Scale(scale_sets=10, instances_per_scale_set=18, virtual_machines=20, pods=1_000, identities=50)


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    gets: int
    patches: int
    max_patches_per_target: int
    early_requests: int
    identity_gets: int
    floor: float
    assigned_writes: int = 0
    events: int = 0


def _is_compute_write(entry: RecordedRequest) -> bool:
    return entry.method in ("PUT", "PATCH", "POST", "DELETE") and "/microsoft.compute/" in entry.path.lower()


def _early_requests(entries: list[RecordedRequest]) -> int:
    """Compute writes sent after a 429 on a compute write reached the client, and before its
    Retry-After ran out. The client learns of a 429 when the emulator answers it (``answered``,
    recorded once the emulator's latency has been slept: on a loaded machine that is later than
    arrival plus ``LATENCY``), and may send again ``RETRY_AFTER`` after that.
    ``IN_FLIGHT_GRACE`` is the timing slack on both ends: requests arriving within it after the
    answer were already on the wire, and a request within it of the end of the wait is on time
    (the client counts the wait from when it read the answer)."""
    writes = [e for e in entries if _is_compute_write(e)]
    early: set[int] = set()
    for throttled in (e for e in writes if e.status == 429):
        answered = throttled.answered or throttled.monotonic + LATENCY
        start, deadline = answered + IN_FLIGHT_GRACE, answered + RETRY_AFTER - IN_FLIGHT_GRACE
        early.update(index for index, e in enumerate(writes) if start <= e.monotonic < deadline)
    return len(early)


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """What the convergence check reads of an AzureAssignedIdentity."""
    metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return {
        "metadata": {k: metadata.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
        "spec": {"pod": spec.get("pod"), "podNamespace": spec.get("podNamespace")},
        "status": {"status": (obj.get("status") or {}).get("status")},
    }


def _write_counts(client: Client) -> tuple[int, int]:
    """The API server's counts so far of AzureAssignedIdentity writes and Event writes (from its
    ``apiserver_request_total``), so a phase reports the Kubernetes round trips it cost."""
    assigned = events = 0.0
    families = text_string_to_metric_families(client.request("GET", "/metrics").text)
    for family in (f for f in families if f.name == "apiserver_request"):
        for sample in family.samples:
            write = sample.labels.get("verb") in ("POST", "PUT", "PATCH", "DELETE")
            if not write or sample.name != "apiserver_request_total":
                continue
            if sample.labels.get("resource") == "azureassignedidentities":
                assigned += sample.value
            elif sample.labels.get("resource") == "events":
                events += sample.value
    return int(assigned), int(events)


def _phase(
    name: str,
    entries: list[RecordedRequest],
    seconds: float,
    targets: int,
    *,
    throttles: int = 0,
    writes: tuple[int, int] = (0, 0),
) -> Phase:
    gets = [e for e in entries if e.operation in ("VirtualMachineScaleSets.get", "VirtualMachines.get")]
    patches = [
        e for e in entries if e.operation in ("VirtualMachineScaleSets.update", "VirtualMachines.update")
    ]
    per_target: dict[str, int] = {}
    for entry in patches:
        if entry.status < 300:
            per_target[entry.path.lower()] = per_target.get(entry.path.lower(), 0) + 1
    rounds = -(-targets // WORKERS)
    return Phase(
        name=name,
        seconds=seconds,
        gets=len(gets),
        patches=len(patches),
        max_patches_per_target=max(per_target.values(), default=0),
        early_requests=_early_requests(entries),
        identity_gets=sum(1 for e in entries if e.operation.startswith("UserAssignedIdentities.")),
        floor=rounds * 3 * LATENCY + throttles * RETRY_AFTER,
        assigned_writes=writes[0],
        events=writes[1],
    )


class Bench:
    """One run: estate, objects, manager, measurements."""

    def __init__(self, client: Client, kubeconfig: str, emulator: ArmEmulator, scale: Scale) -> None:
        self.client = client
        self.kubeconfig = kubeconfig
        self.emulator = emulator
        self.scale = scale
        self.namespace = f"bench-identity-{uuid.uuid4().hex[:6]}"
        self.random = random.Random(7)
        self.identity_ids: list[str] = []
        self.targets: dict[str, str] = {}  # node name -> target ARM ID (lowercased)
        self.pods: dict[str, tuple[str, int]] = {}  # pod -> (node, identity index)
        self.watched = Informer(client, AZURE_ASSIGNED_IDENTITY, transform=_slim)

    def build(self) -> None:
        estate = self.emulator.estate
        estate.add_resource_group("bench-nodes")
        estate.add_resource_group("bench-identities")
        subnet = (
            estate.add_virtual_network("bench-nodes", "vnet", subnets={"nodes": "10.0.0.0/12"})
            + "/subnets/nodes"
        )
        self.identity_ids = [
            estate.add_identity("bench-identities", f"id-{i:03d}") for i in range(self.scale.identities)
        ]
        for index in range(self.scale.scale_sets):
            estate.add_scale_set(
                "bench-nodes",
                f"pool{index:02d}",
                subnet_id=subnet,
                capacity=self.scale.instances_per_scale_set,
            )
        for index in range(self.scale.virtual_machines):
            estate.add_virtual_machine("bench-nodes", f"vm{index:02d}", subnet_id=subnet)
        self.client.create(NAMESPACE, {"metadata": {"name": self.namespace}})
        for index, identity_id in enumerate(self.identity_ids):
            client_id = str((self.emulator.state.render(identity_id) or {})["properties"]["clientId"])
            self.client.create(
                AZURE_IDENTITY,
                {
                    "metadata": {"name": f"id-{index:03d}", "namespace": self.namespace},
                    "spec": {"type": 0, "resourceID": identity_id, "clientID": client_id},
                },
            )
            self.client.create(
                AZURE_IDENTITY_BINDING,
                {
                    "metadata": {"name": f"b-{index:03d}", "namespace": self.namespace},
                    "spec": {"azureIdentity": f"id-{index:03d}", "selector": f"{self.namespace}-{index}"},
                },
            )

    def nodes(self) -> None:
        for node in self.client.list(NODE, label_selector=f"{SIMULATED_LABEL}={self.namespace}").items:
            provider = str(node["spec"]["providerID"]).lower()
            target = (
                provider.split("/virtualmachines/")[0]
                if "/virtualmachinescalesets/" in provider
                else provider
            )
            self.targets[node["metadata"]["name"]] = target.removeprefix("azure://")

    def create_pod(self, name: str, node: str, identity: int) -> None:
        self.client.create(
            POD,
            {
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {"aadpodidbinding": f"{self.namespace}-{identity}"},
                },
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
            },
        )
        self.pods[name] = (node, identity)

    def delete_pod(self, name: str) -> None:
        del self.pods[name]
        self.client.delete(POD, name, self.namespace, grace_period_seconds=0, ignore_not_found=True)

    def expected(self) -> dict[str, set[str]]:
        wanted: dict[str, set[str]] = {target: set() for target in set(self.targets.values())}
        for node, identity in self.pods.values():
            wanted[self.targets[node]].add(self.identity_ids[identity].lower())
        return wanted

    def _identities_on(self, targets: Iterable[str]) -> dict[str, set[str]]:
        """Each target's identities, read in place under the emulator's lock (no copy of the
        documents: the check runs every 0.1 s beside the manager it measures)."""
        found: dict[str, set[str]] = {}
        with self.emulator.state.locked() as state:
            for target in targets:
                scale_set = state.scale_sets.get(target)
                resource = scale_set.resource if scale_set is not None else state.virtual_machines.get(target)
                document = resource.document if resource is not None else {}
                assigned = (document.get("identity") or {}).get("userAssignedIdentities") or {}
                found[target] = {key.lower() for key in assigned}
        return found

    def converged(self, expected: dict[str, set[str]]) -> bool:
        """Every target carries exactly its pods' identities (``expected``), then every pod's
        AzureAssignedIdentity is Assigned; both read in process (the emulator's state and a
        watch of the objects), so checking every 0.1 s puts no load on the API server."""
        if self._identities_on(expected) != expected:
            return False
        assigned = [
            item for item in self.watched.store.list() if item["spec"].get("podNamespace") == self.namespace
        ]
        if {item["spec"]["pod"] for item in assigned} != set(self.pods) or len(assigned) != len(self.pods):
            return False
        return all(item["status"].get("status") == "Assigned" for item in assigned)

    def wait(self, timeout: float = 600.0) -> float:
        start = time.monotonic()
        expected = self.expected()  # the pods change only by the bench's own hand, before this
        while not self.converged(expected):
            if time.monotonic() - start > timeout:
                raise TimeoutError("identity assignment did not converge")
            time.sleep(0.1)
        return time.monotonic() - start

    def manager(self) -> Manager:
        settings = CloudSettings(
            subscription_id=DEFAULT_SUBSCRIPTION,
            arm_endpoint=self.emulator.endpoint,
            credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="bench-token"),  # noqa: S106 - the emulator accepts any token
            ca_bundle=str(self.emulator.ca_file),
            polling_interval=0.0,
        )
        data = {
            "metrics": {"bindAddress": "0"},
            "health": {"bindAddress": "0"},
            "leaderElection": {"enabled": False},
            "logging": {"level": "warning"},
            "reconcilers": {
                "identity-assignment": {
                    "module": "nodewright.controllers.identity",
                    "maxConcurrentReconciles": WORKERS,
                    "options": {"cloud": settings_as_options(settings)},
                }
            },
        }
        manager = Manager(parse_config(data, "bench"), kubeconfig=self.kubeconfig)
        manager.setup_reconcilers()
        return manager

    def _join_spread(self, simulator: NodeSimulator, joined: list[int], machines: int) -> None:
        """Nodes join in steps over one lease-renewal period, as a pool's nodes come up over
        time: kwok renews each Node's lease every ``LEASE_SECONDS / 4`` from when it joined, so
        nodes that all joined in the same second renew all at once, a burst of one lease write
        per node every 10 s that would land in some measurements and not in others."""
        renewal = LEASE_SECONDS / 4
        for step in range(1, JOIN_STEPS + 1):
            joined[0] = -(-machines * step // JOIN_STEPS)
            simulator.sync_once()
            if step < JOIN_STEPS:
                time.sleep(renewal / JOIN_STEPS)

    def run(self) -> list[Phase]:
        self.build()
        # No machine comes or goes while the bench measures: the simulator's list of every Node
        # (its way of noticing machines) need not load the API server every second.
        everything = machines_in_emulator(self.emulator.state)
        joined = [0]
        simulator = NodeSimulator(
            self.client, lambda: everything()[: joined[0]], owner=self.namespace, interval=5.0
        )
        self._join_spread(simulator, joined, len(everything()))
        self.nodes()
        nodes = sorted(self.targets)
        for index in range(self.scale.pods):
            self.create_pod(
                f"p-{index:05d}", nodes[index % len(nodes)], self.random.randrange(self.scale.identities)
            )
        simulator.start()
        self.emulator.faults.add_latency(LATENCY)
        self.emulator.faults.throttle(
            "VirtualMachineScaleSets.update", times=THROTTLES, retry_after=RETRY_AFTER
        )
        targets = len(set(self.targets.values()))
        self.watched.start()
        while not self.watched.has_synced():
            time.sleep(0.05)
        counts = _write_counts(self.client)
        manager = self.manager()
        runner = _Runner(manager)
        try:
            mark = time.monotonic()
            cold = self.wait()
            cold_phase = _phase(
                "cold start",
                self.emulator.requests.entries(since=mark),
                cold,
                targets,
                throttles=THROTTLES,
                writes=_delta(counts, counts := _write_counts(self.client)),
            )
            # Steady state before the wave: cold start's Events (one per pod, written one at a
            # time in the background) would otherwise still load the API server during it.
            manager.event_recorder(EVENT_COMPONENT).flush(timeout=120)
            time.sleep(1.0)
            counts = _write_counts(self.client)
            mark = time.monotonic()
            churn = self.scale.pods // 10
            gone = self.random.sample(sorted(self.pods), churn)
            new = [
                (f"q-{index:05d}", self.random.choice(nodes), self.random.randrange(self.scale.identities))
                for index in range(churn)
            ]
            changes: list[Callable[[], None]] = []
            for name, (pod, node, identity) in zip(gone, new, strict=True):
                changes.append(functools.partial(self.delete_pod, name))
                changes.append(functools.partial(self.create_pod, pod, node, identity))
            with ThreadPoolExecutor(max_workers=10) as pool:  # one wave: all changes at once
                list(pool.map(lambda change: change(), changes))
            churned = time.monotonic() - mark
            churn_seconds = self.wait() + churned
            churn_phase = _phase(
                f"10 % churn (applied in {churned:.1f} s)",
                self.emulator.requests.entries(since=mark),
                churn_seconds,
                targets,
                writes=_delta(counts, _write_counts(self.client)),
            )
        finally:
            runner.stop()
            simulator.stop()
            self.watched.stop()
        return [cold_phase, churn_phase]


def _delta(before: tuple[int, int], after: tuple[int, int]) -> tuple[int, int]:
    return after[0] - before[0], after[1] - before[1]


class _Runner:
    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.thread = threading.Thread(target=manager.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.manager.stop()
        self.thread.join(30)


def _table(scale: Scale, phases: list[Phase]) -> str:
    targets = scale.scale_sets + scale.virtual_machines
    nodes = scale.scale_sets * scale.instances_per_scale_set + scale.virtual_machines
    lines = [
        f"identity assignment: {scale.pods} pods, {nodes} nodes ({scale.scale_sets} scale sets, "
        f"{scale.virtual_machines} VMs), {scale.identities} identities, ARM latency {LATENCY * 1000:.0f} ms, "
        f"{WORKERS} workers, {THROTTLES} x 429 (Retry-After {RETRY_AFTER:g} s)",
        "",
        "| phase | converged (s) | floor (s) | ARM GETs | ARM PATCHes | max PATCHes per target "
        "| early requests | identity GETs | AzureAssignedIdentity writes | Events |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phase in phases:
        lines.append(
            f"| {phase.name} | {phase.seconds:.1f} | {phase.floor:.1f} | {phase.gets} | {phase.patches} | "
            f"{phase.max_patches_per_target} | {phase.early_requests} | {phase.identity_gets} | "
            f"{phase.assigned_writes} | {phase.events} |"
        )
    lines.append("")
    lines.append(
        f"{targets} targets. floor = ceil(targets / workers) x 3 sequential ARM calls x latency "
        "(GET, the update's own GET, PATCH), plus the Retry-After waits of the 429s (cold start); "
        "PATCHes include the throttled ones; early requests = compute writes sent inside a Retry-After; "
        "AzureAssignedIdentity writes and Events: every client's, from the API server's request counts "
        "(the bench's own pod writes are Pods, not counted)."
    )
    return "\n".join(lines)


def run(full: bool, kubeconfig: str | None = None) -> str:
    """Run the benchmark; returns the table."""
    scale = FULL if full else QUICK
    with (
        cluster_kubeconfig(kubeconfig) as config,
        tempfile.TemporaryDirectory(prefix="bench-identity-") as directory,
        ArmEmulator(state_dir=Path(directory), certificates=issue_loopback_certificates()) as emulator,
    ):
        client = Client.from_kubeconfig(config)
        install_crds(client, RESOURCES)
        phases = Bench(client, config, emulator, scale).run()
    return _table(scale, phases)


def run_beside_peer(full: bool, results: Path) -> str:
    """``--peer mic``: nodewright and MIC side by side (:mod:`bench.identity_peers`); writes
    ``identity-vs-mic[-quick].*`` under ``results`` and returns the Markdown report."""
    from bench import identity_peers, identity_peers_report  # noqa: PLC0415 - only this mode needs them

    workload = identity_peers.FULL if full else identity_peers.QUICK
    identity_peers.mic_binary()  # build MIC first (minutes, once), outside any measurement
    runs = identity_peers.run(workload)
    summary = identity_peers_report.summarise(runs, workload, "full" if full else "quick")
    identity_peers_report.write(summary, results)
    return identity_peers_report.render(summary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.identity", description=__doc__)
    parser.add_argument("--full", action="store_true", help="1,000 pods over 200 nodes (default: quick)")
    parser.add_argument("--kubeconfig", help="use this cluster instead of a private control plane")
    parser.add_argument(
        "--peer",
        choices=["mic"],
        help="run aad-pod-identity's MIC v1.8.17 (built from its Go module) and nodewright side by side "
        "on the peer workload, each on its own private control plane (--kubeconfig is not used)",
    )
    parser.add_argument(
        "--results", default=str(Path(__file__).parent / "results"), help="where --peer writes its report"
    )
    arguments = parser.parse_args(argv)
    if arguments.peer:
        print(run_beside_peer(arguments.full, Path(arguments.results)))
        return 0
    print(run(arguments.full, arguments.kubeconfig))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
