"""A small world for identity cluster tests: the real API server, an ARM emulator with one resource
group per test, the node simulator, and a manager running the identity reconcilers; plus the
reads the assertions use (assigned identities, a target's identities, Events)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    RESOURCES,
    AzureAssignedIdentity,
)
from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.controllers.cloud_access import settings_as_options
from nodewright.controllers.identity.assignment import IdentityAssignmentReconciler
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
)
from nodewright.devenv.crds import install_crds
from nodewright.devenv.nodesim import SIMULATED_LABEL, NodeSimulator, machines_in_emulator
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import EVENT, NODE, POD
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager
from tests.runtime.manager_helpers import RunningManager
from tests.waiting import eventually, watched_window


@dataclass
class World:
    """One test's cluster and cloud (see the module docstring)."""

    client: Client
    emulator: ArmEmulator
    cluster: Any
    namespace: str
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    running: RunningManager | None = None
    simulator: NodeSimulator | None = None

    # --- Azure -------------------------------------------------------------------------------
    def resource_group(self, name: str) -> str:
        group = f"{name}-{self.suffix}"
        self.emulator.estate.add_resource_group(group)
        return group

    def subnet(self, group: str) -> str:
        vnet = self.emulator.estate.add_virtual_network(group, "vnet", subnets={"nodes": "10.240.0.0/16"})
        return vnet + "/subnets/nodes"

    def scale_set(self, group: str, name: str, capacity: int, identity_ids: list[str] | None = None) -> str:
        return self.emulator.estate.add_scale_set(
            group,
            f"{name}{self.suffix}",
            subnet_id=self.subnet_of(group),
            capacity=capacity,
            identity_ids=identity_ids,
        )

    def virtual_machine(self, group: str, name: str) -> str:
        return self.emulator.estate.add_virtual_machine(
            group, f"{name}{self.suffix}", subnet_id=self.subnet_of(group)
        )

    _subnets: dict[str, str] = field(default_factory=dict)

    def subnet_of(self, group: str) -> str:
        if group not in self._subnets:
            self._subnets[group] = self.subnet(group)
        return self._subnets[group]

    def one_node_pool(self, group: str) -> tuple[str, str]:
        """A scale set of one instance in ``group``, its node joined: (scale set ID, node name)."""
        scale_set = self.scale_set(group, "pool", capacity=1)
        self.start_nodes()
        (node,) = self.nodes_of(scale_set)
        return scale_set, node

    def bound_identity(self, name: str, identity_id: str) -> None:
        """An AzureIdentity ``name`` with the identity's real client ID, and a binding
        ``<name>-binding`` selecting pods labelled ``name``."""
        self.azure_identity(name, identity_id, self.client_id_of(identity_id))
        self.binding(f"{name}-binding", name, name)

    def identity(self, group: str, name: str) -> str:
        return self.emulator.estate.add_identity(group, name)

    def client_id_of(self, identity_id: str) -> str:
        document = self.emulator.state.render(identity_id)
        assert document is not None
        return str(document["properties"]["clientId"])

    def identities_on(self, target_id: str) -> set[str]:
        document = self.emulator.state.render(target_id) or {}
        return {key.lower() for key in ((document.get("identity") or {}).get("userAssignedIdentities") or {})}

    # --- nodes ---------------------------------------------------------------------------------
    def start_nodes(self) -> dict[str, str]:
        """Simulated Nodes for every emulated machine; returns node name -> providerID."""
        self.simulator = NodeSimulator(
            self.client,
            machines_in_emulator(self.emulator.state),
            owner=f"identity-{self.suffix}",
            interval=0.2,
        )
        self.simulator.sync_once()
        self.simulator.start()
        return self.nodes()

    def nodes(self) -> dict[str, str]:
        selector = f"{SIMULATED_LABEL}=identity-{self.suffix}"
        return {
            n["metadata"]["name"]: n["spec"]["providerID"]
            for n in self.client.list(NODE, label_selector=selector).items
        }

    def nodes_of(self, target_id: str) -> list[str]:
        return sorted(
            name for name, provider in self.nodes().items() if target_id.lower() in provider.lower()
        )

    # --- cluster objects ---------------------------------------------------------------------
    def azure_identity(
        self, name: str, resource_id: str, client_id: str, *, namespace: str | None = None, **spec: Any
    ) -> dict[str, Any]:
        body = {
            "metadata": {"name": name, "namespace": namespace or self.namespace},
            "spec": {"type": 0, "resourceID": resource_id, "clientID": client_id, **spec},
        }
        return self.client.create(AZURE_IDENTITY, body)

    def selector(self, label: str) -> str:
        """Labels are unique per test: bindings match pods of every namespace (MIC's rule)."""
        return f"{label}-{self.suffix}"

    def binding(
        self, name: str, identity: str, selector: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        body = {
            "metadata": {"name": name, "namespace": namespace or self.namespace},
            "spec": {"azureIdentity": identity, "selector": self.selector(selector)},
        }
        return self.client.create(AZURE_IDENTITY_BINDING, body)

    def pod(self, name: str, node: str, label: str) -> dict[str, Any]:
        body = {
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {"aadpodidbinding": self.selector(label)},
            },
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
        }
        return self.client.create(POD, body)

    def delete_pod(self, name: str) -> None:
        self.client.delete(POD, name, self.namespace, grace_period_seconds=0, ignore_not_found=True)

    def assigned(self) -> list[AzureAssignedIdentity]:
        """The AzureAssignedIdentities of this test's pods (in any namespace)."""
        return [
            AzureAssignedIdentity.from_object(item)
            for item in self.client.list(AZURE_ASSIGNED_IDENTITY).items
            if (item.get("spec") or {}).get("podNamespace") == self.namespace
        ]

    def assigned_by_pod(self) -> dict[str, list[AzureAssignedIdentity]]:
        result: dict[str, list[AzureAssignedIdentity]] = {}
        for item in self.assigned():
            result.setdefault(item.spec.pod, []).append(item)
        return result

    def events(self, namespace: str | None = None, reason: str | None = None) -> list[dict[str, Any]]:
        items = self.client.list(EVENT, namespace or self.namespace).items
        return [e for e in items if reason is None or e.get("reason") == reason]

    # --- the manager ----------------------------------------------------------------------------
    def cloud_options(self) -> dict[str, Any]:
        settings = CloudSettings(
            subscription_id=DEFAULT_SUBSCRIPTION,
            arm_endpoint=self.emulator.endpoint,
            credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="emulator-token"),
            ca_bundle=str(self.emulator.ca_file),
            polling_interval=0.0,
            retry_backoff_factor=0.01,
            mutation_qps=1000.0,
            mutation_burst=1000,
        )
        return settings_as_options(settings)

    def start_manager(self, **options: Any) -> Manager:
        data = {
            "metrics": {"bindAddress": "0"},
            "health": {"bindAddress": "0"},
            "leaderElection": {"enabled": False},
            "cacheSyncTimeout": 20,
            "gracefulShutdownTimeout": 5,
            "reconcilers": {
                "identity-assignment": {
                    "module": "nodewright.controllers.identity",
                    "options": {"cloud": self.cloud_options(), **options},
                }
            },
        }
        manager = Manager(parse_config(data, "test"), kubeconfig=str(self.cluster.kubeconfig))
        manager.setup_reconcilers()
        self.running = RunningManager(manager)
        eventually(manager.started.is_set, timeout=30, message="manager started")
        return manager

    def watched(self, passes: int) -> contextlib.AbstractContextManager[None]:
        """A window in which the assignment controller is seen to run ``passes`` reconciles
        (``tests.waiting.watched_window``): what "nothing changes" assertions wait with."""
        assert self.running is not None, "start the manager first"
        return watched_window(self.running.manager, "identity-assignment", passes)

    def request_pass_for_pod(self, name: str) -> None:
        """Queue the assignment pass that an event of pod ``name`` queues (as its watch maps it)."""
        assert self.running is not None, "start the manager first"
        (controller,) = [c for c in self.running.manager.controllers if c.name == "identity-assignment"]
        reconciler = controller.reconciler
        assert isinstance(reconciler, IdentityAssignmentReconciler)
        for request in reconciler.requests.for_pod(self.client.get(POD, name, self.namespace)):
            controller.enqueue(request)

    def stop(self) -> None:
        if self.running is not None:
            self.running.stop()
            self.running = None
        if self.simulator is not None:
            self.simulator.stop()
        for item in self.client.list(POD, self.namespace).items:
            self.delete_pod(item["metadata"]["name"])
        for item in self.client.list(AZURE_ASSIGNED_IDENTITY).items:
            if (item.get("spec") or {}).get("podNamespace") != self.namespace:
                continue
            with contextlib.suppress(errors.NotFound):
                if ASSIGNED_IDENTITY_FINALIZER in (item["metadata"].get("finalizers") or []):
                    self.client.patch(
                        AZURE_ASSIGNED_IDENTITY,
                        item["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                        item["metadata"]["namespace"],
                    )
                self.client.delete(
                    AZURE_ASSIGNED_IDENTITY,
                    item["metadata"]["name"],
                    item["metadata"]["namespace"],
                    ignore_not_found=True,
                )
        for kind in (AZURE_IDENTITY_BINDING, AZURE_IDENTITY):
            for item in self.client.list(kind, self.namespace).items:
                self.client.delete(kind, item["metadata"]["name"], self.namespace, ignore_not_found=True)
        for name in self.nodes():
            self.client.delete(NODE, name, ignore_not_found=True)


@contextlib.contextmanager
def world_for(cluster: Any, emulator: ArmEmulator, namespace: str) -> Iterator[World]:
    client = Client.from_kubeconfig(cluster.kubeconfig)
    install_crds(client, RESOURCES, timeout=30)
    world = World(client=client, emulator=emulator, cluster=cluster, namespace=namespace)
    try:
        yield world
    finally:
        world.stop()
