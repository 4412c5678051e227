"""``python -m bench.identity --peer mic [--full]``: nodewright's identity assignment beside
aad-pod-identity's MIC v1.8.17, unmodified, one tool at a time on the same seeded workload.

Each (scenario, tool) run gets its own control plane (with an audit log naming each user) and ARM
emulator (200 ms on every call), the same estate and the same pods from the same seed:
3 identities (``id-web`` already on the first scale set, put there by someone else), Uniform and
Flexible scale sets (full: 3 + 2 of 4 nodes, 200 pods; quick: 3 + 2 of 2 nodes, 60 pods), then

- a burst of every pod at once;
- churn (20 % of the pods deleted, as many new ones created, at once);
- scale to zero (every pod deleted);

in two scenarios: clean, and with three 429s (Retry-After 2 s) injected on scale-set updates at
the start of each phase. MIC runs as its own process with its own service principal (the
emulator's v1 token route), upstream's CRDs, ``AZURE_ENVIRONMENT_FILEPATH`` and ``SSL_CERT_FILE``
(:mod:`nodewright.devenv.peers`); nodewright runs as ``nodewright run`` with the identity
reconciler alone, its deployed defaults and MIC's polling interval (5 s). A phase ends when every
pod's AzureAssignedIdentity is Assigned and every target carries exactly what it should (its
seeded identity and its pods'), or at the phase timeout.

Measured per tool and phase (:mod:`bench.identity_peers_report` turns them into tables): pod
Running to Assigned (p50, p99, max), ARM requests, writes, polls, 404s and 429s from the emulator's
request log split by the tool's token, API writes by user from the audit log, whether the seeded
identity survived, and the tool's CPU seconds. Side effects: processes, loopback I/O, files.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import random
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.mic_peer import MIC_CLIENT_ID, MIC_NAMESPACE, MIC_SECRET, MIC_USER, mic_binary, start_mic
from bench.mic_peer import arm_counts as count_requests
from bench.processes import Contender, RunningProcess
from nodewright.api.aadpodidentity.v1 import RESOURCES
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
)
from nodewright.devenv import ControlPlane
from nodewright.devenv.controlplane import free_port
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import NodeSimulator, machines_in_emulator
from nodewright.devenv.peers import PeerCloud, install_upstream_pod_identity_crds
from nodewright.runtime.informers.informer import Informer
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NAMESPACE, NODE, POD

__all__ = ["FULL", "QUICK", "PhaseRun", "ToolRun", "Workload", "mic_binary", "run", "run_tool"]

REPOSITORY = Path(__file__).resolve().parents[1]
LATENCY = 0.2
POLLING_INTERVAL = 5.0
"""MIC's fixed LRO polling delay (go-autorest PollingDelay), given to nodewright too."""
THROTTLES = 3
RETRY_AFTER = 2.0
NODEWRIGHT_TOKEN = "nodewright-bench"  # noqa: S105 - the emulator accepts any bearer token
USERS = {"mic": MIC_USER, "nodewright": "bench-nodewright"}
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [bench-mic, bench-nodewright]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


@dataclass(frozen=True)
class Workload:
    uniform_scale_sets: int
    flexible_scale_sets: int
    instances: int
    pods: int
    phase_timeout: float
    identities: tuple[str, ...] = ("id-web", "id-api", "id-batch")
    churn_percent: int = 20

    @property
    def scale_sets(self) -> int:
        return self.uniform_scale_sets + self.flexible_scale_sets


QUICK = Workload(uniform_scale_sets=3, flexible_scale_sets=2, instances=2, pods=60, phase_timeout=60.0)
FULL = Workload(uniform_scale_sets=3, flexible_scale_sets=2, instances=4, pods=200, phase_timeout=120.0)
SEEDED = "id-web"
"""Already on the first Uniform scale set before the tool starts (a tool must never remove it)."""


@dataclass
class PhaseRun:
    """What one phase of one tool cost and reached."""

    name: str
    seconds: float
    converged: bool
    pods_changed: int
    latencies: list[float] = field(default_factory=list)
    unassigned: int = 0
    flexible_pods: int = 0
    flexible_assigned: int = 0
    seeded_kept: bool = True
    last_assigned: float | None = None
    """Seconds from the phase's start to the last of its new pods' assignments."""
    arm: dict[str, int] = field(default_factory=dict)
    api_writes: dict[str, int] = field(default_factory=dict)


@dataclass
class ToolRun:
    tool: str
    scenario: str
    phases: list[PhaseRun] = field(default_factory=list)
    cpu_seconds: float = 0.0
    exit_code: int | None = None
    log_tail: str = ""


class Timeline:
    """First time each pod was seen Running and its AzureAssignedIdentity Assigned (informer
    handlers, so nothing is polled from the API server)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.running: dict[str, float] = {}
        self.assigned: dict[str, float] = {}
        self.assignments: dict[str, tuple[str, str]] = {}  # object key -> (pod, status)

    def on_pod(self, obj: dict[str, Any]) -> None:
        if (obj.get("status") or {}).get("phase") == "Running":
            self.running.setdefault(obj["metadata"]["name"], time.monotonic())

    def on_assignment(self, obj: dict[str, Any], deleted: bool = False) -> None:
        spec, metadata = obj.get("spec") or {}, obj.get("metadata") or {}
        if spec.get("podNamespace") != self.namespace:
            return
        key = f"{metadata.get('namespace')}/{metadata.get('name')}"
        if deleted:
            self.assignments.pop(key, None)
            return
        status = str((obj.get("status") or {}).get("status") or "")
        self.assignments[key] = (str(spec.get("pod")), status)
        if status == "Assigned":
            self.assigned.setdefault(str(spec.get("pod")), time.monotonic())


class _Handler:
    def __init__(
        self, on_object: Callable[[dict[str, Any]], None], on_gone: Callable[[dict[str, Any]], None]
    ):
        self._on_object, self._on_gone = on_object, on_gone

    def on_add(self, obj: dict[str, Any]) -> None:
        self._on_object(obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        del old
        self._on_object(new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        self._on_gone(obj)


class Estate:
    """The emulated estate, the cluster objects and the pods of one run."""

    def __init__(self, client: Client, emulator: ArmEmulator, workload: Workload, namespace: str) -> None:
        self.client, self.emulator, self.workload, self.namespace = client, emulator, workload, namespace
        self.random = random.Random(7)
        self.identity_ids: dict[str, str] = {}
        self.seeded_target = ""
        self.targets: dict[str, str] = {}  # node -> target ARM ID (lowercased)
        self.flexible_nodes: set[str] = set()
        self.pods: dict[str, tuple[str, str]] = {}  # pod -> (node, identity name)

    def build(self) -> None:
        estate = self.emulator.estate
        estate.add_resource_group("bench-nodes")
        estate.add_resource_group("bench-identities")
        vnet = estate.add_virtual_network("bench-nodes", "vnet", subnets={"nodes": "10.0.0.0/16"})
        for name in self.workload.identities:
            self.identity_ids[name] = estate.add_identity("bench-identities", name)
        for index in range(self.workload.scale_sets):
            flexible = index >= self.workload.uniform_scale_sets
            scale_set = estate.add_scale_set(
                "bench-nodes",
                f"pool{index:02d}",
                subnet_id=f"{vnet}/subnets/nodes",
                capacity=self.workload.instances,
                orchestration_mode="Flexible" if flexible else "Uniform",
                identity_ids=[self.identity_ids[SEEDED]] if index == 0 else None,
            )
            if index == 0:
                self.seeded_target = scale_set.lower()
        self.client.create(NAMESPACE, {"metadata": {"name": self.namespace}})
        for name, identity_id in self.identity_ids.items():
            client_id = str((self.emulator.state.render(identity_id) or {})["properties"]["clientId"])
            metadata = {"name": name, "namespace": self.namespace}
            spec = {"type": 0, "resourceID": identity_id, "clientID": client_id}
            self.client.create(AZURE_IDENTITY, {"metadata": metadata, "spec": spec})
            binding = {"azureIdentity": name, "selector": f"{self.namespace}-{name}"}
            self.client.create(
                AZURE_IDENTITY_BINDING,
                {"metadata": {"name": f"{name}-binding", "namespace": self.namespace}, "spec": binding},
            )

    def read_nodes(self) -> None:
        for node in self.client.list(NODE).items:
            provider = str(node["spec"].get("providerID", "")).lower().removeprefix("azure://")
            name = node["metadata"]["name"]
            if "/virtualmachinescalesets/" in provider:
                self.targets[name] = provider.split("/virtualmachines/")[0]
            else:
                self.targets[name] = provider
                self.flexible_nodes.add(name)

    def create_pod(self, name: str, node: str, identity: str) -> None:
        labels = {"aadpodidbinding": f"{self.namespace}-{identity}"}
        spec = {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]}
        self.pods[name] = (node, identity)
        self.client.create(
            POD, {"metadata": {"name": name, "namespace": self.namespace, "labels": labels}, "spec": spec}
        )

    def delete_pod(self, name: str) -> None:
        del self.pods[name]
        self.client.delete(POD, name, self.namespace, grace_period_seconds=0, ignore_not_found=True)

    def expected(self) -> dict[str, set[str]]:
        wanted: dict[str, set[str]] = {target: set() for target in set(self.targets.values())}
        wanted[self.seeded_target].add(self.identity_ids[SEEDED].lower())
        for node, identity in self.pods.values():
            wanted[self.targets[node]].add(self.identity_ids[identity].lower())
        return wanted

    def identities_on(self, targets: list[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        with self.emulator.state.locked() as state:
            for target in targets:
                scale_set = state.scale_sets.get(target)
                resource = scale_set.resource if scale_set is not None else state.virtual_machines.get(target)
                document = resource.document if resource is not None else {}
                assigned = (document.get("identity") or {}).get("userAssignedIdentities") or {}
                found[target] = {key.lower() for key in assigned}
        return found


def _converged(estate: Estate, timeline: Timeline, expected: dict[str, set[str]]) -> bool:
    """Every target carries what its pods need and nothing the tool added beyond (the seeded
    identity is left out here: whether it survived is reported apart), and every pod's
    AzureAssignedIdentity is Assigned, with none left for pods that are gone."""
    seeded = estate.identity_ids[SEEDED].lower()
    found = estate.identities_on(sorted(expected))
    found[estate.seeded_target].add(seeded)
    if found != expected:
        return False
    by_pod: dict[str, list[str]] = {}
    for pod, status in list(timeline.assignments.values()):
        by_pod.setdefault(pod, []).append(status)
    if set(by_pod) != set(estate.pods):
        return False
    return all(statuses == ["Assigned"] for statuses in by_pod.values())


@dataclass(frozen=True)
class ToolProcess:
    process: RunningProcess
    ready_url: str
    ready_body: str | None
    """The probe's body when ready (MIC answers 200 "Not Active" until its sync loop runs)."""


def _start_tool(
    tool: str, plane: ControlPlane, work: Path, emulator: ArmEmulator, namespace: str
) -> ToolProcess:
    """Start ``tool`` as its own process with its own API user (side effect: a process)."""
    if tool == "mic":
        emulator.entra.register_application(MIC_CLIENT_ID, MIC_SECRET)
        cloud = PeerCloud(
            emulator.endpoint,
            emulator.state.tenant_id,
            DEFAULT_SUBSCRIPTION,
            MIC_CLIENT_ID,
            MIC_SECRET,
            "bench-nodes",
        )
        mic = start_mic(plane, work, cloud, emulator.ca_file)
        return ToolProcess(mic.process, mic.ready_url, mic.ready_body)
    kubeconfig = plane.user_kubeconfig(USERS[tool], groups=("system:masters",))
    probe = free_port()
    config = work / "nodewright.yaml"
    config.write_text(yaml.safe_dump(_nodewright_config(emulator, namespace, probe)))
    command: tuple[str, ...] = (sys.executable, "-m", "nodewright.controllers.main", "run")
    command += ("--config", str(config), "--kubeconfig", str(kubeconfig))
    env = {"PYTHONPATH": str(REPOSITORY)}
    process = RunningProcess(Contender("nodewright", "nodewright", command, env=env), work, {})
    return ToolProcess(process, f"http://127.0.0.1:{probe}/readyz", None)


def _nodewright_config(emulator: ArmEmulator, namespace: str, probe: int) -> dict[str, Any]:
    """The deployed defaults (4 workers, 10 writes/s burst 5, leader election) with a static
    token and MIC's polling interval."""
    cloud = {
        "subscriptionId": DEFAULT_SUBSCRIPTION,
        "armEndpoint": emulator.endpoint,
        "credential": {"kind": "static-token", "staticToken": NODEWRIGHT_TOKEN},
        "caBundle": str(emulator.ca_file),
        "pollingInterval": POLLING_INTERVAL,
        "mutationQps": 10,
        "mutationBurst": 5,
    }
    election = {"enabled": True, "namespace": namespace, "name": "nodewright-bench"}
    return {
        "metrics": {"bindAddress": "0"},
        "health": {"bindAddress": f"127.0.0.1:{probe}"},
        "leaderElection": {**election, "identity": USERS["nodewright"]},
        "logging": {"level": "warning", "format": "text"},
        "reconcilers": {
            "identity-assignment": {
                "module": "nodewright.controllers.identity",
                "maxConcurrentReconciles": 4,
                "options": {"cloud": cloud},
            }
        },
    }


def _wait_ready(tool: ToolProcess, timeout: float = 180.0) -> None:
    """Until the tool's probe answers 200 (with MIC's body "Active": its sync loop runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not tool.process.running():
            raise RuntimeError(f"exited with {tool.process.exit_code}: {tool.process.stderr_tail()}")
        with contextlib.suppress(OSError), urllib.request.urlopen(tool.ready_url, timeout=2) as answer:  # noqa: S310 - loopback
            body = answer.read().decode()
            if answer.status == 200 and tool.ready_body in (None, body):
                return
        time.sleep(0.5)
    raise TimeoutError(f"not ready in {timeout:.0f} s: {tool.process.stderr_tail()}")


def _wait_nodes_ready(client: Client, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = client.list(NODE).items
        ready = [
            n
            for n in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        ]
        if len(ready) >= count:
            return
        time.sleep(0.5)
    raise TimeoutError("the simulated nodes did not become Ready")


class Phases:
    """The three phases of one run, each a change of pods followed by the wait to converge."""

    def __init__(self, estate: Estate, timeline: Timeline, tool: str, scenario: str) -> None:
        self.estate, self.timeline, self.tool, self.scenario = estate, timeline, tool, scenario
        self.nodes = sorted(estate.targets)

    def burst(self) -> list[str]:
        names = [f"p-{index:04d}" for index in range(self.estate.workload.pods)]
        identities = self.estate.workload.identities
        plan = [
            (n, self.nodes[i % len(self.nodes)], self.estate.random.choice(identities))
            for i, n in enumerate(names)
        ]
        self._apply([functools.partial(self.estate.create_pod, *item) for item in plan])
        return names

    def churn(self) -> list[str]:
        count = self.estate.workload.pods * self.estate.workload.churn_percent // 100
        gone = self.estate.random.sample(sorted(self.estate.pods), count)
        identities = self.estate.workload.identities
        new = [
            (f"q-{index:04d}", self.estate.random.choice(self.nodes), self.estate.random.choice(identities))
            for index in range(count)
        ]
        changes: list[Callable[[], None]] = []
        for name, item in zip(gone, new, strict=True):
            changes += [
                functools.partial(self.estate.delete_pod, name),
                functools.partial(self.estate.create_pod, *item),
            ]
        self._apply(changes)
        return [name for name, _, _ in new]

    def to_zero(self) -> list[str]:
        self._apply([functools.partial(self.estate.delete_pod, name) for name in sorted(self.estate.pods)])
        return []

    @staticmethod
    def _apply(changes: list[Callable[[], None]]) -> None:
        with ThreadPoolExecutor(max_workers=10) as pool:  # one wave: every change at once
            list(pool.map(lambda change: change(), changes))

    def measure(self, name: str, change: Callable[[], list[str]], plane: ControlPlane) -> PhaseRun:
        estate, timeline = self.estate, self.timeline
        if self.scenario == "throttled":
            estate.emulator.faults.throttle(
                "VirtualMachineScaleSets.update", times=THROTTLES, retry_after=RETRY_AFTER
            )
        mark, wall = time.monotonic(), time.time()
        before = len(estate.pods)
        new = change()
        expected = estate.expected()
        deadline = mark + estate.workload.phase_timeout
        converged = _converged(estate, timeline, expected)
        while not converged and time.monotonic() < deadline:
            time.sleep(0.1)
            converged = _converged(estate, timeline, expected)
        seconds = time.monotonic() - mark
        phase = PhaseRun(name, seconds, converged, pods_changed=len(new) or before)
        self._assignment_figures(phase, new)
        stamps = [timeline.assigned[pod] for pod in new if pod in timeline.assigned]
        phase.last_assigned = max(stamps) - mark if stamps else None
        phase.seeded_kept = (
            estate.identity_ids[SEEDED].lower()
            in estate.identities_on([estate.seeded_target])[estate.seeded_target]
        )
        phase.arm = arm_counts(estate.emulator, self.tool, mark)
        phase.api_writes = audit_writes(plane.audit_log, USERS[self.tool], wall, time.time())
        return phase

    def _assignment_figures(self, phase: PhaseRun, new: list[str]) -> None:
        timeline, estate = self.timeline, self.estate
        for pod in new:
            if pod in timeline.assigned and pod in timeline.running:
                phase.latencies.append(max(0.0, timeline.assigned[pod] - timeline.running[pod]))
            elif pod in estate.pods:
                phase.unassigned += 1
            if estate.pods.get(pod, ("", ""))[0] in estate.flexible_nodes:
                phase.flexible_pods += 1
                phase.flexible_assigned += pod in timeline.assigned


def arm_counts(emulator: ArmEmulator, tool: str, since: float) -> dict[str, int]:
    """The tool's ARM requests since ``since`` (its own token: MIC's was issued to its client ID)."""

    def is_tool(token: str | None) -> bool:
        if tool == "mic":
            return emulator.entra.client_of(token) == MIC_CLIENT_ID
        return token == NODEWRIGHT_TOKEN

    return count_requests([e for e in emulator.requests.entries(since=since) if is_tool(e.bearer_token)])


def audit_writes(audit_log: Path, user: str, start: float, end: float) -> dict[str, int]:
    """The user's API writes between ``start`` and ``end`` (wall clock), by resource, from the
    audit log (the bench's policy records only the tools' writes)."""
    counts: dict[str, int] = {}
    with contextlib.suppress(OSError), audit_log.open() as lines:
        for line in lines:
            event = json.loads(line)
            if (event.get("user") or {}).get("username") != user:
                continue
            stamp = datetime.datetime.fromisoformat(
                event["stageTimestamp"].replace("Z", "+00:00")
            ).timestamp()
            if start <= stamp <= end:
                resource = (event.get("objectRef") or {}).get("resource", "?")
                counts[resource] = counts.get(resource, 0) + 1
    return counts


@contextlib.contextmanager
def _watching(client: Client, timeline: Timeline) -> Iterator[None]:
    pods = Informer(client, POD, namespace=timeline.namespace)
    pods.add_event_handler(_Handler(timeline.on_pod, lambda _gone: None))
    assignments = Informer(client, AZURE_ASSIGNED_IDENTITY)
    assignments.add_event_handler(
        _Handler(timeline.on_assignment, lambda obj: timeline.on_assignment(obj, deleted=True))
    )
    for informer in (pods, assignments):
        informer.start()
    try:
        for informer in (pods, assignments):
            informer.wait_for_sync(60)
        yield
    finally:
        for informer in (pods, assignments):
            informer.stop()


def run_tool(tool: str, scenario: str, workload: Workload, work: Path) -> ToolRun:
    """One tool through the three phases on a fresh control plane and emulator."""
    result = ToolRun(tool, scenario)
    with (
        ControlPlane(work_dir=work / "plane", audit_policy=AUDIT_POLICY) as plane,
        ArmEmulator(state_dir=work / "arm", certificates=issue_loopback_certificates()) as emulator,
    ):
        client = Client.from_kubeconfig(plane.kubeconfig)
        if tool == "mic":
            install_upstream_pod_identity_crds(client)
            client.create(NAMESPACE, {"metadata": {"name": MIC_NAMESPACE}})
        else:
            install_crds(client, RESOURCES)
        estate = Estate(client, emulator, workload, f"bench-{tool}")
        estate.build()
        simulator = NodeSimulator(
            client, machines_in_emulator(emulator.state), owner=estate.namespace, interval=5.0
        )
        simulator.sync_once()
        estate.read_nodes()
        _wait_nodes_ready(client, len(estate.targets))
        timeline = Timeline(estate.namespace)
        tool_process = _start_tool(tool, plane, work, emulator, estate.namespace)
        try:
            with simulator, _watching(client, timeline):
                _wait_ready(tool_process)
                emulator.faults.add_latency(LATENCY)
                phases = Phases(estate, timeline, tool, scenario)
                for name, change in (
                    ("burst", phases.burst),
                    ("churn", phases.churn),
                    ("scale to zero", phases.to_zero),
                ):
                    result.phases.append(phases.measure(name, change, plane))
        finally:
            result.cpu_seconds = tool_process.process.cpu_seconds()
            tool_process.process.stop(grace=10)
            result.exit_code = tool_process.process.exit_code
            result.log_tail = tool_process.process.stderr_tail(30)
    return result


def run(workload: Workload, tools: tuple[str, ...] = ("mic", "nodewright")) -> list[ToolRun]:
    """Every scenario, each tool in turn (MIC first), each on its own cluster and emulator."""
    runs: list[ToolRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-identity-peers-") as directory:
        for scenario in ("clean", "throttled"):
            for tool in tools:
                runs.append(run_tool(tool, scenario, workload, Path(directory) / f"{scenario}-{tool}"))
    return runs
