"""What ``bench.scale`` watches in the cluster: Pods, Nodes, AzureAssignedIdentities and
NodeNetworkConfigs, each through one informer that keeps a slim copy, and the first moment each
item reached the state a phase waits for.

Owns ``Tracker``: ``pod_running`` (pod key -> first seen Running and Ready), ``assigned`` (pod
key -> its AzureAssignedIdentity first seen Assigned), ``node_ready`` (node -> first seen Ready),
``pool_filled`` (node -> its NodeNetworkConfig first seen holding at least the IPs it requests,
and some), and ``problems`` (what keeps the cluster from being converged: empty once it is). A
pod or node that goes away and comes back (same name) is timed afresh.

Side effects: four informer threads (list and watch through the API server).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nodewright.controllers.identity.options import AZURE_ASSIGNED_IDENTITY
from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.runtime.informers.informer import Informer
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD

__all__ = ["BINDING_LABEL", "Tracker"]

BINDING_LABEL = "aadpodidbinding"


def _ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    return {
        "metadata": {
            "name": metadata.get("name"),
            "namespace": metadata.get("namespace"),
            "resourceVersion": metadata.get("resourceVersion"),
            "deleting": bool(metadata.get("deletionTimestamp")),
            "bound": (metadata.get("labels") or {}).get(BINDING_LABEL),
        },
        "node": (obj.get("spec") or {}).get("nodeName"),
        "ready": _ready(obj) and (obj.get("status") or {}).get("phase") == "Running",
    }


def _slim_node(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    return {
        "metadata": {"name": metadata.get("name"), "resourceVersion": metadata.get("resourceVersion")},
        "ready": _ready(obj),
        "pool": (metadata.get("labels") or {}).get("kubernetes.azure.com/agentpool"),
    }


def _slim_assigned(obj: dict[str, Any]) -> dict[str, Any]:
    metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return {
        "metadata": {
            "name": metadata.get("name"),
            "namespace": metadata.get("namespace"),
            "resourceVersion": metadata.get("resourceVersion"),
        },
        "pod": f"{spec.get('podNamespace')}/{spec.get('pod')}",
        "assigned": (obj.get("status") or {}).get("status") == "Assigned",
    }


def _slim_config(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    requested = int((obj.get("spec") or {}).get("requestedIPCount") or 0)
    containers = (obj.get("status") or {}).get("networkContainers") or []
    held = sum(len(c.get("ipAssignments") or []) for c in containers)
    return {
        "metadata": {"name": metadata.get("name"), "resourceVersion": metadata.get("resourceVersion")},
        "filled": requested > 0 and held >= requested,
    }


class _Times:
    """An event handler that stamps each key the first time ``done(obj)`` holds, and forgets it
    when the object goes away."""

    def __init__(self, key: Callable[[dict[str, Any]], str], done: Callable[[dict[str, Any]], bool]) -> None:
        self.key = key
        self.done = done
        self.times: dict[str, float] = {}
        self.lock = threading.Lock()

    def on_add(self, obj: dict[str, Any]) -> None:
        if self.done(obj):
            with self.lock:
                self.times.setdefault(self.key(obj), time.monotonic())

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        del old
        self.on_add(new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.times.pop(self.key(obj), None)

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return dict(self.times)


def _pod_key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


class Tracker:
    """See the module docstring. ``namespace`` holds the bench's pods, ``config_namespace`` the
    NodeNetworkConfigs."""

    def __init__(self, client: Client, namespace: str, config_namespace: str = "kube-system") -> None:
        self.pods = Informer(client, POD, namespace=namespace, transform=_slim_pod)
        self.nodes = Informer(client, NODE, label_selector=SIMULATED_LABEL, transform=_slim_node)
        self.assigned_identities = Informer(client, AZURE_ASSIGNED_IDENTITY, transform=_slim_assigned)
        self.configs = Informer(
            client, NODE_NETWORK_CONFIG, namespace=config_namespace, transform=_slim_config
        )
        self._pod_running = _Times(_pod_key, lambda o: bool(o["ready"]) and not o["metadata"]["deleting"])
        self._assigned = _Times(lambda o: str(o["pod"]), lambda o: bool(o["assigned"]))
        self._node_ready = _Times(lambda o: str(o["metadata"]["name"]), lambda o: bool(o["ready"]))
        self._pool_filled = _Times(lambda o: str(o["metadata"]["name"]), lambda o: bool(o["filled"]))
        self.pods.add_event_handler(self._pod_running)
        self.assigned_identities.add_event_handler(self._assigned)
        self.nodes.add_event_handler(self._node_ready)
        self.configs.add_event_handler(self._pool_filled)
        self._informers = (self.pods, self.nodes, self.assigned_identities, self.configs)

    def start(self, timeout: float = 120.0) -> None:
        for informer in self._informers:
            informer.start()
        deadline = time.monotonic() + timeout
        while not all(i.has_synced() for i in self._informers):
            if time.monotonic() > deadline:
                raise TimeoutError("the tracker's informers did not sync")
            time.sleep(0.1)

    def stop(self) -> None:
        for informer in self._informers:
            informer.stop()

    def pod_running(self) -> dict[str, float]:
        return self._pod_running.snapshot()

    def assigned(self) -> dict[str, float]:
        return self._assigned.snapshot()

    def node_ready(self) -> dict[str, float]:
        return self._node_ready.snapshot()

    def pool_filled(self) -> dict[str, float]:
        return self._pool_filled.snapshot()

    def bound_pod_running(self) -> dict[str, float]:
        """``pod_running`` of the live pods that use an identity (their binding label is set; a
        pod being deleted needs its identity no more)."""
        bound = {
            _pod_key(p)
            for p in self.pods.store.list()
            if p["metadata"]["bound"] and not p["metadata"]["deleting"]
        }
        return {key: at for key, at in self.pod_running().items() if key in bound}

    def cluster_problems(self, nodes: int, pods: int) -> list[str]:
        """Why Nodes and pods are not all Ready (``nodes`` and ``pods`` are how many there should be)."""
        node_list = self.nodes.store.list()
        live_pods = [p for p in self.pods.store.list() if not p["metadata"]["deleting"]]
        problems = []
        if len(node_list) != nodes:
            problems.append(f"{len(node_list)} Nodes, want {nodes}")
        problems += [f"Node {n['metadata']['name']} not Ready" for n in node_list if not n["ready"]][:3]
        if len(live_pods) != pods:
            problems.append(f"{len(live_pods)} pods, want {pods}")
        unready = [p for p in live_pods if not p["ready"]]
        if unready:
            problems.append(f"{len(unready)} pods not Running and Ready, e.g. {_pod_key(unready[0])}")
        return problems

    def problems(self, nodes: int, pods: int) -> list[str]:
        """Why the cluster is not converged: Nodes and pods Ready, every pod that uses an
        identity has its AzureAssignedIdentity Assigned and no other one is left, every Node's
        pool is filled and no NodeNetworkConfig of a Node gone is left."""
        problems = self.cluster_problems(nodes, pods)
        live_bound = {
            _pod_key(p)
            for p in self.pods.store.list()
            if p["metadata"]["bound"] and not p["metadata"]["deleting"]
        }
        objects = self.assigned_identities.store.list()
        assigned = {o["pod"] for o in objects if o["assigned"]}
        namespace = self.pods.namespace
        ours = {o["pod"] for o in objects if str(o["pod"]).startswith(f"{namespace}/")}
        if live_bound - assigned:
            problems.append(f"{len(live_bound - assigned)} pods without an Assigned identity")
        if ours - live_bound:
            problems.append(f"{len(ours - live_bound)} AzureAssignedIdentities of pods gone")
        node_names = {n["metadata"]["name"] for n in self.nodes.store.list()}
        configs = {c["metadata"]["name"]: c for c in self.configs.store.list()}
        unfilled = [name for name in node_names if not (configs.get(name) or {}).get("filled")]
        if unfilled:
            problems.append(f"{len(unfilled)} Nodes without a filled pool, e.g. {sorted(unfilled)[0]}")
        if set(configs) - node_names:
            problems.append(f"{len(set(configs) - node_names)} NodeNetworkConfigs of Nodes gone")
        return problems
