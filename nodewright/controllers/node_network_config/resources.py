"""The kinds, names and small helpers the node_network_config reconciler shares with its tests.

Owns the ``Kind`` values of NodeNetworkConfig and ClusterSubnetState (built from the api models'
class variables), the finalizer and annotation names, and pure helpers over pods and nodes: which
pods use pod networking and hold an address, what a node's providerID names. No I/O, except
``fresh_pod_addresses`` (one uncached list of a node's pods, before anything is released).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.acn.v1alpha1 import ClusterSubnetState
from nodewright.controllers.kinds import kind_of
from nodewright.runtime import POD, Client

__all__ = [
    "CLUSTER_SUBNET_STATE",
    "FINALIZER",
    "NETWORK_INTERFACE_ANNOTATION",
    "NODE_NETWORK_CONFIG",
    "cluster_subnet_state_name",
    "controller_reference",
    "fresh_pod_addresses",
    "is_controlled_by",
    "node_pods",
    "owner_references_for",
    "pod_addresses",
    "provider_id_of",
    "uses_pod_network",
]

NODE_NETWORK_CONFIG = kind_of(NodeNetworkConfig)
CLUSTER_SUBNET_STATE = kind_of(ClusterSubnetState)

FINALIZER = "nodewright.io/node-network-config"
"""Held on every NodeNetworkConfig we manage until its IPs are released from the NIC."""
NETWORK_INTERFACE_ANNOTATION = "nodewright.io/network-interface"
"""The ARM ID of the NIC the IPs live on, so they can be released after the Node is gone."""

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def uses_pod_network(pod: Mapping[str, Any]) -> bool:
    """A pod that needs an address from the pool: not host-networked and not finished."""
    spec = pod.get("spec") or {}
    if spec.get("hostNetwork"):
        return False
    return (pod.get("status") or {}).get("phase") not in _FINISHED_PHASES


def pod_addresses(pod: Mapping[str, Any]) -> list[str]:
    """The IPv4/IPv6 addresses a pod reports (status.podIPs, else status.podIP)."""
    status = pod.get("status") or {}
    addresses = [str(entry.get("ip")) for entry in status.get("podIPs") or [] if entry.get("ip")]
    if not addresses and status.get("podIP"):
        addresses = [str(status["podIP"])]
    return addresses


def node_pods(pods: Iterable[Mapping[str, Any]]) -> tuple[int, set[str]]:
    """Demand (pods that use pod networking) and the addresses they hold."""
    demand = 0
    addresses: set[str] = set()
    for pod in pods:
        if uses_pod_network(pod):
            demand += 1
            addresses.update(pod_addresses(pod))
    return demand, addresses


def fresh_pod_addresses(client: Client, node_name: str) -> set[str]:
    """Addresses pods on the node report, read from the API server, not the cache (side effect:
    one list)."""
    pods = client.list(POD, field_selector=f"spec.nodeName={node_name}").items
    return node_pods(pods)[1]


def provider_id_of(node: Mapping[str, Any]) -> str:
    return str((node.get("spec") or {}).get("providerID") or "")


_INVALID_NAME_CHARACTERS = re.compile(r"[^a-z0-9.-]+")


def cluster_subnet_state_name(subnet_name: str) -> str:
    """The ClusterSubnetState name for a subnet: its name, lowercased and made DNS-1123-safe."""
    name = _INVALID_NAME_CHARACTERS.sub("-", subnet_name.lower()).strip("-.")
    return name[:253] or "subnet"


def controller_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """The owner reference that makes a NodeNetworkConfig *controlled by* its Node, as upstream's
    ``SetControllerRef`` writes it: Azure CNS's NNC reconciler drops every event of an NNC that
    ``metav1.IsControlledBy(nnc, node)`` rejects."""
    metadata = node.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "name": str(metadata.get("name") or ""),
        "uid": str(metadata.get("uid") or ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """``metav1.IsControlledBy``: ``obj`` has a controller reference with ``owner``'s uid."""
    uid = (owner.get("metadata") or {}).get("uid")
    references = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") is True and uid and r.get("uid") == uid for r in references)


def owner_references_for(obj: Mapping[str, Any], node: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The owner references ``obj`` should carry so that ``node`` controls it, or None when it
    already does (or cannot: the Node has no uid, or another object is its controller). References
    to other Nodes (an older node of the same name) are dropped; other owners are kept."""
    reference = controller_reference(node)
    if not reference["uid"] or is_controlled_by(obj, node):
        return None
    existing = list((obj.get("metadata") or {}).get("ownerReferences") or [])
    others = [r for r in existing if not (r.get("kind") == "Node" and r.get("apiVersion") == "v1")]
    if any(r.get("controller") is True for r in others):
        return None
    return [*others, reference]
