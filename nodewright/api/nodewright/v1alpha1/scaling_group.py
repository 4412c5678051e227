"""ScalingGroup: one Azure VM scale set (Uniform or Flexible orchestration), or the standalone
VMs of one resource group, whose machines are nodes of the cluster, the NodeImage it follows, its
role, and the bounds the cluster autoscaler may use.

Constellation's ScalingGroup in our group ``nodewright.io``; ``groupID`` (constellation spells it
``groupId``) is the scale set's ARM resource ID, or a resource group's ID for a group of standalone
VMs (which then needs ``virtualMachines``: the model its new VMs are built from), compared
case-insensitively. The ScalingGroup reconciler sets the scale set's model image to its
NodeImage's image (a standalone group has no model at the cloud: the image is recorded in the
status) and reports it in ``status.imageReference``. Cluster-scoped.
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
    "RESOURCE_GROUP_ID_PATTERN",
    "SCALE_SET_ID_PATTERN",
    "NodeRole",
    "ScalingGroup",
    "ScalingGroupSpec",
    "ScalingGroupStatus",
    "StandaloneMachines",
]

CONDITION_IMAGE_APPLIED = "ImageApplied"
"""True when the scale set's model names the NodeImage's image, so new machines boot it."""

SCALE_SET_ID_PATTERN = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/virtualMachineScaleSets/[^/]+",
    re.IGNORECASE,
)

RESOURCE_GROUP_ID_PATTERN = re.compile(r"/subscriptions/[^/]+/resourceGroups/[^/]+", re.IGNORECASE)
"""A resource group's ARM ID: the groupID of a ScalingGroup of standalone VMs."""

SUBNET_ID_PATTERN = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+",
    re.IGNORECASE,
)
_CEL_RESOURCE_GROUP = "'(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+$'"


class NodeRole(enum.Enum):
    """What the nodes of a scaling group do. Control-plane groups are replaced before workers."""

    WORKER = "Worker"
    CONTROL_PLANE = "ControlPlane"


@dataclass(kw_only=True)
class StandaloneMachines(Model):
    """How new standalone VMs of the group are built (an AKS agent pool profile's equivalent):
    size, subnet, name prefix, admin user and SSH key, tags. The image is the NodeImage's."""

    vm_size: str = field(json="vmSize", description="The VM size of new machines.", schema={"minLength": 1})
    subnet_id: str = field(
        json="subnetID",
        description="The subnet new machines' NICs are placed in (ARM ID).",
        schema={"pattern": "(?i)^" + SUBNET_ID_PATTERN.pattern + "$"},
    )
    name_prefix: str = field(
        description="New VMs are named <namePrefix><6 hex digits>; lowercase letters, digits and dashes.",
        schema={"pattern": "^[a-z][a-z0-9-]{0,50}$"},
    )
    admin_username: str = field(
        default="azureuser",
        description="The Linux admin user of new machines.",
        schema={"default": "azureuser", "minLength": 1},
    )
    ssh_public_key: str = field(
        description=(
            "The SSH public key authorised for the admin user (password login is off: a Linux VM needs "
            "one or the other, and a password could not be kept out of the spec)."
        ),
        schema={"minLength": 1},
    )
    tags: dict[str, str] = field(default_factory=dict, description="Tags put on new machines.")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "") -> Self:
        machines = super().from_dict(data, path=path)
        require_match(child_path(path, "subnetID"), machines.subnet_id, SUBNET_ID_PATTERN, "a subnet ID")
        require_match(
            child_path(path, "namePrefix"),
            machines.name_prefix,
            re.compile(r"[a-z][a-z0-9-]{0,50}"),
            "lowercase letters, digits and dashes, starting with a letter",
        )
        return machines


@dataclass(kw_only=True)
class ScalingGroupSpec(Model):
    """Which scale set (or resource group of standalone VMs), which NodeImage, which role, and
    autoscaler bounds."""

    group_id: str = field(
        json="groupID",
        description=(
            "The scale set's ARM resource ID (/subscriptions/.../virtualMachineScaleSets/<name>), or the "
            "ID of the resource group whose standalone VMs form the group (/subscriptions/.../resourceGroups/"
            "<name>, with virtualMachines)."
        ),
        schema={
            "pattern": "(?i)^("
            + SCALE_SET_ID_PATTERN.pattern
            + "|"
            + RESOURCE_GROUP_ID_PATTERN.pattern
            + ")$"
        },
    )
    virtual_machines: StandaloneMachines | None = field(
        default=None,
        description=(
            "For a group of standalone VMs (groupID names a resource group): how new VMs are built. "
            "Required then, not allowed for a scale set."
        ),
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
        if spec.standalone:
            if spec.virtual_machines is None:
                raise ValidationError(
                    child_path(path, "virtualMachines"), "is required when groupID names a resource group"
                )
        else:
            require_match(
                child_path(path, "groupID"),
                spec.group_id,
                SCALE_SET_ID_PATTERN,
                "a virtual machine scale set ID or a resource group ID",
            )
            if spec.virtual_machines is not None:
                raise ValidationError(
                    child_path(path, "virtualMachines"), "is only for a group of standalone VMs"
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
            },
            {
                "rule": f"self.groupID.matches({_CEL_RESOURCE_GROUP}) == has(self.virtualMachines)",
                "message": "virtualMachines is required when groupID names a resource group, and only then",
                "fieldPath": ".virtualMachines",
            },
        ]
        return schema

    @property
    def standalone(self) -> bool:
        """Whether the group is the standalone VMs of a resource group (not a scale set)."""
        return RESOURCE_GROUP_ID_PATTERN.fullmatch(self.group_id) is not None


@dataclass(kw_only=True)
class ScalingGroupStatus(Model):
    """The image new machines of the group boot: the scale set's model's, as last read from the
    cloud, or the one a standalone group builds new VMs from."""

    image_reference: str = field(
        default="",
        description="The image in the scale set's model, or a standalone group's (the image new nodes get).",
    )
    observed_generation: int = field(default=0, description="The spec generation this status describes.")
    conditions: list[Condition] = field(
        default_factory=list,
        schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


@dataclass(kw_only=True)
class ScalingGroup(Resource):
    """An Azure VM scale set (or a resource group's standalone VMs) whose machines are cluster
    nodes, kept on its NodeImage's image."""

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
