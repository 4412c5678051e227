"""Pure decisions of the node image rollout: what to do, never doing it.

The NodeImage, ScalingGroup and PendingNode reconcilers in this package read the cluster and the
cloud, call these functions, and write what they return. Nothing here does I/O or reads a clock:
time comes in as ``now``. The algorithm follows constellation's node operator (facts in
shared/REFERENCE.md) and closes its gaps:

- nodes whose scaling-group or image annotation is not written yet get their own bucket
  (``awaiting_annotation``) instead of being counted as heirs or up to date;
- the number of extra nodes is ``NodeImage.spec.maxSurge`` instead of a fixed 1;
- draining is planned here (Eviction API, PodDisruptionBudgets, DaemonSet and mirror pods
  skipped, a timeout after which the drain is reported stuck) instead of by a separate
  maintenance operator;
- autoscaling is put back to the value it had before the rollout, not forced on;
- a join that failed at the cloud gives up at once, and a leave that misses its deadline has its
  deletion requested again.

This module gathers them for the reconcilers; each concern lives in its own module:
``grouping``, ``pairing``, ``scale_out``, ``draining``, ``pending_node_decisions``,
``autoscaling_decisions``, ``conditions``. Neighbours: ``nodewright.api.nodewright.v1alpha1``
(the CRD models read and written) and ``nodewright.cloud.models``
(``ImageReference`` parsing and the cloud's ``NodeState``).
"""

from __future__ import annotations

from nodewright.controllers.node_image.autoscaling_decisions import (
    AutoscalingChange,
    decide_autoscaling,
)
from nodewright.controllers.node_image.conditions import (
    ConditionState,
    node_image_status,
    rollout_conditions,
)
from nodewright.controllers.node_image.draining import (
    DrainPlan,
    PodKey,
    SkipReason,
    plan_drain,
    selector_matches,
)
from nodewright.controllers.node_image.grouping import (
    CONTROL_PLANE_LABEL,
    CONTROL_PLANE_SURGE,
    DONOR_ANNOTATION,
    DRAIN_STARTED_ANNOTATION,
    HEIR_ANNOTATION,
    MIRROR_POD_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    OBSOLETE_ANNOTATION,
    RESERVED_LABEL_PATTERN,
    SCALING_GROUP_ANNOTATION,
    ClusterNode,
    InvalidImageError,
    Mint,
    NodeGroups,
    RolloutTimeouts,
    extra_nodes,
    group_nodes,
    new_node_budget,
    parse_desired_image,
    rollout_in_progress,
    same_image,
    settled_joins,
)
from nodewright.controllers.node_image.pairing import (
    PairingPlan,
    ReplacementPair,
    ReplacementStep,
    is_reserved_label,
    labels_to_copy,
    nodes_to_restore,
    pair_nodes,
    removal_step,
    replacement_step,
)
from nodewright.controllers.node_image.pending_node_decisions import (
    PendingNodeAction,
    PendingNodeDecision,
    cloud_state_of,
    decide_pending_node,
)
from nodewright.controllers.node_image.scale_out import (
    BLOCKING_PROBLEMS,
    ScaleOut,
    ScaleOutBlocker,
    ScaleOutPlan,
    plan_scale_out,
)

__all__ = [
    "BLOCKING_PROBLEMS",
    "CONTROL_PLANE_LABEL",
    "CONTROL_PLANE_SURGE",
    "DONOR_ANNOTATION",
    "DRAIN_STARTED_ANNOTATION",
    "HEIR_ANNOTATION",
    "MIRROR_POD_ANNOTATION",
    "NODE_IMAGE_ANNOTATION",
    "OBSOLETE_ANNOTATION",
    "RESERVED_LABEL_PATTERN",
    "SCALING_GROUP_ANNOTATION",
    "AutoscalingChange",
    "ClusterNode",
    "ConditionState",
    "DrainPlan",
    "InvalidImageError",
    "Mint",
    "NodeGroups",
    "PairingPlan",
    "PendingNodeAction",
    "PendingNodeDecision",
    "PodKey",
    "ReplacementPair",
    "ReplacementStep",
    "RolloutTimeouts",
    "ScaleOut",
    "ScaleOutBlocker",
    "ScaleOutPlan",
    "SkipReason",
    "cloud_state_of",
    "decide_autoscaling",
    "decide_pending_node",
    "extra_nodes",
    "group_nodes",
    "is_reserved_label",
    "labels_to_copy",
    "new_node_budget",
    "node_image_status",
    "nodes_to_restore",
    "pair_nodes",
    "parse_desired_image",
    "plan_drain",
    "plan_scale_out",
    "removal_step",
    "replacement_step",
    "rollout_conditions",
    "rollout_in_progress",
    "same_image",
    "selector_matches",
    "settled_joins",
]
