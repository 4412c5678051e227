"""The cloud side of ``bench.scale`` in a process of its own: the ARM emulator holding the
generated estate, and the node simulator that turns its machines into Nodes, so that their CPU
is measured apart from the harness's and the manager's.

Owns ``plan_estate`` (pure: how many scale sets of how many instances, and identities, for a
node count), ``World`` (the parent's handle: starts the process, sends it one command at a time
over a pipe and returns its answer) and ``serve`` (the child's loop). The estate: one resource
group, one virtual network, ``pools`` uniform scale sets (Standard_D4s_v5, one NIC each, the
old node image), ``pools + 1`` user-assigned identities; every ARM call delayed by ``LATENCY``
and ARM's limits enforced (subscription buckets reads 250 @ 25/s, writes and deletes 200 @ 10/s,
and the Compute policies, ``RequestLimits(enforce=True)``).

Side effects: a child process with a loopback HTTPS server, Kubernetes writes (Nodes) from it, a
temporary directory.
"""

from __future__ import annotations

import math
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.mic_peer import arm_counts, identity_requests
from nodewright.cloud.budget import request_class
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.cloud.emulator.scale_set_members import finish_members, scale_to
from nodewright.cloud.emulator.throttling import RequestLimits
from nodewright.devenv.nodesim import NodeSimulator, machines_in_emulator
from nodewright.runtime.kube.client import Client

__all__ = [
    "LATENCY",
    "NEW_IMAGE",
    "OLD_IMAGE",
    "OWNER",
    "RESOURCE_GROUP",
    "EstatePlan",
    "World",
    "plan_estate",
]

LATENCY = 0.2
RESOURCE_GROUP = "rg-bench-scale"
OWNER = "bench-scale"
OLD_IMAGE = "/CommunityGalleries/nodewright-bench/images/node/versions/1.0.0"
NEW_IMAGE = "/CommunityGalleries/nodewright-bench/images/node/versions/2.0.0"
POOL_SIZE = 100
"""Nodes per scale set (the rollout phase rolls one pool: 100 nodes, or fewer on a small run)."""
JOIN_STEPS = 10
SIMULATOR_INTERVAL = 5.0
"""The node simulator lists Nodes this often (every second would load the API server at scale)."""


@dataclass(frozen=True)
class EstatePlan:
    """How many nodes in which pools, and how many identities."""

    nodes: int
    pool_sizes: tuple[int, ...]
    identities: int

    @property
    def pools(self) -> int:
        return len(self.pool_sizes)


def plan_estate(nodes: int) -> EstatePlan:
    """Pure: at least two pools of at most ``POOL_SIZE`` nodes, sizes as even as they split, one
    identity per pool and one shared by every pool."""
    if nodes < 2:
        raise ValueError("at least 2 nodes")
    pools = max(2, math.ceil(nodes / POOL_SIZE))
    sizes = tuple(nodes // pools + (1 if index < nodes % pools else 0) for index in range(pools))
    return EstatePlan(nodes=nodes, pool_sizes=sizes, identities=pools + 1)


class World:
    """The parent's handle on the world process (see the module docstring)."""

    def __init__(self, kubeconfig: str, plan: EstatePlan, join_seconds: float, lease_renewal: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self.process = context.Process(
            target=serve,
            args=(child, kubeconfig, plan, join_seconds, lease_renewal),
            name="bench-scale-world",
            daemon=True,
        )
        self.process.start()
        self.info: dict[str, Any] = self.call("info")

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def call(self, command: str, *arguments: Any, timeout: float = 600.0) -> Any:
        """Send one command; return its answer (re-raises the child's error)."""
        self._connection.send((command, arguments))
        if not self._connection.poll(timeout):
            raise TimeoutError(f"the world process did not answer {command} in {timeout:g} s")
        ok, answer = self._connection.recv()
        if not ok:
            raise RuntimeError(f"the world process failed {command}: {answer}")
        return answer

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.call("stop", timeout=60)
            except (OSError, EOFError, TimeoutError, RuntimeError):
                self.process.terminate()
        self.process.join(30)


class _Estate:
    """In the child: the emulator, its estate, the node simulator."""

    def __init__(self, kubeconfig: str, plan: EstatePlan, join_seconds: float, lease_renewal: float) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="bench-scale-arm-")
        self.emulator = ArmEmulator(
            state_dir=Path(self._directory.name), certificates=issue_loopback_certificates()
        ).start()
        self.plan = plan
        self.join_seconds = join_seconds
        self.lease_renewal = lease_renewal
        estate = self.emulator.estate
        estate.add_resource_group(RESOURCE_GROUP)
        vnet = estate.add_virtual_network(RESOURCE_GROUP, "vnet", subnets={"nodes": "10.0.0.0/12"})
        self.identities = [estate.add_identity(RESOURCE_GROUP, f"id-{i:02d}") for i in range(plan.identities)]
        self.scale_sets = [
            estate.add_scale_set(
                RESOURCE_GROUP,
                f"pool{index:02d}",
                subnet_id=vnet + "/subnets/nodes",
                capacity=size,
                image={"communityGalleryImageId": OLD_IMAGE},
            )
            for index, size in enumerate(plan.pool_sizes)
        ]
        self.emulator.faults.add_latency(LATENCY)
        self.emulator.throttling.configure(RequestLimits(enforce=True))
        self.client = Client.from_kubeconfig(kubeconfig)
        self.joined = 0
        machines = machines_in_emulator(self.emulator.state)
        self.simulator = NodeSimulator(
            self.client, lambda: machines()[: self.joined], owner=OWNER, interval=SIMULATOR_INTERVAL
        )

    def info(self) -> dict[str, Any]:
        identities = []
        for identity in self.identities:
            document = self.emulator.state.render(identity) or {}
            identities.append((identity, str(document["properties"]["clientId"])))
        return {
            "endpoint": self.emulator.endpoint,
            "ca_file": str(self.emulator.ca_file),
            "subscription": DEFAULT_SUBSCRIPTION,
            "tenant_id": self.emulator.state.tenant_id,
            "scale_sets": list(self.scale_sets),
            "identities": identities,
        }

    def join(self) -> int:
        """Every machine becomes a Node, in ``JOIN_STEPS`` steps over one lease renewal period
        (kwok renews each Node's lease from when it joined: all at once would make every
        renewal a burst); then new machines join after ``join_seconds``, as booting ones do."""
        total = len(machines_in_emulator(self.emulator.state)())
        for step in range(1, JOIN_STEPS + 1):
            self.joined = -(-total * step // JOIN_STEPS)
            self.simulator.sync_once()
            if step < JOIN_STEPS:
                time.sleep(self.lease_renewal / JOIN_STEPS)
        self.joined = 1 << 30
        self.simulator.join_delay = self.join_seconds
        self.simulator.sync_once()
        self.simulator.start()
        return total

    def scale(self, pool: int, capacity: int) -> int:
        """Set pool ``pool``'s capacity at once, as an autoscaler outside nodewright would (new
        instances run, removed ones are gone); returns the live instances."""
        with self.emulator.state.locked() as state:
            scale_set = state.scale_sets[self.scale_sets[pool].lower()]
            created, deleting = scale_to(state, scale_set, capacity)
            finish_members(state, scale_set, created, deleting, succeeded=True)
            return sum(1 for i in scale_set.instances.values() if i.provisioning_state != "Deleting")

    def census(self, pool: int, image: str) -> tuple[int, int]:
        """Live machines of pool ``pool`` and how many run ``image`` (read in place, no copies)."""
        with self.emulator.state.locked() as state:
            live = [
                i
                for i in state.scale_sets[self.scale_sets[pool].lower()].instances.values()
                if i.provisioning_state != "Deleting"
            ]
            on_image = 0
            for instance in live:
                storage = (instance.document.get("properties") or {}).get("storageProfile") or {}
                if (storage.get("imageReference") or {}).get("communityGalleryImageId") == image:
                    on_image += 1
            return len(live), on_image

    def arm_calls(self, since: float) -> list[tuple[float, str, int, str]]:
        return [
            (entry.monotonic, request_class(entry.method), entry.status, entry.operation)
            for entry in self.emulator.requests.entries(since=since)
        ]

    def register_application(self, client_id: str, secret: str) -> None:
        """Let a peer sign in (Entra's v1 client-credentials route) as ``client_id``."""
        self.emulator.entra.register_application(client_id, secret)

    def caller_counts(self, token: str | None, client_id: str | None, since: float) -> dict[str, Any]:
        """The requests since ``since`` of one caller (bearer ``token``, or a token issued to
        ``client_id``), counted all and for identity assignment alone (``bench.mic_peer``)."""
        entra = self.emulator.entra
        entries = [
            entry
            for entry in self.emulator.requests.entries(since=since)
            if (
                entry.bearer_token == token
                if client_id is None
                else entra.client_of(entry.bearer_token) == client_id
            )
        ]
        with self.emulator.state.locked() as state:

            def started_by(identifier: str) -> str:
                operation = state.operations.get(identifier)
                return operation.started_by if operation is not None else ""

            identity = identity_requests(entries, started_by)
        return {"all": arm_counts(entries), "identity": arm_counts(identity)}

    def stop(self) -> None:
        self.simulator.stop()
        self.emulator.stop()
        self._directory.cleanup()


def serve(
    connection: Connection, kubeconfig: str, plan: EstatePlan, join_seconds: float, lease_renewal: float
) -> None:
    """The world process: build the estate, then answer commands until ``stop``."""
    estate = _Estate(kubeconfig, plan, join_seconds, lease_renewal)
    handlers: dict[str, Callable[..., Any]] = {
        "info": estate.info,
        "join": estate.join,
        "scale": estate.scale,
        "census": estate.census,
        "arm_calls": estate.arm_calls,
        "register_application": estate.register_application,
        "caller_counts": estate.caller_counts,
    }
    while True:
        command, arguments = connection.recv()
        if command == "stop":
            estate.stop()
            connection.send((True, None))
            return
        try:
            connection.send((True, handlers[command](*arguments)))
        except Exception as error:  # reported to the parent, which raises it there
            connection.send((False, repr(error)))
