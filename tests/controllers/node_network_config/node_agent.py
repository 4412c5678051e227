"""A stand-in for the node half of Azure CNS in tests and benchmarks: hands each pod on a node an
address from the node's NodeNetworkConfig status (never one listed in ipsNotInUse, never one
another pod holds) and writes it to the pod's status, as a CNI plugin backed by CNS would.

``PodAddressAgent.sync_once`` is one pass; ``start``/``stop`` run passes in a thread. It records
when each pod first went without an address and when it got one, so callers can measure waits.
Side effects: pod status patches through the runtime Client.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG
from nodewright.controllers.node_network_config.resources import pod_addresses, uses_pod_network
from nodewright.devenv.periodic import PeriodicThread
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import POD


class PodAddressAgent:
    """Assigns pod addresses from NodeNetworkConfig status (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        *,
        node_network_config_namespace: str,
        pod_namespace: str,
        interval: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._config_namespace = node_network_config_namespace
        self._pod_namespace = pod_namespace
        self.interval = interval
        self._clock = clock
        self.first_seen: dict[str, float] = {}
        """Pod name -> when the agent first saw it without an address."""
        self.assigned_at: dict[str, float] = {}
        self.assigned: dict[str, str] = {}
        """Pod name -> the address it was given."""
        self.starved_passes = 0
        self.starved_since: dict[str, float] = {}
        """Pod name -> when the agent first found no free IP for it (the pool was short)."""
        self.errors: list[BaseException] = []
        self._loop = PeriodicThread(
            "pod-address-agent", self.sync_once, lambda: self.interval, self.errors.append
        )

    def waits(self) -> list[float]:
        """How long each pod that got an address waited for it (from first seen without one)."""
        return [
            self.assigned_at[name] - self.first_seen[name]
            for name in self.assigned_at
            if name in self.first_seen
        ]

    def starvation(self) -> dict[str, float]:
        """Pods that found no free IP at some pass -> how long until they got one (inf: never)."""
        return {
            name: self.assigned_at.get(name, float("inf")) - since
            for name, since in self.starved_since.items()
        }

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()  # a failed pass does not end the loop; the test reads self.errors

    def sync_once(self) -> int:
        """One pass; returns how many pods got an address. The pods are read before the pools:
        a pool read first could predate a pod created, by someone who saw the pool grow, between
        the two reads (the pass would find that pod no address in the older pool)."""
        pods = self._client.list(POD, self._pod_namespace).items
        configs = self._client.list(NODE_NETWORK_CONFIG, self._config_namespace).items
        free_by_node: dict[str, list[str]] = {}
        for config in configs:
            status = config.get("status") or {}
            containers = status.get("networkContainers") or []
            listed = set((config.get("spec") or {}).get("ipsNotInUse") or [])
            assignments = containers[0].get("ipAssignments") or [] if containers else []
            free_by_node[config["metadata"]["name"]] = [
                a["ip"] for a in assignments if a.get("name") not in listed and a.get("ip")
            ]
        used_by_node: dict[str, set[str]] = {}
        waiting: list[dict[str, Any]] = []
        now = self._clock()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or not uses_pod_network(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            held = pod_addresses(pod)
            if held:
                used_by_node.setdefault(node, set()).update(held)
            else:
                self.first_seen.setdefault(pod["metadata"]["name"], now)
                waiting.append(pod)
        given = 0
        for pod in waiting:
            node = pod["spec"]["nodeName"]
            used = used_by_node.setdefault(node, set())
            candidates = [a for a in free_by_node.get(node, []) if a not in used]
            if not candidates:
                self.starved_passes += 1
                self.starved_since.setdefault(pod["metadata"]["name"], now)
                continue
            address = candidates[0]
            used.add(address)
            name = pod["metadata"]["name"]
            with contextlib.suppress(errors.NotFound):
                self._client.patch(
                    POD,
                    name,
                    {"status": {"podIP": address, "podIPs": [{"ip": address}]}},
                    self._pod_namespace,
                    subresource="status",
                )
                self.assigned[name] = address
                self.assigned_at[name] = self._clock()
                given += 1
        return given
