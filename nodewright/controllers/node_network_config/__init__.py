"""node_network_config: network container IPAM, NodeNetworkConfig pools backed by Azure NIC IP
configurations (the control-plane half of Azure CNS's design, and optionally the node half).

The reconciler named ``node-network-config`` in the manager's config wires one controller,
``nodenetworkconfig``: it reconciles NodeNetworkConfigs in the configured namespace, keyed by node
name, and is also woken by Nodes (selected by ``nodeSelector``; their providerID and their
``nodewright.io/incoming-pods`` announcement and ``nodewright.io/donor`` mark), by pods (mapped to
their node through ``spec.nodeName``), with the ``node-image`` reconciler beside it by its
PendingNodes (``heirs``: a new Node the rollout created is sized once paired) and by the NIC watcher
(``nic_watch``: a poller that lists NICs per scale set and enqueues the nodes whose NIC changed;
each Uniform scale set's list also feeds ``boot_pools``, which keeps its model carrying the pool
its nodes usually hold, so new instances boot with their IPs).
``reconciler`` holds the reconcile (read -> decide -> apply -> status) and composes ``lifecycle``
(create, adopt as controller, finalize), ``demand`` (the spec per consumer mode: ``crd`` or
``nodesubnet``), ``operations`` (NIC writes that no worker waits for: the end of each enqueues its
node), ``nic_book`` and ``subnets`` (in-memory state, each behind its own lock), ``status`` and
``metrics`` (``nodewright_ipam_*``); ``nodewright.ipam`` holds the pure arithmetic; ``options`` the
strict parsing of the options; ``cloud`` the narrow cloud protocols; ``scope_listings`` the cold
start's per-scale-set lists; ``resources`` the kinds, names and owner references.
docs/ipam.md explains the consumer modes and the release rule. ``setup(manager, options)`` is
what the registry calls; ``install`` is the same wiring with the settings and the cloud given
(tests and benchmarks use it); ``validate_options`` checks the options without a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from nodewright.api.nodewright.v1alpha1 import (
    DONOR_ANNOTATION,
    INCOMING_PODS_ANNOTATION,
    PendingNode,
    ScalingGroup,
)
from nodewright.controllers.cloud_access import clouds_of, parse_cloud_settings
from nodewright.controllers.kinds import kind_of
from nodewright.controllers.node_network_config.boot_pools import BootPoolModels, BootPools
from nodewright.controllers.node_network_config.cloud import (
    ComputeOperations,
    NetworkOperations,
    NicLocator,
)
from nodewright.controllers.node_network_config.metrics import IPAM_GAUGES
from nodewright.controllers.node_network_config.nic_watch import NetworkInterfaceLister, NicWatch
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings, parse_options
from nodewright.controllers.node_network_config.reconciler import (
    POD_NODE_INDEX,
    NodeNetworkConfigReconciler,
    NodeNetworkConfigStores,
)
from nodewright.controllers.node_network_config.resources import (
    CLUSTER_SUBNET_STATE,
    FINALIZER,
    NETWORK_INTERFACE_ANNOTATION,
    NODE_NETWORK_CONFIG,
    pod_addresses,
    provider_id_of,
    uses_pod_network,
)
from nodewright.runtime import (
    NODE,
    POD,
    RUNTIME_RULES,
    CacheView,
    ChannelSource,
    Manager,
    PolicyRule,
    PollingSource,
    Predicate,
    ReconcilerPlugin,
    Request,
    field_indexer,
    predicate,
)

__all__ = [
    "CLUSTER_SUBNET_STATE",
    "FINALIZER",
    "NAME",
    "NETWORK_INTERFACE_ANNOTATION",
    "NODE_NETWORK_CONFIG",
    "PLUGIN",
    "RBAC_RULES",
    "ComputeOperations",
    "NetworkOperations",
    "NicLocator",
    "NodeNetworkConfigReconciler",
    "NodeNetworkConfigSettings",
    "install",
    "parse_options",
    "setup",
    "validate_options",
]

NAME = "node-network-config"
"""The reconciler's name in the manager's config."""
CONTROLLER = "nodenetworkconfig"
NODE_IMAGE_RECONCILER = "node-image"
"""The rollout's reconciler: when the config enables it, its new Nodes are sized once paired."""
PENDING_NODE = kind_of(PendingNode)
SCALING_GROUP = kind_of(ScalingGroup)

CNS_NAMESPACE = "kube-system"
RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("", ("nodes",), ("get", "list", "watch")),
    # blockOwnerDeletion on the Node (a controller reference, as CNS requires) needs this where
    # the OwnerReferencesPermissionEnforcement admission plugin runs.
    PolicyRule("", ("nodes/finalizers",), ("update",)),
    PolicyRule("", ("pods",), ("list", "watch")),
    *RUNTIME_RULES,
    PolicyRule(
        "acn.azure.com",
        ("nodenetworkconfigs",),
        ("create", "delete", "get", "list", "patch", "update", "watch"),
        namespace=CNS_NAMESPACE,
    ),
    PolicyRule(
        "acn.azure.com", ("nodenetworkconfigs/status",), ("get", "patch", "update"), namespace=CNS_NAMESPACE
    ),
    PolicyRule("acn.azure.com", ("clustersubnetstates",), ("create", "get"), namespace=CNS_NAMESPACE),
    PolicyRule("acn.azure.com", ("clustersubnetstates/status",), ("update",), namespace=CNS_NAMESPACE),
)
"""NodeNetworkConfigs and ClusterSubnetStates live in one namespace (CNS reads them in
kube-system), so their rules become a Role there; a different ``namespace`` option needs the
generated Role's namespace changed to match (the manager checks at start)."""

Object = dict[str, Any]

DEFAULT_WORKERS = 16
"""Passes at once unless the config says otherwise. A first pass is three ARM reads and a write,
each a round trip of about 200 ms that holds its worker, so 4 workers reached 4 passes a second
at most (1,000 nodes: 4.5 minutes for the first passes alone) while ARM's budget allows about 8
(25 reads and 10 writes a second); 16 leave the budget (the shared token buckets, ``cloud.budget``)
as the bound, not the worker count. Threads waiting on I/O cost memory only."""


def _pod_facts(pod: Object) -> tuple[Any, ...]:
    return (
        (pod.get("spec") or {}).get("nodeName"),
        uses_pod_network(pod),
        tuple(pod_addresses(pod)),
        bool((pod.get("metadata") or {}).get("deletionTimestamp")),
    )


pod_changed: Predicate = predicate(update=lambda old, new: _pod_facts(old) != _pod_facts(new))
"""Pod updates that change a node's demand or the addresses in use."""


def _node_facts(node: Object) -> tuple[str, str | None, str | None]:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return (
        provider_id_of(node),
        annotations.get(INCOMING_PODS_ANNOTATION),
        annotations.get(DONOR_ANNOTATION),
    )


node_changed: Predicate = predicate(update=lambda old, new: _node_facts(old) != _node_facts(new))
"""Node updates that matter: the providerID (a node gets it after joining), the pods announced
as incoming (a heir's pool is sized for them) and the donor a heir was paired with (a heir in the
making waits for it, ``heirs``)."""


def _stores(cache: CacheView, settings: NodeNetworkConfigSettings, rollouts: bool) -> NodeNetworkConfigStores:
    """The informers a pass reads (pods indexed by node; the rollout's records with ``rollouts``)."""
    pods = cache.informer(POD)
    pods.ensure_indexer(POD_NODE_INDEX, field_indexer("spec.nodeName"))
    return NodeNetworkConfigStores(
        nodes=cache.informer(NODE, label_selector=settings.node_selector or None).store,
        node_network_configs=cache.informer(NODE_NETWORK_CONFIG, namespace=settings.namespace).store,
        pods=pods.store,
        pending_nodes=cache.informer(PENDING_NODE).store if rollouts else None,
        scaling_groups=cache.informer(SCALING_GROUP).store if rollouts else None,
    )


def install(
    manager: Manager,
    settings: NodeNetworkConfigSettings,
    network: NetworkOperations,
    compute: ComputeOperations,
    *,
    rollouts: bool = False,
) -> NodeNetworkConfigReconciler:
    """Wire the controller into ``manager`` (side effect: registers it); returns the reconciler.
    When ``network`` can list NICs (``NetworkService`` can), the NIC watcher runs and a node's
    NIC ID is looked up in its scale set's listing before ``compute`` is asked
    (``scope_listings``). With ``rollouts`` (the node-image reconciler runs beside it), the
    rollout's PendingNodes and ScalingGroups are read too: a new Node the rollout created is sized
    once paired (``heirs``)."""
    builder = manager.controller(CONTROLLER)
    namespace = settings.namespace
    stores = _stores(builder.cache, settings, rollouts)  # the shared cache, our own writes laid over
    completions: ChannelSource[Request] = ChannelSource("nic-operations")  # ended NIC writes
    reconciler = NodeNetworkConfigReconciler(
        client=builder.client,
        stores=stores,
        network=network,
        compute=compute,
        events=manager.event_recorder("nodewright-node-network-config"),
        settings=settings,
        notify=completions.notify,
    )
    manager.services.get(IPAM_GAUGES).add(reconciler.metrics)

    def node_network_config_of_node(node: Object) -> list[Request]:
        return [Request(namespace, str(node["metadata"]["name"]))]

    def node_network_config_of_named_node(obj: Object) -> list[Request]:
        """A pod's node, or the node a PendingNode names (both in ``spec.nodeName``)."""
        node = (obj.get("spec") or {}).get("nodeName")
        return [Request(namespace, str(node))] if node else []

    builder = (
        builder.for_(NODE_NETWORK_CONFIG, namespace=namespace)
        .watches(
            NODE,
            node_network_config_of_node,
            predicate=node_changed,
            label_selector=settings.node_selector or None,
        )
        .with_options(max_concurrent_reconciles=DEFAULT_WORKERS)
        .watches_source(completions)
    )
    if settings.computes_demand:
        builder = builder.watches(POD, node_network_config_of_named_node, predicate=pod_changed)
    if rollouts:  # a Join deleted (its node paired, or not needed): the node's first sizing
        builder = builder.watches(PENDING_NODE, node_network_config_of_named_node)
    if isinstance(network, NetworkInterfaceLister):
        watch = NicWatch(reconciler.book, network, settings)
        _with_boot_pools(watch, reconciler, compute, settings)
        builder = builder.watches_source(
            PollingSource("nic-watch", watch.poll, error_delay=settings.nic_list_period_seconds)
        )
    builder.complete(reconciler)
    return reconciler


def _with_boot_pools(
    watch: NicWatch,
    reconciler: NodeNetworkConfigReconciler,
    compute: ComputeOperations,
    settings: NodeNetworkConfigSettings,
) -> None:
    """Boot pools (``boot_pools``), unless turned off or ``compute`` cannot write models: fed by
    the NICs the passes read and the watcher lists, decided on the watcher's thread."""
    if not settings.scale_set_boot_pool or settings.prefix_blocks or not isinstance(compute, BootPoolModels):
        return
    boot_pools = BootPools(
        compute,
        settings.scaler,
        settings.nic_list_period_seconds,
        time.monotonic,
        lambda subnet: _available(reconciler, subnet),
    )
    reconciler.book.on_remember = boot_pools.observe
    watch.after_scale_set_list, watch.after_poll = boot_pools.listed, boot_pools.decide_due


def _available(reconciler: NodeNetworkConfigReconciler, subnet: str) -> int | None:
    """A subnet's free addresses as the reconciler's subnet book last read them (a read when
    due, shared with the passes)."""
    usage = reconciler.subnets.usage(subnet, time.monotonic())
    return usage.available if usage is not None else None


def validate_options(options: Mapping[str, Any]) -> None:
    """Check the options without a cluster (``nodewright check-config``); raises ConfigError."""
    parse_options(options)
    parse_cloud_settings(options.get("cloud"), "options.cloud")


def setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """The registry's entry point: parse the options, reach Azure, wire the controller."""
    settings = parse_options(options)
    cloud = clouds_of(manager).from_options(options)
    rollouts = manager.reconciler_config(NODE_IMAGE_RECONCILER)
    on = rollouts is not None and rollouts.enabled
    install(manager, settings, cloud.network, cloud.compute, rollouts=on)


PLUGIN = ReconcilerPlugin(NAME, setup, validate_options, RBAC_RULES)
"""This reconciler's declared plug-in (the registry and ``make manifests`` read it)."""
