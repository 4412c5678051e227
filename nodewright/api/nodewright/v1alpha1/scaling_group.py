"""ScalingGroup: one Azure VM scale set (Uniform or Flexible orchestration) whose machines are
nodes of the cluster, the NodeImage it follows, its role, and the bounds the cluster autoscaler
may use.

Constellation's ScalingGroup in our group ``nodewright.io``; ``groupID`` (constellation spells it
``groupId``) is the scale set's ARM resource ID, compared case-insensitively. The ScalingGroup
reconciler sets the scale set's model image to its NodeImage's image and reports it in
``status.imageReference``. Cluster-scoped.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from nodewright.api.base import Model, PrinterColumn, Resource, ValidationError, field
from nodewright.api.meta import Condition
from nodewright.api.nodewright.v1alpha1._validation import child_path, require_match

__all__ = [
    "CONDITION_IMAGE_APPLIED",
    "SCALE_SET_ID_PATTERN",
    "NodeRole",
    "ScalingGroup",
    "ScalingGroupSpec",
    "ScalingGroupStatus",
]

CONDITION_IMAGE_APPLIED = "ImageApplied"
"""True when the scale set's model names the NodeImage's image, so new machines boot it."""

SCALE_SET_ID_PATTERN = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/virtualMachineScaleSets/[^/]+",
    re.IGNORECASE,
)


class NodeRole(enum.Enum):
    """What the nodes of a scaling group do. Control-plane groups are replaced before workers."""

    WORKER = "Worker"
    CONTROL_PLANE = "ControlPlane"


@dataclass(kw_only=True)
class ScalingGroupSpec(Model):
    """Which scale set, which NodeImage, which role, and autoscaler bounds."""

    group_id: str = field(
        json="groupID",
        description="The scale set's ARM resource ID (/subscriptions/.../virtualMachineScaleSets/<name>).",
        schema={"pattern": "(?i)^" + SCALE_SET_ID_PATTERN.pattern + "$"},
    )
    node_image: str = field(
        description="The name of the NodeImage this group follows.", schema={"minLength": 1}
    )
    role: NodeRole = field(
        default=NodeRole.WORKER,
        description="Worker or ControlPlane; control-plane groups are replaced first, one node at a time.",
        schema={"default": "Worker"},
    )
    min: int = field(
        default=0,
        omit_empty=False,
        description="The fewest nodes the cluster autoscaler may leave in the group.",
        schema={"minimum": 0, "default": 0},
    )
    max: int = field(
        default=0,
        omit_empty=False,
        description="The most nodes the cluster autoscaler may create in the group.",
        schema={"minimum": 0, "default": 0},
    )
    autoscaling: bool = field(
        default=False,
        omit_empty=False,
        description="Whether the cluster autoscaler scales this group (never a control-plane group).",
        schema={"default": False},
    )
    autoscaler_group_name: str = field(
        default="", description="The name the cluster autoscaler knows the group by, if it differs."
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "") -> Self:
        spec = super().from_dict(data, path=path)
        require_match(
            child_path(path, "groupID"), spec.group_id, SCALE_SET_ID_PATTERN, "a virtual machine scale set ID"
        )
        if spec.autoscaling and spec.min > spec.max:
            raise ValidationError(
                child_path(path, "max"), f"must be at least min ({spec.min}) when autoscaling, got {spec.max}"
            )
        return spec

    @classmethod
    def openapi_schema(cls) -> dict[str, Any]:
        schema = super().openapi_schema()
        schema["x-kubernetes-validations"] = [
            {
                "rule": "!self.autoscaling || self.min <= self.max",
                "message": "max must be at least min when autoscaling",
                "fieldPath": ".max",
            }
        ]
        return schema


@dataclass(kw_only=True)
class ScalingGroupStatus(Model):
    """The image new machines of the scale set boot, as last read from the cloud."""

    image_reference: str = field(
        default="", description="The image in the scale set's model (the image new nodes get)."
    )
    observed_generation: int = field(default=0, description="The spec generation this status describes.")
    conditions: list[Condition] = field(
        default_factory=list,
        schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


@dataclass(kw_only=True)
class ScalingGroup(Resource):
    """An Azure VM scale set whose machines are cluster nodes, kept on its NodeImage's image."""

    API_VERSION: ClassVar[str] = "nodewright.io/v1alpha1"
    KIND: ClassVar[str] = "ScalingGroup"
    PLURAL: ClassVar[str] = "scalinggroups"
    NAMESPACED: ClassVar[bool] = False
    CATEGORIES: ClassVar[tuple[str, ...]] = ("nodewright",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Role", ".spec.role"),
        PrinterColumn("Node-Image", ".spec.nodeImage", description="The NodeImage followed"),
        PrinterColumn(
            "Image-Applied",
            '.status.conditions[?(@.type=="ImageApplied")].status',
            description="Whether new machines boot the NodeImage's image",
        ),
        PrinterColumn(
            "Reason",
            '.status.conditions[?(@.type=="ImageApplied")].reason',
            priority=1,
        ),
        PrinterColumn("Autoscaling", ".spec.autoscaling", type="boolean"),
        PrinterColumn("Min", ".spec.min", type="integer", priority=1),
        PrinterColumn("Max", ".spec.max", type="integer", priority=1),
        PrinterColumn("Image", ".status.imageReference", priority=1),
        PrinterColumn("Group-ID", ".spec.groupID", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: ScalingGroupSpec
    status: ScalingGroupStatus = field(default_factory=ScalingGroupStatus)
