"""Node simulator: the cloud side of emulated Azure machines, so that node-level flows work end
to end in tests and in ``make run``.

Owns one duty, a pure planning step followed by the writes it plans: a Node (labelled
``nodewright.io/simulated=<owner>``, ``spec.providerID`` and topology labels as the Azure cloud
provider writes them, annotation ``nodewright.io/power-state`` with the machine's power state)
appears for each emulated VM and scale-set instance once it has run for ``join_delay`` seconds,
and disappears when the machine is gone.

It plays no kubelet: kwok (started by ``ControlPlane``, see ``kwok``) manages every Node with
the simulated label, makes it Ready (NotReady while the machine is stopped), renews its Lease and
gives its pods their lifecycle; kube-controller-manager's pod GC removes pods of vanished Nodes.
One kubelet duty kwok lacks is done here: kube-controller-manager's node lifecycle controller
marks NotReady a pod bound to a Node it holds NotReady (it learns of a Node Ready again only at
its next look), and the kubelet then reports the pod Ready again (its status manager reconciles
what the API server holds with what its containers say).
For ``KUBELET_RETURN_SECONDS`` after a machine runs again, the simulator re-reports Ready, once
the Node is Ready, for each Running pod on it whose containers are ready but whose Ready condition
is False (``pods_to_report_ready``).

Machines come from a ``MachineSource``: ``machines_in_emulator(emulator_state)`` reads the
in-process ARM emulator's state. Its Nodes are read from an informer (a watch on the simulated
label), not listed each pass: at a thousand Nodes a list every half second cost the API server
and this process more than everything else the benches run beside them. A pass that acts on a
copy its watch has not brought up to date yet is harmless: creates accept AlreadyExists,
deletes and patches NotFound. Side effects: Kubernetes writes through the runtime ``Client``, a
watch, and background threads.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.emulator import EmulatorState
from nodewright.devenv.kwok import MANAGED_NODE_LABEL, POWER_STATE_ANNOTATION
from nodewright.devenv.periodic import PeriodicThread
from nodewright.runtime import Informer, errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD
from nodewright.runtime.kube.objects import condition_is_true
from nodewright.runtime.kube.times import now_text
from nodewright.runtime.observe.logs import get_logger

__all__ = [
    "KUBELET_RETURN_SECONDS",
    "POWER_STATE_ANNOTATION",
    "SIMULATED_LABEL",
    "Machine",
    "MachineSource",
    "NodePlan",
    "NodeSimulator",
    "machines_in_emulator",
    "plan_nodes",
    "pods_to_report_ready",
]

SIMULATED_LABEL = MANAGED_NODE_LABEL
KUBELET_RETURN_SECONDS = 30.0
"""How long after a machine runs again its pods' readiness is re-reported: the node lifecycle
controller sees the Node Ready again within its monitor period (5 s); a pod bound before that is
marked NotReady."""
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
    set_power: dict[str, str]
    """Node name -> the power state to annotate (``running`` or ``stopped``)."""


def power_state(machine: Machine) -> str:
    return "running" if machine.running else "stopped"


def plan_nodes(
    machines: Iterable[Machine],
    nodes: Iterable[Mapping[str, Any]],
    first_seen: Mapping[str, float],
    now: float,
    join_delay: float,
    *,
    owner: str,
) -> NodePlan:
    """Pure: which of ``owner``'s Nodes to create, delete, or annotate with a new power state.

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
    set_power = {
        n["metadata"]["name"]: power_state(by_provider[key])
        for key, n in existing.items()
        if key in by_provider
        and (n["metadata"].get("annotations") or {}).get(POWER_STATE_ANNOTATION)
        != power_state(by_provider[key])
    }
    return NodePlan(create=create, delete=delete, set_power=set_power)


def pods_to_report_ready(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Pure: the (namespace, name) of each Running pod, not being deleted, whose Ready condition is
    False although its containers are ready and its readiness gates hold: what the node lifecycle
    controller marked NotReady and a returning kubelet reports Ready again."""
    found: list[tuple[str, str]] = []
    for pod in pods:
        metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
        if metadata.get("deletionTimestamp") or status.get("phase") != "Running":
            continue
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
        if conditions.get("Ready") == "False" and all(
            conditions.get(kind) == "True" for kind in ["ContainersReady", *gates]
        ):
            found.append((str(metadata.get("namespace", "")), str(metadata.get("name", ""))))
    return found


def _log_failure(_: Exception) -> None:
    """Log a failed pass with its traceback (the loop calls this inside its ``except``)."""
    log.exception("Failed to synchronise simulated nodes")


class NodeSimulator:
    """Keeps simulated Nodes in step with the emulated machines (kwok plays their kubelets)."""

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
        self.join_delay = join_delay
        self.interval = interval
        self._clock = clock
        self._first_seen: dict[str, float] = {}
        self._returned: dict[str, float] = {}
        """Node name -> until when its pods' readiness is re-reported (its machine runs again)."""
        self._pods_looked_at = float("-inf")
        self._nodes = Informer(client, NODE, label_selector=f"{SIMULATED_LABEL}={owner}")
        self._loop = PeriodicThread("node-simulator", self.sync_once, lambda: self.interval, _log_failure)

    def start(self) -> None:
        self._nodes.start()
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
        self._nodes.stop()

    def __enter__(self) -> NodeSimulator:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def sync_once(self) -> NodePlan:
        """One pass: read machines and Nodes; write what the plan says. Returns the plan."""
        now = self._clock()
        machines = self._machines()
        for machine in machines:
            self._first_seen.setdefault(machine.provider_id.lower(), now)
        live = {m.provider_id.lower() for m in machines}
        for key in [k for k in self._first_seen if k not in live]:
            del self._first_seen[key]
        if not self._nodes.has_synced():
            self._nodes.start()  # sync_once called without start (a test's single pass): idempotent
            self._nodes.wait_for_sync(30.0)
        nodes = self._nodes.store.list()
        plan = plan_nodes(machines, nodes, self._first_seen, now, self.join_delay, owner=self.owner)
        for machine in plan.create:
            self._create_node(machine)
        for name in plan.delete:
            self._client.delete(NODE, name, ignore_not_found=True)
            log.info("Deleted simulated node", node=name)
        for name, state in plan.set_power.items():
            with contextlib.suppress(errors.NotFound):
                self._client.patch(NODE, name, {"metadata": {"annotations": {POWER_STATE_ANNOTATION: state}}})
            log.info("Recorded machine power state", node=name, power_state=state)
            if state == "running":
                self._returned[name] = now + KUBELET_RETURN_SECONDS
        self._report_pods_ready(now, nodes)
        return plan

    def _report_pods_ready(self, now: float, nodes: Iterable[Mapping[str, Any]]) -> None:
        """Re-report Ready for the pods of each returned machine's Node, once that Node is Ready
        (pods looked at about once a second, as a kubelet's status sync is periodic too)."""
        for name, until in list(self._returned.items()):
            if now > until:
                del self._returned[name]
        if not self._returned or now < self._pods_looked_at + 1.0:
            return
        self._pods_looked_at = now
        ready_nodes = {n["metadata"]["name"] for n in nodes if condition_is_true(n)}
        for name in sorted(self._returned.keys() & ready_nodes):
            pods = self._client.list(POD, field_selector=f"spec.nodeName={name}").items
            for namespace, pod in pods_to_report_ready(pods):
                ready = {"type": "Ready", "status": "True", "lastTransitionTime": now_text()}
                with contextlib.suppress(errors.NotFound):
                    self._client.patch(
                        POD,
                        pod,
                        {"status": {"conditions": [ready]}},
                        namespace,
                        patch_type="strategic",
                        subresource="status",
                    )
                log.info("Reported pod Ready again", node=name, pod=f"{namespace}/{pod}")

    def _create_node(self, machine: Machine) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": machine.node_name,
                "labels": {**machine.labels, SIMULATED_LABEL: self.owner},
                "annotations": {POWER_STATE_ANNOTATION: power_state(machine)},
            },
            "spec": {"providerID": machine.provider_id},
        }
        try:
            self._client.create(NODE, body)
        except errors.AlreadyExists:
            return
        log.info("Created simulated node", node=machine.node_name, provider_id=machine.provider_id)
