"""Node simulator: plays the kubelets' part for emulated Azure machines, so that node-level flows
work end to end in tests and in ``make run`` without any kubelet.

Owns three duties, each a pure planning step followed by the writes it plans:
- a Node (labelled ``nodewright.io/simulated=<owner>``, ``spec.providerID`` as the Azure cloud
  provider writes it, a Ready condition that follows the machine's power state) appears for each
  emulated VM and scale-set instance once it has run for ``join_delay`` seconds, and disappears
  when the machine is gone;
- pods on simulated nodes that are being deleted are finished (a kubelet confirms the deletion
  with grace period 0), and pods bound to one of its nodes that has vanished (deleted by anyone)
  are removed (the pod GC's job);
- pods bound to a simulated node are reported Running.

Machines come from a ``MachineSource``: ``machines_in_emulator(emulator_state)`` reads the
in-process ARM emulator's state. Side effects: Kubernetes writes through the runtime ``Client``
and one background thread.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.emulator import EmulatorState
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.kinds import NODE, POD
from nodewright.runtime.logs import get_logger

__all__ = [
    "SIMULATED_LABEL",
    "Machine",
    "MachineSource",
    "NodePlan",
    "NodeSimulator",
    "machines_in_emulator",
    "plan_nodes",
    "plan_pods",
]

SIMULATED_LABEL = "nodewright.io/simulated"
log = get_logger("nodewright.devenv.nodesim")


@dataclass(frozen=True)
class Machine:
    """One emulated VM or scale-set instance as a node would see it."""

    provider_id: str
    node_name: str
    running: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    internal_ip: str = ""


MachineSource = Callable[[], list[Machine]]


def provider_id_of(arm_id: str) -> str:
    """The Kubernetes providerID the Azure cloud provider writes for a machine's ARM ID."""
    return "azure://" + arm_id


def _machine(document: Mapping[str, Any], power_state: str, scale_set: str = "") -> Machine:
    """A machine from an emulated VM or instance document (labels as the cloud provider sets)."""
    properties = document.get("properties") or {}
    computer_name = str((properties.get("osProfile") or {}).get("computerName") or document["name"])
    node_name = computer_name.lower()
    size = str(
        (properties.get("hardwareProfile") or {}).get("vmSize") or (document.get("sku") or {}).get("name", "")
    )
    location = str(document.get("location", ""))
    zones = document.get("zones") or []
    labels = {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/region": location,
        "topology.kubernetes.io/zone": f"{location}-{zones[0]}" if zones else "0",
    }
    if size:
        labels["node.kubernetes.io/instance-type"] = size
    if scale_set:
        labels["kubernetes.azure.com/agentpool"] = scale_set
    provisioning = str(properties.get("provisioningState", "Succeeded"))
    running = power_state == "running" and provisioning in ("Succeeded", "Updating")
    return Machine(provider_id_of(str(document["id"])), node_name, running, labels)


def machines_in_emulator(state: EmulatorState) -> MachineSource:
    """A machine source that reads the in-process emulator's VMs and scale-set instances."""

    def machines() -> list[Machine]:
        with state.locked():
            found = [_machine(vm.document, vm.power_state) for vm in state.virtual_machines.values()]
            for scale_set in state.scale_sets.values():
                found.extend(
                    _machine(instance.document, instance.power_state, scale_set.resource.name)
                    for instance in scale_set.instances.values()
                )
            return found

    return machines


@dataclass(frozen=True)
class NodePlan:
    """What to write so that Nodes match machines."""

    create: list[Machine]
    delete: list[str]
    set_ready: dict[str, bool]


def _node_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def plan_nodes(
    machines: Iterable[Machine],
    nodes: Iterable[Mapping[str, Any]],
    first_seen: Mapping[str, float],
    now: float,
    join_delay: float,
    *,
    owner: str,
) -> NodePlan:
    """Pure: which of ``owner``'s Nodes to create, delete, or flip Ready, given the machines.

    A machine joins once it has been seen for ``join_delay`` seconds and is running; an owned
    Node whose machine is gone is deleted; Nodes of other owners, or not simulated, are never
    touched.
    """
    by_provider = {m.provider_id.lower(): m for m in machines}
    simulated = [n for n in nodes if (n["metadata"].get("labels") or {}).get(SIMULATED_LABEL) == owner]
    existing = {str((n.get("spec") or {}).get("providerID", "")).lower(): n for n in simulated}
    create = [
        machine
        for key, machine in sorted(by_provider.items())
        if key not in existing and machine.running and now - first_seen.get(key, now) >= join_delay
    ]
    delete = sorted(n["metadata"]["name"] for key, n in existing.items() if key not in by_provider)
    set_ready = {
        n["metadata"]["name"]: by_provider[key].running
        for key, n in existing.items()
        if key in by_provider and _node_ready(n) != by_provider[key].running
    }
    return NodePlan(create=create, delete=delete, set_ready=set_ready)


@dataclass(frozen=True)
class PodPlan:
    finish: list[tuple[str, str]]
    mark_running: list[tuple[str, str]]


def plan_pods(
    pods: Iterable[Mapping[str, Any]], simulated_nodes: set[str], vanished_nodes: set[str]
) -> PodPlan:
    """Pure: pods a kubelet (or the pod GC, for ``vanished_nodes``) would finish, and pods on
    ``simulated_nodes`` it would report Running. Pods on any other node are left alone."""
    finish: list[tuple[str, str]] = []
    mark_running: list[tuple[str, str]] = []
    for pod in pods:
        metadata = pod["metadata"]
        key = (metadata["namespace"], metadata["name"])
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        if node in vanished_nodes or (node in simulated_nodes and metadata.get("deletionTimestamp")):
            finish.append(key)
        elif node in simulated_nodes and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            mark_running.append(key)
    return PodPlan(finish=finish, mark_running=mark_running)


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_condition(ready: bool) -> dict[str, Any]:
    now = _now_rfc3339()
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "simulated by nodewright's node simulator",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


class NodeSimulator:
    """Keeps simulated Nodes and their pods in step with the emulated machines."""

    def __init__(
        self,
        client: Client,
        machines: MachineSource,
        *,
        join_delay: float = 0.0,
        interval: float = 0.5,
        owner: str = "true",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._machines = machines
        self.owner = owner
        self._known_nodes: set[str] = set()
        self._vanished_nodes: set[str] = set()
        self.join_delay = join_delay
        self.interval = interval
        self._clock = clock
        self._first_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="node-simulator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> NodeSimulator:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception:
                log.exception("Failed to synchronise simulated nodes")
            self._stop.wait(self.interval)

    def sync_once(self) -> NodePlan:
        """One pass: read machines, Nodes and pods; write what the plans say. Returns the node plan."""
        now = self._clock()
        machines = self._machines()
        for machine in machines:
            self._first_seen.setdefault(machine.provider_id.lower(), now)
        live = {m.provider_id.lower() for m in machines}
        for key in [k for k in self._first_seen if k not in live]:
            del self._first_seen[key]
        nodes = self._client.list(NODE, label_selector=f"{SIMULATED_LABEL}={self.owner}").items
        plan = plan_nodes(machines, nodes, self._first_seen, now, self.join_delay, owner=self.owner)
        for machine in plan.create:
            self._create_node(machine)
        for name in plan.delete:
            self._client.delete(NODE, name, ignore_not_found=True)
            log.info("Deleted simulated node", node=name)
        for name, ready in plan.set_ready.items():
            self._set_ready(name, ready)
        present = ({n["metadata"]["name"] for n in nodes} - set(plan.delete)) | {
            m.node_name for m in plan.create
        }
        # Vanished stays remembered until a node of that name comes back, so a failed pod
        # removal is retried on the next pass.
        self._vanished_nodes = (self._vanished_nodes | (self._known_nodes - present)) - present
        self._known_nodes = present
        pods = self._client.list(POD).items
        pod_plan = plan_pods(pods, present, self._vanished_nodes)
        for namespace, name in pod_plan.finish:
            self._client.delete(POD, name, namespace, grace_period_seconds=0, ignore_not_found=True)
        for namespace, name in pod_plan.mark_running:
            self._mark_running(namespace, name)
        return plan

    def _create_node(self, machine: Machine) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": machine.node_name,
                "labels": {**machine.labels, SIMULATED_LABEL: self.owner},
            },
            "spec": {"providerID": machine.provider_id},
        }
        try:
            self._client.create(NODE, body)
        except errors.AlreadyExists:
            return
        self._set_ready(machine.node_name, ready=True)
        log.info("Created simulated node", node=machine.node_name, provider_id=machine.provider_id)

    def _set_ready(self, name: str, ready: bool) -> None:
        status = {
            "conditions": [_ready_condition(ready)],
            "nodeInfo": {
                "kubeletVersion": "v1.34.4-simulated",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        with contextlib.suppress(errors.NotFound):
            self._client.patch(NODE, name, {"status": status}, subresource="status", patch_type="strategic")

    def _mark_running(self, namespace: str, name: str) -> None:
        now = _now_rfc3339()
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        }
        with contextlib.suppress(errors.NotFound):
            self._client.patch(POD, name, {"status": status}, namespace, subresource="status")
