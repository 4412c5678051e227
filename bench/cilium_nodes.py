"""The Cilium agent's share of Azure IPAM, for kwok nodes (no agent runs on them): one CiliumNode
per bench Node, and IPs handed to pods from it.

``CiliumNodeKeeper`` creates each Node's CiliumNode (``cilium.io/v2``, named after the Node) with
``spec.instance-id`` (the Node's providerID without ``azure://``, lower case, as Cilium's agent
derives it), ``spec.azure.interface-name`` and ``spec.ipam.pre-allocate``; then, as the agent's
CRD allocator does, hands each pod bound to the Node an IP of ``spec.ipam.pool`` (the operator
fills it from the NIC) that no other pod holds, writes it to the pod's status, and keeps
``status.ipam.used`` equal to the pods' IPs (what the operator subtracts from the pool to decide
how many more to allocate). It records, like the nodewright bench's pod address agent, when each
pod found no free IP and when it got one. Side effects: CiliumNode and pod status writes.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from nodewright.devenv.periodic import PeriodicThread
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD, Kind

__all__ = ["CILIUM_NODE", "CiliumNodeKeeper", "instance_id_of"]

CILIUM_NODE = Kind("cilium.io/v2", "CiliumNode", "ciliumnodes", namespaced=False)


def instance_id_of(provider_id: str) -> str:
    """Cilium's instance ID for a Node: its providerID without the ``azure://`` scheme, lower case."""
    return provider_id.removeprefix("azure://").lower()


class CiliumNodeKeeper:
    """See the module docstring."""

    def __init__(
        self,
        client: Client,
        *,
        node_selector: str,
        pod_namespace: str,
        interface_name: str,
        pre_allocate: int,
        interval: float = 0.1,
    ) -> None:
        self._client = client
        self._node_selector = node_selector
        self._pod_namespace = pod_namespace
        self._interface_name = interface_name
        self._pre_allocate = pre_allocate
        self.first_seen: dict[str, float] = {}
        self.assigned_at: dict[str, float] = {}
        self.starved_since: dict[str, float] = {}
        self.errors: list[BaseException] = []
        self._loop = PeriodicThread(
            "cilium-node-keeper", self.sync_once, lambda: interval, self.errors.append
        )

    def starvation(self) -> dict[str, float]:
        """Pods that found no free IP at some pass -> how long until they got one (inf: never)."""
        return {
            name: self.assigned_at.get(name, float("inf")) - since
            for name, since in self.starved_since.items()
        }

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def pools(self) -> dict[str, int]:
        """CiliumNode name -> how many IPs its ``spec.ipam.pool`` holds."""
        return {
            item["metadata"]["name"]: len(((item.get("spec") or {}).get("ipam") or {}).get("pool") or {})
            for item in self._client.list(CILIUM_NODE).items
        }

    def sync_once(self) -> None:
        """One pass: CiliumNodes for new Nodes, IPs for waiting pods, ``status.ipam.used``."""
        cilium_nodes = {item["metadata"]["name"]: item for item in self._client.list(CILIUM_NODE).items}
        for node in self._client.list(NODE, label_selector=self._node_selector).items:
            if node["metadata"]["name"] not in cilium_nodes:
                self._create(node)
        used = self._assign(cilium_nodes)
        for name, cilium_node in cilium_nodes.items():
            self._write_used(cilium_node, used.get(name, {}))

    def _create(self, node: dict[str, Any]) -> None:
        spec = {
            "instance-id": instance_id_of(str((node.get("spec") or {}).get("providerID", ""))),
            "azure": {"interface-name": self._interface_name},
            "ipam": {"pre-allocate": self._pre_allocate},
        }
        with contextlib.suppress(errors.AlreadyExists):
            self._client.create(CILIUM_NODE, {"metadata": {"name": node["metadata"]["name"]}, "spec": spec})

    def _assign(self, cilium_nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, str]]]:
        """Hand IPs to waiting pods; returns node -> IP -> {owner, resource} of every pod's IP."""
        pools = {
            name: ((item.get("spec") or {}).get("ipam") or {}).get("pool") or {}
            for name, item in cilium_nodes.items()
        }
        used: dict[str, dict[str, dict[str, str]]] = {}
        waiting: list[dict[str, Any]] = []
        now = time.monotonic()
        for pod in self._client.list(POD, self._pod_namespace).items:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or pod["metadata"].get("deletionTimestamp"):
                continue
            address = (pod.get("status") or {}).get("podIP")
            if address:
                used.setdefault(node, {})[address] = self._owner(pod, pools.get(node, {}).get(address))
            else:
                self.first_seen.setdefault(pod["metadata"]["name"], now)
                waiting.append(pod)
        for pod in waiting:
            node, name = pod["spec"]["nodeName"], pod["metadata"]["name"]
            taken = used.setdefault(node, {})
            free = [ip for ip in pools.get(node, {}) if ip not in taken]
            if not free:
                self.starved_since.setdefault(name, now)
                continue
            with contextlib.suppress(errors.NotFound):
                self._client.patch(
                    POD,
                    name,
                    {"status": {"podIP": free[0], "podIPs": [{"ip": free[0]}]}},
                    self._pod_namespace,
                    subresource="status",
                )
                taken[free[0]] = self._owner(pod, pools[node][free[0]])
                self.assigned_at[name] = time.monotonic()
        return used

    @staticmethod
    def _owner(pod: dict[str, Any], allocation: Any) -> dict[str, str]:
        resource = str((allocation or {}).get("resource", "")) if isinstance(allocation, dict) else ""
        return {"owner": f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", "resource": resource}

    def _write_used(self, cilium_node: dict[str, Any], used: dict[str, dict[str, str]]) -> None:
        current = ((cilium_node.get("status") or {}).get("ipam") or {}).get("used") or {}
        if current == used:
            return
        patch: dict[str, Any] = {ip: None for ip in current if ip not in used}
        patch.update(used)
        with contextlib.suppress(errors.NotFound, errors.Conflict):
            self._client.patch(
                CILIUM_NODE,
                cilium_node["metadata"]["name"],
                {"status": {"ipam": {"used": patch}}},
                subresource="status",
            )
