"""``python -m bench.storm_manager [--phase-seconds S] [--kubeconfig PATH]``: failure storms end to
end, the manager itself under them.

Seven nodes (standalone VMs with one NIC each, kwok and the node simulator playing them) and one
manager running the identity assignment and node-network-config reconcilers (NodeSubnet
consumer: the simulated Azure CNS hands pods addresses straight from the NIC). Pods churn at
20 a second: each new pod lands on a random node with a random one of 12 identities' binding
labels, and the node's oldest pod leaves once it carries 10, so identities come and go on every
VM and addresses are used and freed.

Phases: idle, then each fault kind of ``bench.storm`` (the Compute provider's 429 without
Retry-After; 500 on every write; every long-running operation failing) for ``phase_seconds``
(default 300), each followed by the faults clearing. Measured per phase: ARM writes per target
per minute (the most any VM or NIC received), log lines per minute and tracebacks of the
manager's loggers, seconds to converge after clearing (every VM carries exactly the identities
its pods need, every pod's AzureAssignedIdentity is Assigned, every pod has an address); and
over the whole run, from a sampler every 0.25 s: identities taken off a VM while a pod that had
it there still ran (must be 0), and at the end, IP configurations on a NIC that its
NodeNetworkConfig does not account for (leaked; must be 0). Side effects: a private control
plane unless ``--kubeconfig``, threads, a loopback HTTPS server, a temporary directory.
"""

from __future__ import annotations

import argparse
import collections
import logging
import random
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.cluster import cluster_kubeconfig
from bench.storm import FAULTS, Inject, Phase, _Capture, measured, table
from nodewright.api.aadpodidentity.v1 import RESOURCES as IDENTITY_RESOURCES
from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.acn.v1alpha1 import ClusterSubnetState
from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.controllers.cloud_access import settings_as_options
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
)
from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG
from nodewright.devenv.cns_nodesubnet import NodeSubnetConsumer
from nodewright.devenv.cns_nodesubnet_nmagent import answers_in_emulator
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NAMESPACE, NODE, POD
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager

__all__ = ["run"]

GROUP = "rg-storm-e2e"
NODES = 7
IDENTITIES = 12
PODS_PER_NODE = 10
RATE = 20.0
LATENCY = 0.05


@dataclass
class _World:
    client: Client
    emulator: ArmEmulator
    namespace: str
    identity_ids: list[str] = field(default_factory=list)
    vms: dict[str, str] = field(default_factory=dict)  # node name -> VM ARM ID (lowercased)
    nics: dict[str, str] = field(default_factory=dict)  # node name -> NIC ARM ID (lowercased)
    pods: dict[str, collections.deque[tuple[str, int]]] = field(
        default_factory=dict
    )  # node -> (pod, identity)
    lock: threading.Lock = field(default_factory=threading.Lock)
    removed_while_needed: list[str] = field(default_factory=list)

    def build(self) -> None:
        estate = self.emulator.estate
        estate.add_resource_group(GROUP)
        vnet = estate.add_virtual_network(GROUP, "vnet", subnets={"pods": "10.240.0.0/16"})
        for index in range(NODES):
            estate.add_virtual_machine(GROUP, f"vmstorm{index:02d}", subnet_id=vnet + "/subnets/pods")
        self.identity_ids = [estate.add_identity(GROUP, f"id-{i:02d}") for i in range(IDENTITIES)]
        self.client.create(NAMESPACE, {"metadata": {"name": self.namespace}})
        for index, identity_id in enumerate(self.identity_ids):
            client_id = str((self.emulator.state.render(identity_id) or {})["properties"]["clientId"])
            metadata = {"name": f"id-{index:02d}", "namespace": self.namespace}
            spec = {"type": 0, "resourceID": identity_id, "clientID": client_id}
            self.client.create(AZURE_IDENTITY, {"metadata": metadata, "spec": spec})
            binding = {"azureIdentity": f"id-{index:02d}", "selector": self.selector(index)}
            self.client.create(
                AZURE_IDENTITY_BINDING,
                {"metadata": {"name": f"b-{index:02d}", "namespace": self.namespace}, "spec": binding},
            )

    def selector(self, identity: int) -> str:
        return f"{self.namespace}-{identity}"

    def read_nodes(self) -> None:
        for node in self.client.list(NODE, label_selector=f"{SIMULATED_LABEL}={self.namespace}").items:
            name, provider = node["metadata"]["name"], str(node["spec"]["providerID"]).lower()
            vm = provider.removeprefix("azure://")
            self.vms[name] = vm
            document = self.emulator.state.render(vm) or {}
            interfaces = document["properties"]["networkProfile"]["networkInterfaces"]
            self.nics[name] = str(interfaces[0]["id"]).lower()
            self.pods[name] = collections.deque()

    def identities_on(self, vm: str) -> set[str]:
        document = self.emulator.state.render(vm) or {}
        return {k.lower() for k in ((document.get("identity") or {}).get("userAssignedIdentities") or {})}

    def needed(self) -> dict[str, set[str]]:
        with self.lock:
            return {node: {self.identity_ids[i].lower() for _, i in pods} for node, pods in self.pods.items()}


def _churn(world: _World, seconds: float, rng: random.Random) -> None:
    """A pod every 1/RATE s on a random node; the node's oldest leaves once it holds PODS_PER_NODE."""
    nodes = sorted(world.pods)
    deadline, next_at = time.monotonic() + seconds, time.monotonic()
    while time.monotonic() < deadline:
        node, identity = rng.choice(nodes), rng.randrange(IDENTITIES)
        name = f"p-{uuid.uuid4().hex[:10]}"
        body = {
            "metadata": {
                "name": name,
                "namespace": world.namespace,
                "labels": {"aadpodidbinding": world.selector(identity)},
            },
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
        }
        world.client.create(POD, body)
        with world.lock:
            world.pods[node].append((name, identity))
            leaving = world.pods[node].popleft() if len(world.pods[node]) > PODS_PER_NODE else None
        if leaving is not None:
            world.client.delete(
                POD, leaving[0], world.namespace, grace_period_seconds=0, ignore_not_found=True
            )
        next_at += 1.0 / RATE
        time.sleep(max(0.0, next_at - time.monotonic()))


def _sample(world: _World, stop: threading.Event) -> None:
    """Identities taken off a VM while a pod still ran there whose AzureAssignedIdentity had been
    Assigned with the identity on the VM (NMI served it tokens). VMs are read first, so a pod
    listed after that read was there at it too."""
    established: set[tuple[str, str, str]] = set()  # (pod, identity, node)
    while not stop.wait(0.25):
        present = {node: world.identities_on(vm) for node, vm in world.vms.items()}
        with world.lock:
            running = {
                (pod, world.identity_ids[i].lower(), node)
                for node, pods in world.pods.items()
                for pod, i in pods
            }
        assigned = {
            a["spec"]["pod"]
            for a in world.client.list(AZURE_ASSIGNED_IDENTITY).items
            if a["spec"].get("podNamespace") == world.namespace
            and (a.get("status") or {}).get("status") == "Assigned"
        }
        for pod, identity, node in running:
            if identity in present[node]:
                if pod in assigned:
                    established.add((pod, identity, node))
            elif (pod, identity, node) in established:
                world.removed_while_needed.append(f"{identity} from {node} while {pod} ran")
                established.discard((pod, identity, node))
        established &= running


def _unconverged(world: _World) -> list[str]:
    """What is not yet as it should be (empty once converged), read from the API server: every VM
    carries exactly its pods' identities, every pod has an address and an Assigned
    AzureAssignedIdentity, and no such object outlives its pod."""
    pods = [
        p for p in world.client.list(POD, world.namespace).items if not p["metadata"].get("deletionTimestamp")
    ]
    by_label = {world.selector(i): identity.lower() for i, identity in enumerate(world.identity_ids)}
    needed: dict[str, set[str]] = {node: set() for node in world.vms}
    for pod in pods:
        needed[pod["spec"]["nodeName"]].add(by_label[pod["metadata"]["labels"]["aadpodidbinding"]])
    problems = []
    for node, identities in needed.items():
        present = world.identities_on(world.vms[node])
        if present != identities:
            missing = sorted(i.rsplit("/", 1)[1] for i in identities - present)
            extra = sorted(i.rsplit("/", 1)[1] for i in present - identities)
            problems.append(f"{node}: missing {missing}, extra {extra}")
    problems += [
        f"{p['metadata']['name']}: no address" for p in pods if not (p.get("status") or {}).get("podIP")
    ]
    assigned = {
        a["spec"]["pod"]: str((a.get("status") or {}).get("status"))
        for a in world.client.list(AZURE_ASSIGNED_IDENTITY).items
        if a["spec"].get("podNamespace") == world.namespace
    }
    names = {p["metadata"]["name"] for p in pods}
    problems += [f"{name}: no AzureAssignedIdentity" for name in names - set(assigned)]
    problems += [f"{name}: AzureAssignedIdentity of a pod gone" for name in set(assigned) - names]
    problems += [f"{name}: {state}" for name, state in assigned.items() if state != "Assigned"]
    with world.lock:
        believed = {pod for pods_of_node in world.pods.values() for pod, _ in pods_of_node}
    problems += [f"{name}: gone, not deleted by the bench" for name in believed - names]
    return problems


def _settle(world: _World, timeout: float) -> float | None:
    started, problems = time.monotonic(), ["not checked"]
    while time.monotonic() - started < timeout:
        problems = _unconverged(world)
        if not problems:
            return time.monotonic() - started
        time.sleep(0.5)
    print(f"not converged after {timeout:g} s: {len(problems)} problems, e.g. {problems[:5]}")
    return None


def _leaked(world: _World) -> int:
    """NIC IP configurations that no NodeNetworkConfig accounts for."""
    leaked = 0
    configs = {
        c["metadata"]["name"]: NodeNetworkConfig.from_object(c)
        for c in world.client.list(NODE_NETWORK_CONFIG, world.namespace).items
    }
    for node, nic in world.nics.items():
        document = world.emulator.state.render(nic) or {}
        names = {
            c["name"]
            for c in document["properties"]["ipConfigurations"]
            if not c["properties"].get("primary")
        }
        config = configs.get(node)
        accounted = {
            a.name for c in (config.status.network_containers[:1] if config else []) for a in c.ip_assignments
        }
        leaked += len(names - accounted)
    return leaked


def _manager(world: _World, kubeconfig: str) -> Manager:
    settings = CloudSettings(
        subscription_id=DEFAULT_SUBSCRIPTION,
        arm_endpoint=world.emulator.endpoint,
        credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="bench-token"),  # noqa: S106 - the emulator accepts any token
        ca_bundle=str(world.emulator.ca_file),
        polling_interval=0.0,
    )
    cloud = settings_as_options(settings)
    data = {
        "metrics": {"bindAddress": "0"},
        "health": {"bindAddress": "0"},
        "leaderElection": {"enabled": False},
        "reconcilers": {
            "identity-assignment": {"module": "nodewright.controllers.identity", "options": {"cloud": cloud}},
            "node-network-config": {
                "module": "nodewright.controllers.node_network_config",
                "options": {
                    "cloud": cloud,
                    "namespace": world.namespace,
                    "nodeSelector": f"{SIMULATED_LABEL}={world.namespace}",
                    "consumer": "nodesubnet",
                },
            },
        },
    }
    manager = Manager(parse_config(data, "bench"), kubeconfig=kubeconfig)
    manager.setup_reconcilers()
    return manager


def _phase(
    world: _World,
    capture: _Capture,
    name: str,
    *,
    seconds: float,
    inject: Inject | None,
    seed: int,
) -> Phase:
    mark = time.monotonic()
    capture.take()
    end = inject(world.emulator) if inject is not None else None
    _churn(world, seconds, random.Random(seed))
    entries = world.emulator.requests.entries(since=mark)
    logged = capture.take()
    world.emulator.faults.clear()
    if end is not None:
        end()
    return measured(name, seconds, entries, logged, _settle(world, timeout=180.0))


def run(
    kubeconfig: str, emulator: ArmEmulator, phase_seconds: float, idle_seconds: float
) -> tuple[list[Phase], list[str], int]:
    """The phases, the identities removed while needed, the leaked IP configurations."""
    client = Client.from_kubeconfig(kubeconfig)
    install_crds(client, [*IDENTITY_RESOURCES, NodeNetworkConfig, ClusterSubnetState], timeout=30)
    world = _World(client, emulator, f"storm-{uuid.uuid4().hex[:6]}")
    world.build()
    simulator = NodeSimulator(
        client, machines_in_emulator(emulator.state), owner=world.namespace, interval=0.5
    )
    simulator.sync_once()
    simulator.start()
    world.read_nodes()
    emulator.faults.add_latency(LATENCY)
    consumer = NodeSubnetConsumer(
        client, answers_in_emulator(emulator.state), node_selector=f"{SIMULATED_LABEL}={world.namespace}"
    )
    consumer.start()
    manager = _manager(world, kubeconfig)
    runner = threading.Thread(target=manager.run, daemon=True)
    runner.start()
    capture = _Capture()
    logging.getLogger("nodewright").addHandler(capture)
    logging.getLogger("azure").addHandler(capture)
    logging.getLogger("nodewright").setLevel(logging.INFO)
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(world, stop), daemon=True)
    sampler.start()
    try:
        phases = [_phase(world, capture, "idle", seconds=idle_seconds, inject=None, seed=1)]
        for number, (name, inject) in enumerate(FAULTS.items(), start=2):
            phases.append(_phase(world, capture, name, seconds=phase_seconds, inject=inject, seed=number))
        return phases, list(world.removed_while_needed), _leaked(world)
    finally:
        stop.set()
        sampler.join(5)
        manager.stop()
        runner.join(30)
        consumer.stop()
        simulator.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storm_manager", description=__doc__.split("\n")[0])
    parser.add_argument("--phase-seconds", type=float, default=300.0)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--kubeconfig", default=None)
    arguments = parser.parse_args(argv)
    with (
        cluster_kubeconfig(arguments.kubeconfig) as kubeconfig,
        tempfile.TemporaryDirectory(prefix="bench-storm-e2e-") as directory,
        ArmEmulator(state_dir=Path(directory), certificates=issue_loopback_certificates()) as emulator,
    ):
        phases, removed, leaked = run(kubeconfig, emulator, arguments.phase_seconds, arguments.idle_seconds)
    print(
        f"storm, end to end: {NODES} VMs, {IDENTITIES} identities, {RATE:g} pods/s, ARM latency {LATENCY:g} s"
    )
    print()
    print("\n".join(table(phases)))
    print()
    print(f"identities removed while a pod needed them: {len(removed)}; leaked IP configurations: {leaked}")
    for line in removed[:10]:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
