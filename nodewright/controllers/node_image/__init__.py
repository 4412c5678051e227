"""node_image: replacing nodes whose image is outdated, on Azure VM scale sets (Uniform
instances, and Flexible members, which are VMs) and on groups of standalone VMs (``standalone``).

The reconciler named ``node-image`` in the manager's config wires three controllers:
``nodeimage`` (``NodeImageReconciler``: the rollout), ``scalinggroup``
(``ScalingGroupReconciler``: the scale set's model image) and ``pendingnode``
(``PendingNodeReconciler``: machines joining and leaving). ``options`` holds the strict parsing
of the reconciler's options; ``resources`` the CRD kinds and the helpers the three share;
``collaborators`` what each is built with. ``setup(manager, options)`` is what the registry calls;
``install`` is the same wiring with the cloud, checkpoint and clock given (tests use it);
``validate_options`` checks a config without a cluster. Module contract of a built-in
reconciler: ``NAME``, ``setup``, ``validate_options``, ``RBAC_RULES``.

The pure decisions (what to do, never doing it; no I/O, no clock: time comes in as ``now``) live
one concern a module: ``grouping``, ``pairing``, ``scale_out``, ``draining``,
``pending_node_decisions``, ``autoscaling_decisions``, ``conditions``. The algorithm follows
constellation's node operator (facts in shared/REFERENCE.md) and closes its gaps: nodes whose
scaling-group or image annotation is not written yet get their own bucket
(``awaiting_annotation``) instead of being counted as heirs or up to date; the number of extra
nodes is ``NodeImage.spec.maxSurge`` instead of a fixed 1; draining is planned here (Eviction
API, PodDisruptionBudgets, DaemonSet and mirror pods skipped, a timeout after which the drain is
reported stuck) instead of by a separate maintenance operator; autoscaling is put back to the
value it had before the rollout, not forced on; a join that failed at the cloud gives up at
once, and a leave that misses its deadline has its deletion requested again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nodewright.controllers.cloud_access import clouds_of, parse_cloud_settings
from nodewright.controllers.node_image import node_image, pending_node, scaling_group
from nodewright.controllers.node_image.collaborators import Collaborators
from nodewright.controllers.node_image.node_image import NodeImageCloud, NodeImageReconciler, NodeImageStores
from nodewright.controllers.node_image.options import NodeImageSettings, parse_options
from nodewright.controllers.node_image.pending_node import PendingNodeCloud, PendingNodeReconciler
from nodewright.controllers.node_image.pools import (
    ASSIGNED_NODE_INDEX,
    ASSIGNED_TARGET_INDEX,
    GROUP_ID_INDEX,
    POD_CONTROLLER_INDEX,
    POD_NODE_INDEX,
    POOL_INDEX,
    assigned_target_keys,
    node_images_of_drained_pod,
    node_images_of_node,
    node_pool_keys,
    pod_controller_keys,
    scaling_group_id_keys,
)
from nodewright.controllers.node_image.resources import (
    AUTOSCALING_STRATEGY,
    AZURE_ASSIGNED_IDENTITY,
    NODE_IMAGE,
    NODE_NETWORK_CONFIG,
    PENDING_NODE,
    SCALING_GROUP,
    Checkpoint,
    Clock,
    no_checkpoint,
    utc_now,
)
from nodewright.controllers.node_image.scaling_group import ScalingGroupCloud, ScalingGroupReconciler
from nodewright.controllers.node_image.standalone import StandaloneCloud
from nodewright.runtime import (
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    Manager,
    PolicyRule,
    Predicate,
    ReconcilerPlugin,
    Request,
    Store,
    condition_is_true,
    field_indexer,
    generation_changed,
    merge_rules,
    predicate,
    request_for,
)

__all__ = [
    "NAME",
    "PLUGIN",
    "RBAC_RULES",
    "NodeImageCloud",
    "NodeImageReconciler",
    "NodeImageSettings",
    "NodeRolloutCloud",
    "PendingNodeReconciler",
    "ScalingGroupReconciler",
    "install",
    "parse_options",
    "setup",
    "validate_options",
]

NAME = "node-image"
"""The reconciler's name in the manager's config."""

RBAC_RULES: tuple[PolicyRule, ...] = tuple(
    merge_rules([*node_image.RBAC_RULES, *scaling_group.RBAC_RULES, *pending_node.RBAC_RULES])
)


class NodeRolloutCloud(NodeImageCloud, ScalingGroupCloud, PendingNodeCloud, Protocol):
    """Every cloud operation the three reconcilers use (``ComputeService`` has them all)."""


Object = dict[str, Any]


def _ready(obj: Object) -> bool:
    return condition_is_true(obj)


def _condition_facts(obj: Object) -> list[tuple[Any, ...]]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conditions]


def _node_facts(obj: Object) -> tuple[Any, ...]:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return (
        _ready(obj),
        metadata.get("annotations"),
        metadata.get("labels"),
        spec.get("unschedulable"),
        spec.get("providerID"),
    )


node_changed: Predicate = predicate(update=lambda old, new: _node_facts(old) != _node_facts(new))
"""Node updates that matter to a rollout: Ready, annotations, labels, cordon, providerID."""
pod_deleted: Predicate = predicate(create=lambda _: False, update=lambda _old, _new: False)
"""Pod deletions only (a drained node's last pod gone lets its hand-over run at once)."""
node_presence_or_ready_changed: Predicate = predicate(update=lambda old, new: _ready(old) != _ready(new))
scaling_group_changed: Predicate = predicate(
    update=lambda old, new: (
        (old.get("metadata") or {}).get("generation") != (new.get("metadata") or {}).get("generation")
        or (old.get("status") or {}).get("imageReference") != (new.get("status") or {}).get("imageReference")
        or _condition_facts(old) != _condition_facts(new)
    )
)
node_image_target_changed: Predicate = predicate(
    update=lambda old, new: (
        (old.get("metadata") or {}).get("generation") != (new.get("metadata") or {}).get("generation")
        or (old.get("status") or {}).get("rolloutState") != (new.get("status") or {}).get("rolloutState")
    )
)
"""NodeImage updates that change the image its scale sets' models should name (a rollback)."""
autoscaling_changed: Predicate = predicate(
    update=lambda old, new: (
        (old.get("spec"), (old.get("status") or {}).get("enabled"))
        != (new.get("spec"), (new.get("status") or {}).get("enabled"))
    )
)


def _sharing_group_id(store: Store, obj: Object) -> list[Object]:
    """The ScalingGroups in ``store`` naming the scale set ``obj`` names (itself included when
    cached): a ScalingGroup created or deleted there may move the claim (``targeting``)."""
    return [group for key in scaling_group_id_keys(obj) for group in store.by_index(GROUP_ID_INDEX, key)]


def _stores(manager: Manager, settings: NodeImageSettings) -> NodeImageStores:
    """The informers the three reconcilers read (the NodeNetworkConfig and AzureAssignedIdentity
    ones only when the heir IP-pool and identity gates are on)."""
    cache = manager.cache
    namespace = settings.node_network_config_namespace
    nodes = cache.informer(NODE, label_selector=settings.node_label_selector)
    nodes.ensure_indexer(POOL_INDEX, node_pool_keys)
    scaling_groups = cache.informer(SCALING_GROUP)
    scaling_groups.ensure_indexer(GROUP_ID_INDEX, scaling_group_id_keys)
    pods = cache.informer(POD)  # shared with IPAM's and identity's when they run
    pods.ensure_indexer(POD_NODE_INDEX, field_indexer("spec.nodeName"))
    pods.ensure_indexer(POD_CONTROLLER_INDEX, pod_controller_keys)
    return NodeImageStores(
        node_images=cache.informer(NODE_IMAGE).store,
        nodes=nodes.store,
        pending_nodes=cache.informer(PENDING_NODE).store,
        scaling_groups=scaling_groups.store,
        autoscaling_strategies=cache.informer(AUTOSCALING_STRATEGY).store,
        pod_disruption_budgets=cache.informer(POD_DISRUPTION_BUDGET).store,
        pods=pods.store,
        node_network_configs=cache.informer(NODE_NETWORK_CONFIG, namespace=namespace).store
        if namespace
        else None,
        assigned_identities=_assigned_identities(manager) if settings.heir_identity_gate else None,
    )


def _assigned_identities(manager: Manager) -> Store:
    """The AzureAssignedIdentities, indexed by node and by target (the heir identity gate's reads)."""
    informer = manager.cache.informer(AZURE_ASSIGNED_IDENTITY)
    informer.ensure_indexer(ASSIGNED_NODE_INDEX, field_indexer("spec.nodename"))
    informer.ensure_indexer(ASSIGNED_TARGET_INDEX, assigned_target_keys)
    return informer.store


@dataclass(frozen=True)
class _Wiring:
    """What the three controllers are built from: the manager, the informers' stores, and the
    collaborators every reconciler gets (``install``'s arguments)."""

    manager: Manager
    settings: NodeImageSettings
    stores: NodeImageStores
    collaborators: Collaborators[NodeRolloutCloud]


def install(
    manager: Manager,
    settings: NodeImageSettings,
    cloud: NodeRolloutCloud,
    standalone: StandaloneCloud,
    *,
    checkpoint: Checkpoint = no_checkpoint,
    clock: Clock = utc_now,
) -> None:
    """Wire the three controllers into ``manager`` (side effect: registers them); ``standalone``
    serves the groups of standalone VMs."""
    events = manager.event_recorder("nodewright-node-image")
    collaborators = Collaborators(
        manager.client, cloud, standalone, events, settings, manager.metrics, checkpoint, clock
    )
    wiring = _Wiring(manager, settings, _stores(manager, settings), collaborators)
    _wire_rollouts(wiring)
    _wire_scaling_groups(wiring)
    _wire_pending_nodes(wiring)


def _wire_rollouts(wiring: _Wiring) -> None:
    """The ``nodeimage`` controller: NodeImages, their PendingNodes, and what a rollout watches."""
    stores = wiring.stores

    def all_node_images(_: Object) -> list[Request]:
        names: list[str] = stores.node_images.keys()
        return [Request("", name) for name in names]

    def node_images_sharing_scale_set(obj: Object) -> list[Request]:
        """Its NodeImage, and those of the other ScalingGroups naming its scale set."""
        names = {
            (g.get("spec") or {}).get("nodeImage")
            for g in [obj, *_sharing_group_id(stores.scaling_groups, obj)]
        }
        return [Request("", str(name)) for name in sorted(n for n in names if n)]

    rollout = NodeImageReconciler(wiring.collaborators, stores=stores)

    def node_images_of_its_pool(obj: Object) -> list[Request]:
        """The NodeImages claiming the Node's scale set, not every NodeImage (``pools``)."""
        return node_images_of_node(obj, stores.scaling_groups, stores.node_images, rollout.known_standalone)

    def node_images_draining(obj: Object) -> list[Request]:
        """The NodeImage draining the deleted pod's node, if one is (``pools``)."""
        return node_images_of_drained_pod(obj, stores.nodes, stores.scaling_groups)

    (
        wiring.manager.controller("nodeimage")
        .for_(NODE_IMAGE, predicate=generation_changed)
        .owns(PENDING_NODE, predicate=generation_changed)
        .watches(
            NODE,
            node_images_of_its_pool,
            predicate=node_changed,
            label_selector=wiring.settings.node_label_selector,
        )
        .watches(POD, node_images_draining, predicate=pod_deleted)
        .watches(SCALING_GROUP, node_images_sharing_scale_set, predicate=scaling_group_changed)
        .watches(AUTOSCALING_STRATEGY, all_node_images, predicate=autoscaling_changed)
        .watches_source(rollout.scale_out_operations)  # a scale-out's operation ended
        .complete(rollout)
    )


def _wire_scaling_groups(wiring: _Wiring) -> None:
    """The ``scalinggroup`` controller: ScalingGroups, and again when their NodeImage's target moves."""
    stores = wiring.stores

    def scaling_groups_of_node_image(obj: Object) -> list[Request]:
        name = (obj.get("metadata") or {}).get("name")
        return [
            request_for(group)
            for group in stores.scaling_groups.list()
            if (group.get("spec") or {}).get("nodeImage") == name
        ]

    def others_sharing_scale_set(obj: Object) -> list[Request]:
        name = (obj.get("metadata") or {}).get("name")
        return [
            request_for(group)
            for group in _sharing_group_id(stores.scaling_groups, obj)
            if (group.get("metadata") or {}).get("name") != name
        ]

    images = ScalingGroupReconciler(
        wiring.collaborators, scaling_groups=stores.scaling_groups, node_images=stores.node_images
    )
    (
        wiring.manager.controller("scalinggroup")
        .for_(SCALING_GROUP, predicate=generation_changed)
        .watches(NODE_IMAGE, scaling_groups_of_node_image, predicate=node_image_target_changed)
        .watches(SCALING_GROUP, others_sharing_scale_set, predicate=generation_changed)
        .complete(images)
    )


def _wire_pending_nodes(wiring: _Wiring) -> None:
    """The ``pendingnode`` controller: PendingNodes, and again when their Node comes or turns Ready."""

    def pending_node_of_node(obj: Object) -> list[Request]:
        return [Request("", str((obj.get("metadata") or {}).get("name", "")))]

    machines = PendingNodeReconciler(
        wiring.collaborators, pending_nodes=wiring.stores.pending_nodes, nodes=wiring.stores.nodes
    )
    (
        wiring.manager.controller("pendingnode")
        .for_(PENDING_NODE, predicate=generation_changed)
        .watches(
            NODE,
            pending_node_of_node,
            predicate=node_presence_or_ready_changed,
            label_selector=wiring.settings.node_label_selector,
        )
        .with_options(max_concurrent_reconciles=wiring.settings.pending_node_workers)
        .complete(machines)
    )


def validate_options(options: Mapping[str, Any]) -> None:
    """Check the options without a cluster (``nodewright check-config``); raises ConfigError."""
    parse_options(options)
    parse_cloud_settings(options.get("cloud"), "options.cloud")


def setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """The registry's entry point: parse ``options`` strictly, reach Azure through the manager's
    Cloud for its ``cloud`` block, and ``install``."""
    settings = parse_options(options)
    cloud = clouds_of(manager).from_options(options)
    install(manager, settings, cloud.compute, cloud.standalone)


PLUGIN = ReconcilerPlugin(NAME, setup, validate_options, RBAC_RULES)
"""This reconciler's declared plug-in (the registry and ``make manifests`` read it)."""
