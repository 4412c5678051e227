"""A simulated Azure CNS in NodeSubnet mode: the real consumer of NIC secondary IPs, for tests,
benchmarks and ``make run``.

What it models, from azure-container-networking (``cns/nodesubnet``, ``cns/restserver``):

- **Discovery by polling.** Per node, CNS fetches the NIC's secondary IPs from NMAgent (here:
  read straight from the ARM emulator's state, which is not an ARM call and uses no ARM budget),
  first at start, then 4 s apart; each fetch that returns the same list as the previous one
  doubles the interval, up to 1,024 s; a fetch that differs resets it to 4 s
  (``FetchSchedule``). New IPs are therefore usable only after the next fetch: up to 1,024 s
  after a quiet period.
- **Its own pool.** Each fetch becomes one network container (version 0) whose IPs are Available
  at once. An IP missing from a fetch is dropped from the pool, unless a pod holds it (CNS's
  ``Assigned`` state): then CNS refuses the whole update (``InconsistentIPConfigState``) and
  keeps its previous pool, new IPs included *out*, until that pod is gone.
- **Handing out.** Pods on the node without an address get a free address from the pool,
  written to ``status.podIP(s)`` as the CNI plugin would. A pod that finds no free address
  waits and is counted (``starved_since``), which is the wait a pod sees, discovery included.
- **Prefix blocks** (experimental): a configuration holding a /28 block counts as its 16
  addresses (an assumption: how NMAgent reports a block to CNS is not known here).
- **The danger it measures.** ``stale_handouts`` counts addresses handed out that were no
  longer on the NIC at that moment (CNS did not know yet): such a pod would have no working
  network. The release rule of nodewright's NodeSubnet mode must keep this at zero.

``NodeSubnetConsumer.sync_once(now)`` is one pass; ``start``/``stop`` run passes in a thread.
Side effects: pod status patches through the runtime Client; reads of the emulator's state.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.emulator import EmulatorState
from nodewright.cloud.emulator.network import instance_network_interfaces
from nodewright.devenv.periodic import PeriodicThread
from nodewright.ipam import addresses_of
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.kinds import POD
from nodewright.runtime.logs import get_logger

__all__ = [
    "MAX_FETCH_INTERVAL_SECONDS",
    "MIN_FETCH_INTERVAL_SECONDS",
    "FetchSchedule",
    "NicAddressSource",
    "NodeSubnetConsumer",
    "nic_addresses_in_emulator",
]

log = get_logger("nodewright.devenv.cns_nodesubnet")

MIN_FETCH_INTERVAL_SECONDS = 4.0
MAX_FETCH_INTERVAL_SECONDS = 1024.0

NicAddressSource = Callable[[str], list[str] | None]
"""Node name -> the secondary addresses of its primary NIC (None: no such node or NIC)."""


@dataclass
class FetchSchedule:
    """CNS's fetch interval: reset to the minimum on change, doubled (to the maximum) otherwise."""

    minimum: float = MIN_FETCH_INTERVAL_SECONDS
    maximum: float = MAX_FETCH_INTERVAL_SECONDS
    interval: float = MIN_FETCH_INTERVAL_SECONDS

    def after_fetch(self, changed: bool) -> float:
        """The interval until the next fetch, given whether this fetch differed from the last."""
        self.interval = self.minimum if changed else min(self.interval * 2, self.maximum)
        return self.interval


@dataclass
class _NodePool:
    schedule: FetchSchedule
    next_fetch: float
    last_fetch: tuple[str, ...] | None = None
    pool: set[str] = field(default_factory=set)
    refused_updates: int = 0


def nic_addresses_in_emulator(state: EmulatorState) -> NicAddressSource:
    """What NMAgent would report for a node: the secondary addresses of its machine's primary NIC
    (scale-set instances and standalone VMs of the in-process emulator)."""

    def addresses(node_name: str) -> list[str] | None:
        with state.locked():
            for scale_set in state.scale_sets.values():
                for instance in scale_set.instances.values():
                    if _computer_name(instance.document) == node_name:
                        nics = instance_network_interfaces(state, scale_set, instance)
                        return _secondary_addresses(nics)
            for machine in state.virtual_machines.values():
                if _computer_name(machine.document) == node_name:
                    references = (machine.properties.get("networkProfile") or {}).get(
                        "networkInterfaces"
                    ) or []
                    nics = [state.render(str(r.get("id", ""))) or {} for r in references]
                    return _secondary_addresses(nics)
        return None

    return addresses


def _computer_name(document: dict[str, Any]) -> str:
    properties = document.get("properties") or {}
    return str((properties.get("osProfile") or {}).get("computerName") or document.get("name", "")).lower()


def _secondary_addresses(nics: list[dict[str, Any]]) -> list[str] | None:
    if not nics:
        return None
    primary = next((n for n in nics if (n.get("properties") or {}).get("primary")), nics[0])
    found = []
    for configuration in (primary.get("properties") or {}).get("ipConfigurations") or []:
        properties = configuration.get("properties") or {}
        if not properties.get("primary") and properties.get("privateIPAddress"):
            found.extend(addresses_of(str(properties["privateIPAddress"])))
    return found


class NodeSubnetConsumer:
    """Plays CNS NodeSubnet on every node that has pods in ``pod_namespace`` (module docstring)."""

    def __init__(
        self,
        client: Client,
        addresses: NicAddressSource,
        *,
        pod_namespace: str,
        interval: float = 0.05,
        minimum: float = MIN_FETCH_INTERVAL_SECONDS,
        maximum: float = MAX_FETCH_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._addresses = addresses
        self._namespace = pod_namespace
        self.interval = interval
        self._minimum, self._maximum = minimum, maximum
        self._clock = clock
        self._nodes: dict[str, _NodePool] = {}
        self.first_seen: dict[str, float] = {}
        self.assigned_at: dict[str, float] = {}
        self.assigned: dict[str, str] = {}
        self.starved_since: dict[str, float] = {}
        self.stale_handouts = 0
        self.fetches = 0
        self.errors: list[BaseException] = []
        self._loop = PeriodicThread(
            "cns-nodesubnet", self.sync_once, lambda: self.interval, on_error=self.errors.append
        )

    # -- what tests and benchmarks read -----------------------------------------------------------

    def starvation(self) -> dict[str, float]:
        """Pods that found no free IP at some pass -> how long until they got one (inf: never)."""
        return {n: self.assigned_at.get(n, float("inf")) - s for n, s in self.starved_since.items()}

    def refused_updates(self) -> int:
        """Fetches whose update CNS refused because a vanished IP was still assigned to a pod."""
        return sum(pool.refused_updates for pool in self._nodes.values())

    def known(self, node: str) -> set[str]:
        """The addresses the consumer currently holds for ``node`` (what it can hand out)."""
        pool = self._nodes.get(node)
        return set(pool.pool) if pool else set()

    # -- running ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def sync_once(self) -> int:
        """One pass: fetch for the nodes that are due, then hand out addresses; returns how many
        pods got one."""
        pods = self._client.list(POD, self._namespace).items
        now = self._clock()
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not (pod.get("spec") or {}).get("hostNetwork"):
                by_node.setdefault(str(node), []).append(pod)
        given = 0
        for node, node_pods in by_node.items():
            used = {
                str((p.get("status") or {}).get("podIP"))
                for p in node_pods
                if (p.get("status") or {}).get("podIP")
            }
            self._fetch_if_due(node, used, now)
            given += self._hand_out(node, node_pods, used, now)
        return given

    def _fetch_if_due(self, node: str, used: set[str], now: float) -> None:
        pool = self._nodes.get(node)
        if pool is None:
            pool = _NodePool(FetchSchedule(self._minimum, self._maximum, self._minimum), next_fetch=now)
            self._nodes[node] = pool
        if now < pool.next_fetch:
            return
        fetched = self._addresses(node)
        self.fetches += 1
        current = tuple(sorted(fetched or []))
        changed = pool.last_fetch is not None and current != pool.last_fetch
        pool.next_fetch = now + pool.schedule.after_fetch(changed or pool.last_fetch is None)
        pool.last_fetch = current
        vanished_in_use = (pool.pool - set(current)) & used
        if vanished_in_use:
            pool.refused_updates += 1
            log.info("Refused an IP update: assigned IPs vanished", node=node, count=len(vanished_in_use))
            return
        pool.pool = set(current)

    def _hand_out(self, node: str, node_pods: list[dict[str, Any]], used: set[str], now: float) -> int:
        pool = self._nodes[node]
        free = sorted(pool.pool - used)
        given = 0
        on_nic: set[str] | None = None
        for pod in node_pods:
            name = pod["metadata"]["name"]
            if (pod.get("status") or {}).get("podIP") or pod["metadata"].get("deletionTimestamp"):
                continue
            self.first_seen.setdefault(name, now)
            if not free:
                self.starved_since.setdefault(name, now)
                continue
            address = free.pop(0)
            if on_nic is None:
                on_nic = set(self._addresses(node) or [])
            if address not in on_nic:
                self.stale_handouts += 1
            with contextlib.suppress(errors.NotFound):
                self._client.patch(
                    POD,
                    name,
                    {"status": {"podIP": address, "podIPs": [{"ip": address}]}},
                    self._namespace,
                    subresource="status",
                )
                self.assigned[name] = address
                self.assigned_at[name] = self._clock()
                given += 1
        return given
