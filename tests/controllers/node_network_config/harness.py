"""The cluster-test harness for node_network_config: a real API server (the session's), a fresh
ARM emulator, the node simulator, the manager running our reconciler, and the pod address agent.

``IpamHarness`` builds a scale set (or bare VMs) in the emulator with a subnet of the size a test
asks for, starts everything, and offers the reads the tests and the invariant checks need.
Everything is scoped to the test: a unique owner label for the simulated Nodes, the test's
namespace for NodeNetworkConfigs, ClusterSubnetStates and pods.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.errors import NotFoundError
from nodewright.cloud.factory import Cloud
from nodewright.cloud.models import NicInfo
from nodewright.cloud.throttle import InMemoryCallCounter
from nodewright.controllers.node_network_config import (
    CONTROLLER,
    NETWORK_INTERFACE_ANNOTATION,
    NODE_NETWORK_CONFIG,
    NodeNetworkConfigReconciler,
    NodeNetworkConfigSettings,
    install,
)
from nodewright.devenv.cns_nodesubnet import NodeSubnetConsumer
from nodewright.devenv.cns_nodesubnet_nmagent import answers_in_emulator
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.ipam import addresses_of
from nodewright.runtime import errors
from nodewright.runtime.control.reconcile import Request
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import EVENT, NODE, POD
from tests.cloud.helpers import cloud_for
from tests.conftest import Cluster
from tests.controllers.node_network_config.node_agent import PodAddressAgent
from tests.ipam.address_book import find_address_conflicts
from tests.runtime.manager_helpers import RunningManager, make_manager
from tests.waiting import requested_passes

RESOURCE_GROUP = "rg-ipam"


@dataclass
class IpamHarness:
    cluster: Cluster
    namespace: str
    emulator: ArmEmulator
    subnet_prefix: str = "10.240.0.0/22"
    settings: NodeNetworkConfigSettings = field(
        default_factory=lambda: NodeNetworkConfigSettings(demand_from_pods=True)
    )
    """nodewright as the node agent (it writes the spec from pod demand) unless a test says not."""
    owner: str = field(default_factory=lambda: f"ipam-{uuid.uuid4().hex[:8]}")
    client: Client = field(init=False)
    cloud: Cloud = field(init=False)
    calls: InMemoryCallCounter = field(default_factory=InMemoryCallCounter)
    subnet_id: str = field(init=False)
    reconciler: NodeNetworkConfigReconciler | None = None
    _simulator: NodeSimulator | None = None
    _manager: RunningManager | None = None
    agent: PodAddressAgent | None = None
    consumer: NodeSubnetConsumer | None = None

    def __post_init__(self) -> None:
        self.client = Client.from_kubeconfig(self.cluster.kubeconfig)
        self.cloud = cloud_for(self.emulator, observer=self.calls)
        self.subnet_id = ""
        # Scale-down hysteresis off unless a test turns it on: most tests watch a release happen.
        self.settings = NodeNetworkConfigSettings(
            **{
                **self.settings.__dict__,
                "namespace": self.namespace,
                "node_selector": f"{SIMULATED_LABEL}={self.owner}",
                "scale_down_delay_seconds": 0.0,
            }
        )

    # -- building -------------------------------------------------------------------------------

    def configure(self, **changes: Any) -> None:
        """Change settings before ``start`` (namespace and node selector stay the test's)."""
        self.settings = dataclasses.replace(self.settings, **changes)

    def _network(self) -> None:
        """The resource group, VNet and subnet (``subnet_prefix``), made on first need."""
        if not self.subnet_id:
            estate = self.emulator.estate
            estate.add_resource_group(RESOURCE_GROUP)
            vnet = estate.add_virtual_network(RESOURCE_GROUP, "vnet", subnets={"pods": self.subnet_prefix})
            self.subnet_id = vnet + "/subnets/pods"

    def add_scale_set(self, capacity: int, name: str | None = None) -> str:
        self._network()
        return self.emulator.estate.add_scale_set(
            RESOURCE_GROUP, name or f"vmss{uuid.uuid4().hex[:6]}", subnet_id=self.subnet_id, capacity=capacity
        )

    def add_virtual_machine(self, name: str | None = None) -> str:
        self._network()
        return self.emulator.estate.add_virtual_machine(
            RESOURCE_GROUP, name or f"vm{uuid.uuid4().hex[:6]}", subnet_id=self.subnet_id
        )

    def start_nodesubnet_consumer(
        self, *, minimum: float = 0.5, maximum: float = 4.0, nmagent_lag: float = 0.2
    ) -> NodeSubnetConsumer:
        """Play Azure CNS NodeSubnet on the test's nodes (CNS's schedule and NMAgent's lag, scaled
        down for a test)."""
        self.consumer = NodeSubnetConsumer(
            self.client,
            answers_in_emulator(self.emulator.state),
            node_selector=f"{SIMULATED_LABEL}={self.owner}",
            nmagent_lag=nmagent_lag,
            minimum=minimum,
            maximum=maximum,
        )
        self.consumer.start()
        return self.consumer

    def start(self, *, agent: bool = True, workers: int | None = None, manager: bool = True) -> None:
        """Start the simulator, the manager (``workers``: the controller's worker threads, else
        the reconciler's own count; without ``manager``, later by ``start_manager``, so a test can
        put pods on the nodes first) and, with ``agent``, the pod address agent."""
        self._simulator = NodeSimulator(
            self.client, machines_in_emulator(self.emulator.state), owner=self.owner, interval=0.2
        )
        self._simulator.start()
        if manager:
            self._start_manager(workers)
        if agent:
            self.agent = PodAddressAgent(
                self.client, node_network_config_namespace=self.namespace, pod_namespace=self.namespace
            )
            self.agent.start()

    @property
    def started(self) -> bool:
        return self._manager is not None

    @contextlib.contextmanager
    def watched(self, passes: int) -> Iterator[None]:
        """A window in which the controller is seen to run ``passes`` rounds of reconciles, one
        per node, asked for as a node's events would (``tests.waiting.requested_passes``): what
        "nothing changes" assertions wait with (a settled node has no resync due soon)."""
        assert self._manager is not None, "start the manager first"
        yield
        requests = [Request(self.namespace, node) for node in self.node_names()]
        requested_passes(self._manager.manager, CONTROLLER, requests, passes)

    def settle_and_check(self, timeout: float = 15.0) -> None:
        """``check_invariants`` once the system has caught up (status lags a NIC write briefly);
        the last failure is raised if it never passes within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.check_invariants()
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # the poll of a wait for a condition (its deadline above)

    def stop_simulator(self) -> None:
        """Stop playing the kubelets (Nodes then stay as they are, even if deleted)."""
        if self._simulator is not None:
            self._simulator.stop()

    def _start_manager(self, workers: int | None) -> None:
        reconcilers = {"nodenetworkconfig": {"maxConcurrentReconciles": workers}} if workers else {}
        manager = make_manager(
            self.cluster, self.namespace, gracefulShutdownTimeout=5, reconcilers=reconcilers
        )
        self.reconciler = install(manager, self.settings, self.cloud.network, self.cloud.compute)
        self._manager = RunningManager(manager)

    def start_manager(self, workers: int | None = None) -> None:
        """Start the manager after ``start(manager=False)``."""
        self._start_manager(workers)

    def restart_manager(self, workers: int | None = None) -> None:
        """Stop the manager and start a new one on new cloud clients, as a restarted process
        (nothing in memory survives: no NIC book, no operation followed)."""
        self.stop_manager()
        self.cloud.close()
        self.cloud = cloud_for(self.emulator, observer=self.calls)
        self._start_manager(workers)

    def stop_manager(self) -> None:
        """Stop the manager (and its reconciler); the simulator and the agent go on, so a test
        can drive a reconciler of its own pass by pass (``started`` stays true)."""
        if self._manager is not None and self._manager.thread.is_alive():
            self._manager.stop()

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
        if self.consumer is not None:
            self.consumer.stop()
        self.stop_manager()
        if self._simulator is not None:
            self._simulator.stop()
        for node in self.nodes():
            with contextlib.suppress(errors.NotFound):
                self.client.delete(NODE, node["metadata"]["name"])
        self.cloud.close()

    # -- reading ---------------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        return self.client.list(NODE, label_selector=f"{SIMULATED_LABEL}={self.owner}").items

    def node_names(self) -> list[str]:
        return sorted(node["metadata"]["name"] for node in self.nodes())

    def config(self, node: str) -> NodeNetworkConfig | None:
        try:
            return NodeNetworkConfig.from_object(self.client.get(NODE_NETWORK_CONFIG, node, self.namespace))
        except errors.NotFound:
            return None

    def raw_config(self, node: str) -> dict[str, Any]:
        return self.client.get(NODE_NETWORK_CONFIG, node, self.namespace)

    def configs(self) -> list[NodeNetworkConfig]:
        return [
            NodeNetworkConfig.from_object(item)
            for item in self.client.list(NODE_NETWORK_CONFIG, self.namespace).items
        ]

    def nic_of(self, node: str) -> str:
        annotations = self.raw_config(node)["metadata"].get("annotations") or {}
        return str(annotations[NETWORK_INTERFACE_ANNOTATION])

    def nic(self, node: str) -> NicInfo:
        return self.cloud.network.get_network_interface(self.nic_of(node))

    @staticmethod
    def assignments(config: NodeNetworkConfig | None) -> list[tuple[str, str]]:
        if config is None or not config.status.network_containers:
            return []
        return [(a.name, a.ip) for a in config.status.network_containers[0].ip_assignments]

    def secondary(self, node: str) -> dict[str, str | None]:
        return {c.name: c.address for c in self.nic(node).secondary_ip_configurations}

    # -- pods -------------------------------------------------------------------------------------

    def create_pods(self, node: str, count: int, prefix: str = "pod") -> list[str]:
        names = []
        for _ in range(count):
            name = f"{prefix}-{uuid.uuid4().hex[:8]}"
            body = {
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                    "terminationGracePeriodSeconds": 0,
                },
            }
            self.client.create(POD, body, self.namespace)
            names.append(name)
        return names

    def delete_pods(self, names: list[str]) -> None:
        for name in names:
            self.client.delete(POD, name, self.namespace, grace_period_seconds=0, ignore_not_found=True)

    def pods(self) -> list[dict[str, Any]]:
        return self.client.list(POD, self.namespace).items

    def pod_addresses(self, node: str | None = None) -> dict[str, str]:
        found = {}
        for pod in self.pods():
            if node is not None and (pod.get("spec") or {}).get("nodeName") != node:
                continue
            address = (pod.get("status") or {}).get("podIP")
            if address:
                found[pod["metadata"]["name"]] = str(address)
        return found

    # -- invariants ---------------------------------------------------------------------------------

    def check_invariants(self, *, after_gc: bool = True) -> None:
        """No IP in two NodeNetworkConfigs; every status IP exists on its NIC with that address;
        (after GC has run) no secondary IP configuration on a NIC that its status does not list;
        every pod address is in its node's status."""
        configs = self.configs()
        by_node = {config.name: self.assignments(config) for config in configs}
        expanded = {
            node: [(n, a) for n, entry in pairs for a in addresses_of(entry)]
            for node, pairs in by_node.items()
        }
        assert find_address_conflicts(expanded) == [], "an address is in two NodeNetworkConfigs"
        for config in configs:
            annotations = config.metadata.get("annotations") or {}
            nic_id = annotations.get(NETWORK_INTERFACE_ANNOTATION)
            if not nic_id:
                continue
            try:
                nic = self.cloud.network.get_network_interface(nic_id)
            except NotFoundError:
                assert not by_node[config.name], f"{config.name}: status lists IPs of a NIC that is gone"
                continue
            on_nic = {c.name: c.address for c in nic.secondary_ip_configurations}
            for name, address in by_node[config.name]:
                assert on_nic.get(name) == address, (
                    f"{config.name}: status IP {name}={address} not on its NIC"
                )
            if after_gc:
                unaccounted = set(on_nic) - {name for name, _ in by_node[config.name]}
                assert not unaccounted, f"{config.name}: unaccounted IP configurations {sorted(unaccounted)}"
            status_addresses = {a for _, entry in by_node[config.name] for a in addresses_of(entry)}
            for pod, address in self.pod_addresses(config.name).items():
                assert address in status_addresses, (
                    f"pod {pod} holds {address}, not in {config.name}'s status"
                )


def events_about(harness: IpamHarness, name: str) -> list[dict[str, Any]]:
    """Events in the test's namespace whose involved object is named ``name``."""
    items = harness.client.list(EVENT, harness.namespace).items
    return [event for event in items if (event.get("involvedObject") or {}).get("name") == name]


def event_reasons(harness: IpamHarness, name: str) -> set[str]:
    return {str(event.get("reason")) for event in events_about(harness, name)}
