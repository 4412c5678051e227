"""acn.azure.com/v1alpha, wire-compatible with Azure CNS: NodeNetworkConfig.

One NodeNetworkConfig per node (named after the node, usually in kube-system). The node side
(Azure CNS, or our own demand side) writes ``spec``: how many secondary IPs it wants and which of
them it no longer uses. The control plane (our node_network_config reconciler) writes ``status``:
the network container with the IPs it put on the node's NIC and the scaler the node should use.

Field for field as azure-container-networking's ``crd/nodenetworkconfig/api/v1alpha`` types,
including their JSON names (``subcriptionID`` is misspelt there, so it is here) and their
omitempty rules: ``requestedIPCount``, ``assignedIPCount`` and ``version`` are always written,
``scaler`` is always written (a Go struct is never empty to encoding/json), everything else is
left out when zero. Wire values that CNS defines as Go constants are plain strings here, with
the known values as module constants; the CRD enforces the same enums as theirs and no more
(``type`` has no enum upstream, so none here). One bound of ours: ``requestedIPCount`` must be
within 0..255 (a NIC's 256 IP configurations less the primary), so the API server rejects a
count no NIC can serve before any controller sees it.

One addition of ours, optional and ignored by CNS (Go drops unknown fields): ``status.conditions``
in the metav1.Condition shape, where the reconciler explains problems (bad spec, node without
providerID, NIC missing) that CNS's own ``status.status: Error`` cannot name. Imports nothing
internal but the model base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from nodewright.api.base import Model, PrinterColumn, Resource, field
from nodewright.api.meta import Condition

__all__ = [
    "ASSIGNMENT_MODE_DYNAMIC",
    "ASSIGNMENT_MODE_STATIC",
    "MAX_REQUESTED_IP_COUNT",
    "NETWORK_CONTAINER_STATUS_FAILED",
    "NETWORK_CONTAINER_STATUS_INTERNAL_SERVER_ERROR",
    "NETWORK_CONTAINER_STATUS_SUBNET_FULL",
    "NETWORK_CONTAINER_STATUS_SUCCESS",
    "NETWORK_CONTAINER_STATUS_UNAUTHORIZED",
    "NETWORK_CONTAINER_TYPE_OVERLAY",
    "NETWORK_CONTAINER_TYPE_VNET",
    "NETWORK_CONTAINER_TYPE_VNET_BLOCK",
    "RESOURCES",
    "STATUS_ERROR",
    "STATUS_UPDATED",
    "STATUS_UPDATING",
    "AssignmentMode",
    "IPAssignment",
    "NetworkContainer",
    "NetworkContainerStatus",
    "NodeNetworkConfig",
    "NodeNetworkConfigSpec",
    "NodeNetworkConfigStatus",
    "ReconcileStatus",
    "Scaler",
]

ReconcileStatus = Literal["Updating", "Updated", "Error"]
STATUS_UPDATING: ReconcileStatus = "Updating"
STATUS_UPDATED: ReconcileStatus = "Updated"
STATUS_ERROR: ReconcileStatus = "Error"

AssignmentMode = Literal["dynamic", "static"]
ASSIGNMENT_MODE_DYNAMIC: AssignmentMode = "dynamic"
ASSIGNMENT_MODE_STATIC: AssignmentMode = "static"

NETWORK_CONTAINER_TYPE_VNET = "vnet"
NETWORK_CONTAINER_TYPE_VNET_BLOCK = "vnetblock"
NETWORK_CONTAINER_TYPE_OVERLAY = "overlay"

NetworkContainerStatus = Literal[
    "NCUpdateSubnetFullError",
    "NCUpdateInternalServerError",
    "NCUpdateUnauthorizedError",
    "NCUpdateSuccess",
    "NCUpdateFailed",
]
NETWORK_CONTAINER_STATUS_SUBNET_FULL: NetworkContainerStatus = "NCUpdateSubnetFullError"
NETWORK_CONTAINER_STATUS_INTERNAL_SERVER_ERROR: NetworkContainerStatus = "NCUpdateInternalServerError"
NETWORK_CONTAINER_STATUS_UNAUTHORIZED: NetworkContainerStatus = "NCUpdateUnauthorizedError"
NETWORK_CONTAINER_STATUS_SUCCESS: NetworkContainerStatus = "NCUpdateSuccess"
NETWORK_CONTAINER_STATUS_FAILED: NetworkContainerStatus = "NCUpdateFailed"

_INT64 = {"format": "int64"}
MAX_REQUESTED_IP_COUNT = 255
"""A NIC holds 256 IP configurations; one is the node's primary address."""


@dataclass(kw_only=True)
class NodeNetworkConfigSpec(Model):
    """What the node asks of the control plane: how many secondary IPs it wants, and which of
    the IPs it holds it no longer uses and wants released."""

    requested_ip_count: int = field(
        json="requestedIPCount",
        default=0,
        omit_empty=False,
        description="Secondary IPs the node wants: 0 to 255 (a NIC holds 256, one is the primary).",
        schema={**_INT64, "default": 0, "minimum": 0, "maximum": MAX_REQUESTED_IP_COUNT},
    )
    ips_not_in_use: list[str] = field(json="ipsNotInUse", default_factory=list)
    availability_zone: int = field(
        default=0,
        description="The Azure availability zone of the virtual machine the network containers are on.",
    )


@dataclass(kw_only=True)
class Scaler(Model):
    """How the node sizes its pool: batch size, thresholds in percent of a batch, and the most
    IPs a node may hold."""

    batch_size: int = field(default=0, schema=_INT64)
    release_threshold_percent: int = field(default=0, schema=_INT64)
    request_threshold_percent: int = field(default=0, schema=_INT64)
    max_ip_count: int = field(json="maxIPCount", default=0, schema=_INT64)


@dataclass(kw_only=True)
class IPAssignment(Model):
    """One secondary IP of a network container: its name (a UUID chosen by the assigner, the key
    the node uses in ipsNotInUse) and its address."""

    name: str = ""
    ip: str = field(json="ip", default="")


@dataclass(kw_only=True)
class NetworkContainer(Model):
    """A network container: a set of IPs from one subnet and the facts needed to plumb them."""

    id: str = field(json="id", default="")
    assignment_mode: AssignmentMode | None = field(
        default=None,
        description="Whether the container's IPs are handed out one by one (dynamic) or as a block (static).",
        schema={"default": ASSIGNMENT_MODE_DYNAMIC},
    )
    type: str = field(
        default="",
        description="The kind of network this container belongs to: vnet, vnetblock or overlay.",
        schema={"default": NETWORK_CONTAINER_TYPE_VNET},
    )
    primary_ip: str = field(json="primaryIP", default="")
    primary_ipv6: str = field(json="primaryIPV6", default="")
    subnet_name: str = ""
    ip_assignments: list[IPAssignment] = field(json="ipAssignments", default_factory=list)
    default_gateway: str = ""
    default_gateway_v6: str = field(json="defaultGatewayV6", default="")
    mac_address: str = ""
    subnet_address_space: str = ""
    subnet_address_space_v6: str = field(json="subnetAddressSpaceV6", default="")
    version: int = field(default=0, omit_empty=False, schema={**_INT64, "default": 0})
    node_ip: str = field(json="nodeIP", default="")
    subscription_id: str = field(json="subcriptionID", default="")
    resource_group_id: str = field(json="resourceGroupID", default="")
    vnet_id: str = field(json="vnetID", default="")
    subnet_id: str = field(json="subnetID", default="")
    status: NetworkContainerStatus | None = field(
        default=None, description="The outcome of the latest update of this network container."
    )


@dataclass(kw_only=True)
class NodeNetworkConfigStatus(Model):
    """What the control plane gave the node: the network containers with their IPs, how many
    IPs are assigned, and the scaler the node should size its pool with."""

    assigned_ip_count: int = field(json="assignedIPCount", default=0, omit_empty=False, schema={"default": 0})
    scaler: Scaler = field(default_factory=Scaler, omit_empty=False)
    status: ReconcileStatus | None = field(
        default=None, description="Where the control plane is in reconciling this object."
    )
    network_containers: list[NetworkContainer] = field(default_factory=list)
    conditions: list[Condition] = field(
        default_factory=list,
        description="nodewright's addition (CNS ignores it): why the status is what it is.",
        schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


@dataclass(kw_only=True)
class NodeNetworkConfig(Resource):
    """A node's pool of secondary IPs: asked for in spec by the node, provided in status by the
    control plane."""

    API_VERSION: ClassVar[str] = "acn.azure.com/v1alpha"
    KIND: ClassVar[str] = "NodeNetworkConfig"
    PLURAL: ClassVar[str] = "nodenetworkconfigs"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("nnc",)
    NAMESPACED: ClassVar[bool] = True
    STATUS_SUBRESOURCE: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Requested IPs", ".spec.requestedIPCount", type="integer", priority=1),
        PrinterColumn("Availability Zone", ".spec.availabilityZone", priority=1),
        PrinterColumn("Allocated IPs", ".status.assignedIPCount", type="integer"),
        PrinterColumn("Subnet", ".status.networkContainers[*].subnetName", priority=1),
        PrinterColumn("Subnet CIDR", ".status.networkContainers[*].subnetAddressSpace", priority=1),
        PrinterColumn("NC ID", ".status.networkContainers[*].id", priority=1),
        PrinterColumn("NC Mode", ".status.networkContainers[*].assignmentMode"),
        PrinterColumn("NC Type", ".status.networkContainers[*].type", priority=1),
        PrinterColumn("NC Version", ".status.networkContainers[*].version", type="integer"),
    )

    spec: NodeNetworkConfigSpec = field(default_factory=NodeNetworkConfigSpec, omit_empty=False)
    status: NodeNetworkConfigStatus = field(default_factory=NodeNetworkConfigStatus, omit_empty=False)


RESOURCES: tuple[type[Resource], ...] = (NodeNetworkConfig,)
