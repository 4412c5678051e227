"""Which pool a Node belongs to, kept as cache indexes, so that a rollout pass and the Node watch
reach only the Nodes of the scale sets a NodeImage claims, never every Node of the cluster.

Owns the index names a pass reads through, ``POD_NODE_INDEX`` (the Pods of a node),
``POD_CONTROLLER_INDEX`` (the Pods of a controller, by ``pod_controller_keys``: an eviction record
is checked against its controllers' pods, not every pod of their namespaces),
``ASSIGNED_NODE_INDEX`` and ``ASSIGNED_TARGET_INDEX`` (AzureAssignedIdentities by node and by the
machine they are assigned on), and two index functions: ``POOL_INDEX`` on the Node informer (a Node's pool by
``targeting.machine_group``: its scale-set annotation when written, else its providerID's scale
set, or for a VM its resource group and ``UNPLACED``, since only the cloud can tell whether a VM
is a Flexible scale set's member) and ``GROUP_ID_INDEX`` on the ScalingGroup informer (the
lowercased groupID); ``node_images_of_node`` and ``node_images_of_drained_pod``, the Node and Pod
watches' map functions; ``pool_nodes`` and
``unplaced_nodes``, a pass's reads. Reads of the informers' stores only, no I/O. Neighbours:
``targeting`` (the rule on a decoded node, and the claims), ``node_image`` (the pass), the
wiring in ``__init__``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from nodewright.controllers.node_image.evicted_pods import controller_of
from nodewright.controllers.node_image.grouping import DRAIN_STARTED_ANNOTATION, SCALING_GROUP_ANNOTATION
from nodewright.controllers.node_image.targeting import machine_group
from nodewright.runtime import Request, Store

__all__ = [
    "ASSIGNED_NODE_INDEX",
    "ASSIGNED_TARGET_INDEX",
    "GROUP_ID_INDEX",
    "POD_CONTROLLER_INDEX",
    "POD_NODE_INDEX",
    "POOL_INDEX",
    "UNPLACED",
    "assigned_target_keys",
    "node_images_of_drained_pod",
    "node_images_of_node",
    "node_pool_keys",
    "pod_controller_keys",
    "pool_nodes",
    "scaling_group_id_keys",
    "unplaced_nodes",
]

Object = dict[str, Any]

POOL_INDEX = "node-image.pool"
"""The Node informer's index: the lowercased ID of the scale set (or resource group) of a Node."""
GROUP_ID_INDEX = "node-image.group-id"
"""The ScalingGroup informer's index: the lowercased ``spec.groupID``."""
POD_NODE_INDEX = "node-image.pod-node"
"""The Pod informer's index by node (``field_indexer("spec.nodeName")``). The names are this
reconciler's own: identity's and IPAM's indexes on the same informers use other functions under
``spec.nodeName``, and ``ensure_indexer`` refuses a name held by another function."""
POD_CONTROLLER_INDEX = "node-image.pod-controller"
"""The Pod informer's index by controller (``pod_controller_keys``)."""
ASSIGNED_NODE_INDEX = "node-image.assigned-node"
"""The AzureAssignedIdentity informer's index by node (``field_indexer("spec.nodename")``)."""
ASSIGNED_TARGET_INDEX = "node-image.assigned-target"
"""The AzureAssignedIdentity informer's index by the lowercased ``status.target`` it reports."""
UNPLACED = "<vm-not-placed>"
"""The pool index's value for a VM Node without a scale-set annotation (no ARM ID looks like it)."""


def _provider_id(obj: Object) -> str:
    return str((obj.get("spec") or {}).get("providerID") or "")


def node_pool_keys(obj: Object) -> list[str]:
    """The pool index of a Node: its group's lowercased ID, and ``UNPLACED`` for a VM not placed
    yet (its resource group's, until the cloud says it belongs to a Flexible scale set)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    annotation = str(annotations.get(SCALING_GROUP_ANNOTATION) or "")
    group = machine_group(annotation, _provider_id(obj))
    if not group:
        return []
    if annotation or "/providers/" in group:
        return [group]
    return [group, UNPLACED]


def pod_controller_keys(obj: Object) -> list[str]:
    """The controller index of a Pod: ``namespace/Kind/name/uid`` of its controller, as an
    eviction record names it (none for a pod nothing controls)."""
    owner = controller_of(obj)
    if owner is None:
        return []
    return [f"{(obj.get('metadata') or {}).get('namespace', '')}/{owner}"]


def scaling_group_id_keys(obj: Object) -> list[str]:
    """The group-ID index of a ScalingGroup: its lowercased ``spec.groupID``."""
    group_id = str((obj.get("spec") or {}).get("groupID") or "")
    return [group_id.lower()] if group_id else []


def assigned_target_keys(obj: Object) -> list[str]:
    """The target index of an AzureAssignedIdentity: the lowercased ``status.target``."""
    target = str((obj.get("status") or {}).get("target") or "")
    return [target.lower()] if target else []


def node_images_of_node(
    obj: Object, scaling_groups: Store, node_images: Store, known_standalone: Callable[[str], bool]
) -> list[Request]:
    """The NodeImages a Node change concerns: those of the ScalingGroups naming its pool, or every
    NodeImage for a VM that is not placed yet and not known to be standalone (whichever NodeImage
    runs next asks the cloud where it belongs, and annotates it)."""
    keys = node_pool_keys(obj)
    if UNPLACED in keys and not known_standalone(_provider_id(obj)):
        return [Request("", name) for name in sorted(node_images.keys())]
    return _node_images_naming(scaling_groups, keys)


def node_images_of_drained_pod(pod: Object, nodes: Store, scaling_groups: Store) -> list[Request]:
    """The NodeImages a pod's deletion concerns: those of its node's pool, while the node is being
    drained (it carries ``nodewright.io/drain-started``), so the pass that hands it over runs as
    its last pod goes, not at the next drain poll; none for any other node's pod."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    node = nodes.get(str(node_name)) if node_name else None
    if node is None or DRAIN_STARTED_ANNOTATION not in (
        (node.get("metadata") or {}).get("annotations") or {}
    ):
        return []
    return _node_images_naming(scaling_groups, node_pool_keys(node))


def _node_images_naming(scaling_groups: Store, keys: Iterable[str]) -> list[Request]:
    """The NodeImages of the ScalingGroups whose groupID is one of ``keys`` (lowercased)."""
    names: set[str] = set()
    for key in keys:
        if key == UNPLACED:
            continue
        for group in scaling_groups.by_index(GROUP_ID_INDEX, key):
            name = (group.get("spec") or {}).get("nodeImage")
            if name:
                names.add(str(name))
    return [Request("", name) for name in sorted(names)]


def pool_nodes(nodes: Store, pools: Iterable[str]) -> list[Object]:
    """The cached Nodes of ``pools`` (lowercased IDs), each once."""
    found: dict[str, Object] = {}
    for pool in pools:
        for obj in nodes.by_index(POOL_INDEX, pool):
            found[str((obj.get("metadata") or {}).get("name", ""))] = obj
    return list(found.values())


def unplaced_nodes(nodes: Store, known_standalone: Callable[[str], bool]) -> list[Object]:
    """The cached VM Nodes not placed yet whose machine is not known to be standalone."""
    return [obj for obj in nodes.by_index(POOL_INDEX, UNPLACED) if not known_standalone(_provider_id(obj))]
