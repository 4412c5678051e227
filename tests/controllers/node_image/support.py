"""A rollout test bench: emulated scale sets behind the ARM emulator, Nodes from the node
simulator (made Ready, with their pods, by the cluster's kwok), the nodewright.io CRDs on the
real API server, and a manager running the node-image reconcilers that a test can crash at a
named checkpoint and start again.

Everything is unique per bench (scale-set names, computer-name prefixes, the simulator owner) so
tests sharing the session's API server never see each other's nodes; ``close`` removes what the
bench created. Used by the cluster tests here and by ``bench/nodeimage.py``.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from nodewright.api.aadpodidentity.v1 import RESOURCES as IDENTITY_RESOURCES
from nodewright.api.acn.v1alpha import RESOURCES as NETWORK_RESOURCES
from nodewright.api.nodewright.v1alpha1 import RESOURCES, NodeImage, PendingNode
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.scale_set_members import members
from nodewright.cloud.factory import Cloud
from nodewright.cloud.throttle import InMemoryCallCounter
from nodewright.controllers.node_image import install
from nodewright.controllers.node_image.grouping import RolloutTimeouts
from nodewright.controllers.node_image.options import NodeImageSettings
from nodewright.controllers.node_image.resources import (
    AUTOSCALING_STRATEGY,
    NODE_IMAGE,
    PENDING_NODE,
    SCALING_GROUP,
)
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.runtime import errors
from nodewright.runtime.control.reconcile import Request
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import EVENT, NODE, POD_DISRUPTION_BUDGET, Kind
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager
from tests.cloud.helpers import cloud_for
from tests.waiting import eventually, requested_passes, watched_window

OLD_IMAGE = "/CommunityGalleries/nodewright-test/images/node/versions/1.0.0"
NEW_IMAGE = "/CommunityGalleries/nodewright-test/images/node/versions/2.0.0"
RESOURCE_GROUP = "rg-rollout"
CUSTOM_LABEL = "example.com/slot"


class SimulatedCrashError(Exception):
    """The process 'died' at a checkpoint: nothing after it was written."""


class CrashSwitch:
    """The checkpoint hook of the restart tests. Armed with step names, it raises at the first
    checkpoint of one of them and then at every checkpoint, so nothing more is written until the
    manager is replaced. ``pauses`` run a function (once) when a step is reached, to hold a
    reconcile while the test changes the world."""

    def __init__(self) -> None:
        self.armed: frozenset[str] = frozenset()
        self.crashed = threading.Event()
        self.crashed_at: str | None = None
        self.seen: list[str] = []
        self.pauses: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()

    def arm_any(self, steps: Collection[str]) -> None:
        """Crash at the first checkpoint named in ``steps`` (none: never crash)."""
        with self._lock:
            self.armed = frozenset(steps)
            self.crashed.clear()
            self.crashed_at = None

    def __call__(self, step: str) -> None:
        with self._lock:
            self.seen.append(step)
            pause = self.pauses.pop(step, None)
            if self.crashed.is_set():
                raise SimulatedCrashError(step)
            if step in self.armed:
                self.crashed_at = step
                self.crashed.set()
                raise SimulatedCrashError(step)
        if pause is not None:
            pause()


class _RunningManager:
    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="rollout-manager")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.manager.run()
        except BaseException as error:
            self.error = error

    def stop(self) -> None:
        self.manager.stop()
        self.thread.join(20)
        assert not self.thread.is_alive(), "manager did not stop"


@dataclass
class RolloutBench:
    """One test's world (see the module docstring)."""

    kubeconfig: Path
    client: Client
    emulator: ArmEmulator
    namespace: str
    join_delay: float = 0.0
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    counter: InMemoryCallCounter = field(default_factory=InMemoryCallCounter)
    switch: CrashSwitch = field(default_factory=CrashSwitch)
    scale_sets: list[str] = field(default_factory=list)
    standalone_groups: list[str] = field(default_factory=list)
    desired_capacity: dict[str, int] = field(default_factory=dict)
    """Each pool's size (lowercased scale set or resource group ID): what a NodeImage reporting
    Complete must have left it at (``invariants``). A test that resizes a pool on purpose says so here."""
    running: _RunningManager | None = None
    _cloud: Cloud | None = None
    _simulator: NodeSimulator | None = None
    _created: list[tuple[Kind, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        estate = self.emulator.estate
        estate.add_resource_group(RESOURCE_GROUP)
        self.subnet = (
            estate.add_virtual_network(RESOURCE_GROUP, "vnet", subnets={"nodes": "10.240.0.0/16"})
            + "/subnets/nodes"
        )

    # ---- the world ----------------------------------------------------------------------------

    @property
    def owner(self) -> str:
        return f"rollout-{self.suffix}"

    @property
    def node_selector(self) -> str:
        return f"{SIMULATED_LABEL} in ({self.owner},{self.owner}-stray)"

    @property
    def cloud(self) -> Cloud:
        if self._cloud is None:
            self._cloud = cloud_for(self.emulator, observer=self.counter)
        return self._cloud

    def add_scale_set(
        self, name: str, capacity: int, image: str = OLD_IMAGE, *, orchestration_mode: str = "Uniform"
    ) -> str:
        """A scale set (Uniform unless said) of ``capacity`` machines on ``image``; returns its ID."""
        scale_set = self.emulator.estate.add_scale_set(
            RESOURCE_GROUP,
            f"{name}{self.suffix}",
            subnet_id=self.subnet,
            capacity=capacity,
            orchestration_mode=orchestration_mode,
            image={"communityGalleryImageId": image},
            computer_name_prefix=f"{name}{self.suffix}",
        )
        self.scale_sets.append(scale_set)
        self.desired_capacity[scale_set.lower()] = capacity
        return scale_set

    def add_standalone_machines(self, prefix: str, count: int, image: str = OLD_IMAGE) -> str:
        """``count`` standalone VMs ``<prefix><suffix>-<i>`` (each with its NIC ``<name>-nic``) on
        ``image``; returns the resource group's ID, the groupID of their ScalingGroup."""
        for index in range(count):
            name = f"{prefix}{self.suffix}-{index}"
            self.emulator.estate.add_virtual_machine(
                RESOURCE_GROUP, name, subnet_id=self.subnet, image={"communityGalleryImageId": image}
            )
        group = f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}"
        self.standalone_groups.append(group)
        self.desired_capacity[group.lower()] = self.desired_capacity.get(group.lower(), 0) + count
        return group

    def create_standalone_scaling_group(
        self, prefix: str, *, subnet: str | None = None, group: str | None = None, **model: Any
    ) -> str:
        """A ScalingGroup of the resource group's standalone VMs, new ones named ``<prefix><suffix>n``."""
        name = f"{prefix}{self.suffix}"
        machines = {
            "vmSize": "Standard_D4s_v5",
            "subnetID": subnet or self.subnet,
            "namePrefix": f"{prefix}{self.suffix}n",
            "sshPublicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ3yTIf7kMEvQqRnGp1o8B0f0dQe7 test",
            **model,
        }
        spec = {
            "groupID": group or f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}",
            "nodeImage": f"cluster-{self.suffix}",
            "virtualMachines": machines,
        }
        self.create(SCALING_GROUP, {"metadata": {"name": name}, "spec": spec})
        return name

    def start_simulator(self, join_delay: float | None = None) -> None:
        """Start the node simulator (replacing a running one, e.g. to change the join delay)."""
        if self._simulator is not None:
            self._simulator.stop()
        self._simulator = NodeSimulator(
            self.client,
            machines_in_emulator(self.emulator.state),
            owner=self.owner,
            join_delay=self.join_delay if join_delay is None else join_delay,
            interval=0.2,
        )
        self._simulator.sync_once()
        self._simulator.start()
        self.wait_for(self._nodes_ready, 60, "kwok made every simulated node Ready")

    def _nodes_ready(self) -> bool:
        """Every Node of the bench is Ready (kwok plays their kubelets, see devenv.kwok)."""
        for node in self.nodes():
            conditions = (node.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return False
        return True

    def label_nodes(self) -> dict[str, str]:
        """Give every node a custom label naming it (to follow labels to heirs); returns them."""
        labels: dict[str, str] = {}
        for node in self.nodes():
            name = node["metadata"]["name"]
            self.client.patch(NODE, name, {"metadata": {"labels": {CUSTOM_LABEL: name}}})
            labels[name] = name
        return labels

    def create(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        created = self.client.create(kind, body)
        self._created.append((kind, created["metadata"]["name"]))
        return created

    def create_node_image(
        self, image: str = NEW_IMAGE, max_surge: int = 1, *, name: str | None = None, **spec: Any
    ) -> str:
        """A NodeImage (default name ``cluster-<suffix>``); ``spec`` adds fields such as canary."""
        name = name or f"cluster-{self.suffix}"
        body = {"image": image, "maxSurge": max_surge, **spec}
        self.create(NODE_IMAGE, {"metadata": {"name": name}, "spec": body})
        return name

    def create_scaling_group(
        self, scale_set: str, *, role: str = "Worker", node_image: str | None = None
    ) -> str:
        name = scale_set.rsplit("/", 1)[-1].lower()
        spec = {"groupID": scale_set, "nodeImage": node_image or f"cluster-{self.suffix}", "role": role}
        self.create(SCALING_GROUP, {"metadata": {"name": name}, "spec": spec})
        return name

    def create_autoscaling_strategy(self, enabled: bool = True) -> str:
        name = f"autoscaling-{self.suffix}"
        spec = {
            "enabled": enabled,
            "deploymentName": "cluster-autoscaler",
            "deploymentNamespace": self.namespace,
        }
        self.create(AUTOSCALING_STRATEGY, {"metadata": {"name": name}, "spec": spec})
        return name

    # ---- the manager --------------------------------------------------------------------------

    def settings(self, **overrides: Any) -> NodeImageSettings:
        timeouts = overrides.pop("timeouts", RolloutTimeouts(poll=timedelta(seconds=1)))
        values: dict[str, Any] = {
            "node_label_selector": self.node_selector,
            "resync_seconds": 2.0,
            "drain_poll_seconds": 0.5,
            "scaling_group_resync_seconds": 30.0,
            **overrides,
        }
        return NodeImageSettings(timeouts=timeouts, **values)

    def start(
        self, settings: NodeImageSettings | None = None, *, also: Callable[[Manager], object] | None = None
    ) -> None:
        """Run a fresh manager with the node-image reconcilers (a restart, if one ran before);
        ``also`` wires more reconcilers into the same manager (such as IPAM's)."""
        assert self.running is None, "stop the running manager first"
        config = parse_config(
            {
                "metrics": {"bindAddress": "0"},
                "health": {"bindAddress": "0"},
                "leaderElection": {"enabled": False},
                "cacheSyncTimeout": 20,
                "gracefulShutdownTimeout": 5,
                "logging": {"level": "warning"},
            },
            "rollout-test",
        )
        manager = Manager(config, kubeconfig=str(self.kubeconfig))
        install(
            manager,
            settings or self.settings(),
            self.cloud.compute,
            self.cloud.standalone,
            checkpoint=self.switch,
        )
        if also is not None:
            also(manager)
        self.running = _RunningManager(manager)

    def stop(self) -> None:
        if self.running is not None:
            self.running.stop()
            self.running = None

    @contextlib.contextmanager
    def watched(self, passes: int, controller: str = "nodeimage") -> Iterator[None]:
        """A window in which ``controller`` of the running manager is seen to run ``passes``
        reconciles: what "nothing changes" assertions wait with. The scaling groups resync on
        their own (``tests.waiting.watched_window``); a NodeImage that waits on nothing has no
        resync due, so its passes are asked for (``tests.waiting.requested_passes``: ``passes``
        rounds, one pass per NodeImage each)."""
        assert self.running is not None, "start the manager first"
        manager = self.running.manager
        if controller != "nodeimage":
            with watched_window(manager, controller, passes):
                yield
            return
        yield
        requests = [Request("", name) for name in self.node_image_names()]
        requested_passes(manager, controller, requests, passes)

    # ---- reads --------------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        return self.client.list(NODE, label_selector=self.node_selector).items

    def node_image_names(self) -> list[str]:
        """The NodeImages this bench created."""
        return [name for kind, name in self._created if kind == NODE_IMAGE]

    def node_image(self, name: str | None = None) -> NodeImage:
        return NodeImage.from_object(self.client.get(NODE_IMAGE, name or f"cluster-{self.suffix}"))

    def condition(self, name: str | None = None, kind: str = "UpToDate") -> tuple[str, str]:
        for condition in self.node_image(name).status.conditions:
            if condition.type == kind:
                return condition.status, condition.reason
        return "", ""

    def pending_nodes(self) -> list[PendingNode]:
        return [
            PendingNode.from_object(item)
            for item in self.client.list(PENDING_NODE).items
            if any(s.lower() in item["spec"]["groupID"].lower() for s in self.scale_sets)
            or item["spec"]["groupID"].lower() in {g.lower() for g in self.standalone_groups}
        ]

    def machines(self) -> list[dict[str, Any]]:
        """Every instance (Uniform) or member VM (Flexible) of the bench's scale sets, and every
        standalone VM once the bench has a standalone group: id, node name, state, power, image."""
        found: list[dict[str, Any]] = []
        with self.emulator.state.locked():
            for scale_set_id in self.scale_sets:
                scale_set = self.emulator.state.scale_sets[scale_set_id.lower()]
                for instance in members(self.emulator.state, scale_set):
                    properties = instance.document["properties"]
                    found.append(
                        {
                            "id": instance.document["id"],
                            "name": properties["osProfile"]["computerName"].lower(),
                            "provisioning": instance.provisioning_state,
                            "power": instance.power_state,
                            "image": (properties.get("storageProfile") or {}).get("imageReference", {}),
                        }
                    )
            if self.standalone_groups:
                found += standalone_machines(self.emulator)
        return found

    def live_machines(self) -> list[dict[str, Any]]:
        return [m for m in self.machines() if m["provisioning"] != "Deleting"]

    def events(self, involved: str, reason: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for namespace in ("default", self.namespace):
            items += self.client.list(
                EVENT, namespace, field_selector=f"involvedObject.name={involved}"
            ).items
        return [e for e in items if reason is None or e.get("reason") == reason]

    def events_with_reason(self, reason: str) -> list[dict[str, Any]]:
        """Events of any object of this bench's run with ``reason`` (PendingNode names vary)."""
        items = self.client.list(EVENT, "default", field_selector=f"reason={reason}").items
        return [e for e in items if self.suffix in e["involvedObject"].get("name", "")]

    wait_for = staticmethod(eventually)

    # ---- teardown -----------------------------------------------------------------------------

    def close(self) -> None:
        self.stop()
        if self._simulator is not None:
            self._simulator.stop()
        for pending in self.pending_nodes():
            with contextlib.suppress(errors.NotFound):
                self.client.delete(PENDING_NODE, pending.name)
        for kind, name in reversed(self._created):
            with contextlib.suppress(errors.NotFound):
                self.client.delete(kind, name)
        for node in self.nodes():
            with contextlib.suppress(errors.NotFound):
                self.client.delete(NODE, node["metadata"]["name"])
        if self._cloud is not None:
            self._cloud.close()


def standalone_machines(emulator: ArmEmulator) -> list[dict[str, Any]]:
    """The emulator's VMs in no scale set, as ``RolloutBench.machines`` lists them (state locked)."""
    found: list[dict[str, Any]] = []
    for machine in emulator.state.virtual_machines.values():
        properties = machine.document["properties"]
        if properties.get("virtualMachineScaleSet"):
            continue
        found.append(
            {
                "id": machine.document["id"],
                "name": properties["osProfile"]["computerName"].lower(),
                "provisioning": machine.provisioning_state,
                "power": machine.power_state,
                "image": (properties.get("storageProfile") or {}).get("imageReference", {}),
            }
        )
    return found


@contextlib.contextmanager
def rollout_bench(
    kubeconfig: Path, emulator: ArmEmulator, namespace: str, *, join_delay: float = 0.0
) -> Iterator[RolloutBench]:
    """A bench with the CRDs installed, closed afterwards."""
    client = Client.from_kubeconfig(kubeconfig)
    install_crds(client, [*RESOURCES, *NETWORK_RESOURCES, *IDENTITY_RESOURCES], timeout=30)
    bench = RolloutBench(kubeconfig, client, emulator, namespace, join_delay=join_delay)
    try:
        yield bench
    finally:
        bench.close()


def wait_for_budget_computed(bench: RolloutBench, name: str, healthy: int, timeout: float = 60.0) -> None:
    """Wait until kube-controller-manager's disruption controller has computed the budget
    ``name`` with ``healthy`` Ready pods counted (the status is never written by the tests)."""

    def computed() -> bool:
        budget = bench.client.get(POD_DISRUPTION_BUDGET, name, bench.namespace)
        status = budget.get("status") or {}
        return bool(
            status.get("observedGeneration") == budget["metadata"]["generation"]
            and status.get("currentHealthy") == healthy
        )

    bench.wait_for(computed, timeout, f"the disruption controller computed budget {name}")
