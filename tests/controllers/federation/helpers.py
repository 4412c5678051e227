"""The federation tests' world: identities in the ARM emulator, ServiceAccounts in the real API
server, and a manager running the workload-identity-federation reconciler (``Federation``), plus
the ``federation`` fixture in ``conftest``."""

from __future__ import annotations

import json
from typing import Any

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.federated_credentials import credentials_of
from nodewright.controllers.federation.decisions import (
    FINALIZER,
    IDENTITY_ANNOTATION,
    STATUS_ANNOTATION,
)
from nodewright.controllers.federation.reconciler import SERVICE_ACCOUNT
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager
from tests.controllers.identity.helpers import World
from tests.runtime.manager_helpers import RunningManager
from tests.waiting import eventually

ISSUER = "https://kubernetes.default.svc.cluster.local"
TENANT = "11111111-1111-1111-1111-111111111111"


class Federation:
    """One test's identities, ServiceAccounts and manager."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.client: Client = world.client
        self.emulator: ArmEmulator = world.emulator
        self.group = world.resource_group("identities")
        self.running: RunningManager | None = None

    def identity(self, name: str) -> str:
        return self.emulator.estate.add_identity(self.group, name)

    def credentials(self, identity_id: str) -> dict[str, tuple[str, str, list[str]]]:
        with self.emulator.state.locked() as state:
            return {
                c.document["name"]: (c.issuer, c.subject, c.audiences)
                for c in credentials_of(state).of(identity_id).values()
            }

    def account(self, name: str, identity: str) -> dict[str, Any]:
        body = {
            "metadata": {
                "name": name,
                "namespace": self.world.namespace,
                "annotations": {IDENTITY_ANNOTATION: identity},
            }
        }
        return self.client.create(SERVICE_ACCOUNT, body)

    def get_account(self, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(SERVICE_ACCOUNT, name, self.world.namespace)
        except errors.NotFound:
            return None

    def annotations(self, name: str) -> dict[str, str]:
        return dict(((self.get_account(name) or {}).get("metadata") or {}).get("annotations") or {})

    def status(self, name: str) -> dict[str, Any]:
        raw = self.annotations(name).get(STATUS_ANNOTATION)
        return json.loads(raw) if raw else {}

    def start(
        self, propagation: float = 1.0, *, options: dict[str, Any] | None = None, with_identity: bool = False
    ) -> Manager:
        """The manager with the federation reconciler (``options`` added to its own), and the
        identity assignment reconciler set up after it when ``with_identity``."""
        cloud = self.world.cloud_options()
        base = {"cloud": cloud, "issuer": ISSUER, "tenantId": TENANT, "propagationDelay": propagation}
        reconcilers: dict[str, Any] = {
            "workload-identity-federation": {
                "module": "nodewright.controllers.federation",
                "options": {**base, **(options or {})},
            }
        }
        if with_identity:
            reconcilers["identity-assignment"] = {
                "module": "nodewright.controllers.identity",
                "options": {"cloud": cloud},
            }
        data = {
            "metrics": {"bindAddress": "0"},
            "health": {"bindAddress": "0"},
            "leaderElection": {"enabled": False},
            "cacheSyncTimeout": 20,
            "gracefulShutdownTimeout": 5,
            "reconcilers": reconcilers,
        }
        manager = Manager(parse_config(data, "test"), kubeconfig=str(self.world.cluster.kubeconfig))
        manager.setup_reconcilers()
        self.running = RunningManager(manager)
        eventually(manager.started.is_set, timeout=30, message="manager started")
        return manager

    def stop(self) -> None:
        if self.running is not None:
            self.running.stop()
            self.running = None

    def cleanup(self) -> None:
        self.stop()
        self.world.stop()  # the node simulator, pods, assignments, bindings, identities, nodes
        for item in self.client.list(SERVICE_ACCOUNT, self.world.namespace).items:
            if FINALIZER in (item["metadata"].get("finalizers") or []):
                self.client.patch(
                    SERVICE_ACCOUNT,
                    item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                    self.world.namespace,
                )
