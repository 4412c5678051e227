"""nodewright.io/v1alpha1: NodeImage, ScalingGroup, PendingNode, AutoscalingStrategy.

The node image rollout's kinds, modelled on constellation's node operator
(update.edgeless.systems/v1alpha1) and all cluster-scoped like theirs. One module per kind, and
``incoming_pods`` and ``heir_marks`` for the annotations the NodeImage reconciler publishes for IPAM;
``RESOURCES`` feeds ``make manifests``. Imports nothing internal beyond the model base.
"""

from nodewright.api.base import Resource
from nodewright.api.nodewright.v1alpha1.autoscaling_strategy import (
    ENABLED_BEFORE_ROLLOUT_ANNOTATION,
    AutoscalingStrategy,
    AutoscalingStrategySpec,
    AutoscalingStrategyStatus,
)
from nodewright.api.nodewright.v1alpha1.heir_marks import (
    DONOR_ANNOTATION,
    SCALE_OUT_ANNOTATION,
    ScaleOutRecord,
)
from nodewright.api.nodewright.v1alpha1.incoming_pods import INCOMING_PODS_ANNOTATION, IncomingPods
from nodewright.api.nodewright.v1alpha1.node_image import (
    CONDITION_DEGRADED,
    CONDITION_PROGRESSING,
    CONDITION_UP_TO_DATE,
    CONFLICT,
    QUARANTINE_LABEL,
    NodeImage,
    NodeImageSpec,
    NodeImageStatus,
    RolloutState,
    UndrainableNodeBehavior,
)
from nodewright.api.nodewright.v1alpha1.pending_node import (
    CloudNodeState,
    PendingNode,
    PendingNodeGoal,
    PendingNodeSpec,
    PendingNodeStatus,
)
from nodewright.api.nodewright.v1alpha1.scaling_group import (
    CONDITION_IMAGE_APPLIED,
    RESOURCE_GROUP_ID_PATTERN,
    SCALE_SET_ID_PATTERN,
    NodeRole,
    ScalingGroup,
    ScalingGroupSpec,
    ScalingGroupStatus,
    StandaloneMachines,
)

RESOURCES: tuple[type[Resource], ...] = (NodeImage, ScalingGroup, PendingNode, AutoscalingStrategy)

__all__ = [
    "CONDITION_DEGRADED",
    "CONDITION_IMAGE_APPLIED",
    "CONDITION_PROGRESSING",
    "CONDITION_UP_TO_DATE",
    "CONFLICT",
    "DONOR_ANNOTATION",
    "ENABLED_BEFORE_ROLLOUT_ANNOTATION",
    "INCOMING_PODS_ANNOTATION",
    "QUARANTINE_LABEL",
    "RESOURCES",
    "RESOURCE_GROUP_ID_PATTERN",
    "SCALE_OUT_ANNOTATION",
    "SCALE_SET_ID_PATTERN",
    "AutoscalingStrategy",
    "AutoscalingStrategySpec",
    "AutoscalingStrategyStatus",
    "CloudNodeState",
    "IncomingPods",
    "NodeImage",
    "NodeImageSpec",
    "NodeImageStatus",
    "NodeRole",
    "PendingNode",
    "PendingNodeGoal",
    "PendingNodeSpec",
    "PendingNodeStatus",
    "RolloutState",
    "ScaleOutRecord",
    "ScalingGroup",
    "ScalingGroupSpec",
    "ScalingGroupStatus",
    "StandaloneMachines",
    "UndrainableNodeBehavior",
]
