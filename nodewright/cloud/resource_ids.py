"""ARM resource IDs and Kubernetes node providerIDs, parsed case-insensitively.

Owns the one place where strings such as
``/subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<vm>`` become
typed, frozen values. The resource group always comes from the ID itself, never from
configuration (aad-pod-identity's 404s came from assuming it). Pure: no I/O. Its neighbours are
``compute``, ``network`` and ``msi``, which take these values as arguments.

Provider IDs name either a standalone virtual machine (also how flexible-orchestration scale-set
machines appear) or an instance of a uniform-orchestration scale set
(``.../virtualMachineScaleSets/<vmss>/virtualMachines/<instance id>``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

PROVIDER_ID_PREFIX = "azure://"

USER_ASSIGNED_IDENTITY_PATTERN = re.compile(
    r"(?i)/subscriptions/.+/resourcegroups/.+/providers/Microsoft.ManagedIdentity/userAssignedIdentities/.+"
)


class InvalidResourceIdError(ValueError):
    """A string that is not the ARM resource ID (or providerID) the caller expected."""


@dataclass(frozen=True)
class ResourceId:
    """A parsed ARM resource ID: the top-level resource and any child segments.

    ``children`` holds (type, name) pairs below the top-level resource, for example
    ``(("virtualMachines", "3"), ("networkInterfaces", "nic0"))`` for a scale-set instance NIC.
    The original spelling is kept; comparisons use ``key``.
    """

    subscription_id: str
    resource_group: str
    provider: str
    resource_type: str
    name: str
    children: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        path = (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/{self.provider}/{self.resource_type}/{self.name}"
        )
        for child_type, child_name in self.children:
            path += f"/{child_type}/{child_name}"
        return path

    @property
    def key(self) -> str:
        """The ID lowercased: ARM IDs compare case-insensitively."""
        return str(self).lower()

    def is_type(self, provider: str, *types: str) -> bool:
        """Whether this ID is ``provider/types[0]/.../types[-1]``, compared case-insensitively."""
        own = (self.resource_type, *(child_type for child_type, _ in self.children))
        return self.provider.lower() == provider.lower() and tuple(t.lower() for t in own) == tuple(
            t.lower() for t in types
        )


def parse_resource_id(value: str) -> ResourceId:
    """Parse an ARM resource ID (case-insensitive keywords; names keep their spelling)."""
    segments = [segment for segment in value.strip().split("/") if segment]
    if (
        len(segments) < 8
        or len(segments) % 2 != 0
        or segments[0].lower() != "subscriptions"
        or segments[2].lower() != "resourcegroups"
        or segments[4].lower() != "providers"
    ):
        raise InvalidResourceIdError(f"not an ARM resource ID: {value!r}")
    return ResourceId(
        subscription_id=segments[1],
        resource_group=segments[3],
        provider=segments[5],
        resource_type=segments[6],
        name=segments[7],
        children=tuple((segments[index], segments[index + 1]) for index in range(8, len(segments) - 1, 2)),
    )


@dataclass(frozen=True)
class VirtualMachineId:
    """A standalone virtual machine (or a flexible-orchestration scale-set machine)."""

    subscription_id: str
    resource_group: str
    name: str

    def __str__(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachines/{self.name}"
        )

    @property
    def key(self) -> str:
        return str(self).lower()

    @property
    def provider_id(self) -> str:
        return PROVIDER_ID_PREFIX + str(self)


@dataclass(frozen=True)
class ResourceGroupId:
    """A resource group (the group of a ScalingGroup of standalone VMs)."""

    subscription_id: str
    resource_group: str

    def __str__(self) -> str:
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"

    @property
    def key(self) -> str:
        return str(self).lower()

    def virtual_machine(self, name: str) -> VirtualMachineId:
        return VirtualMachineId(self.subscription_id, self.resource_group, name)


@dataclass(frozen=True)
class ScaleSetId:
    """A virtual machine scale set."""

    subscription_id: str
    resource_group: str
    name: str

    def __str__(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.name}"
        )

    @property
    def key(self) -> str:
        return str(self).lower()

    def instance(self, instance_id: str) -> ScaleSetInstanceId:
        return ScaleSetInstanceId(self.subscription_id, self.resource_group, self.name, instance_id)


@dataclass(frozen=True)
class ScaleSetInstanceId:
    """One instance of a uniform-orchestration virtual machine scale set."""

    subscription_id: str
    resource_group: str
    scale_set_name: str
    instance_id: str

    def __str__(self) -> str:
        return f"{self.scale_set}/virtualMachines/{self.instance_id}"

    @property
    def key(self) -> str:
        return str(self).lower()

    @property
    def scale_set(self) -> ScaleSetId:
        return ScaleSetId(self.subscription_id, self.resource_group, self.scale_set_name)

    @property
    def provider_id(self) -> str:
        return PROVIDER_ID_PREFIX + str(self)


MachineId = VirtualMachineId | ScaleSetInstanceId


@dataclass(frozen=True)
class NetworkInterfaceId:
    """A NIC: standalone (``Microsoft.Network/networkInterfaces/<nic>``) or the read-only view of a
    uniform scale-set instance's NIC (``.../virtualMachines/<i>/networkInterfaces/<nic>``)."""

    subscription_id: str
    resource_group: str
    name: str
    scale_set_instance: ScaleSetInstanceId | None = None

    def __str__(self) -> str:
        if self.scale_set_instance is not None:
            return f"{self.scale_set_instance}/networkInterfaces/{self.name}"
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Network/networkInterfaces/{self.name}"
        )

    @property
    def key(self) -> str:
        return str(self).lower()


@dataclass(frozen=True)
class SubnetId:
    """A subnet of a virtual network."""

    subscription_id: str
    resource_group: str
    virtual_network_name: str
    name: str

    def __str__(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Network/virtualNetworks/{self.virtual_network_name}/subnets/{self.name}"
        )

    @property
    def key(self) -> str:
        return str(self).lower()


@dataclass(frozen=True)
class UserAssignedIdentityId:
    """A user-assigned managed identity. ``key`` (lowercased) is how identity maps are keyed."""

    subscription_id: str
    resource_group: str
    name: str

    def __str__(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{self.name}"
        )

    @property
    def key(self) -> str:
        return str(self).lower()


def parse_machine_id(value: str) -> MachineId:
    """Parse a VM ID or a uniform scale-set instance ID (no ``azure://`` prefix)."""
    resource = parse_resource_id(value)
    if resource.is_type("Microsoft.Compute", "virtualMachines"):
        return VirtualMachineId(resource.subscription_id, resource.resource_group, resource.name)
    if resource.is_type("Microsoft.Compute", "virtualMachineScaleSets", "virtualMachines"):
        return ScaleSetInstanceId(
            resource.subscription_id, resource.resource_group, resource.name, resource.children[0][1]
        )
    raise InvalidResourceIdError(f"not a virtual machine or scale-set instance ID: {value!r}")


def parse_provider_id(value: str) -> MachineId:
    """Parse a node's ``spec.providerID`` (``azure:///subscriptions/...``), case-insensitively."""
    if not value.lower().startswith(PROVIDER_ID_PREFIX):
        raise InvalidResourceIdError(f"not an Azure providerID: {value!r}")
    return parse_machine_id(value[len(PROVIDER_ID_PREFIX) :])


def parse_resource_group_id(value: str) -> ResourceGroupId:
    """Parse a resource group ID (``/subscriptions/<s>/resourceGroups/<rg>``), case-insensitively."""
    segments = [segment for segment in value.strip().split("/") if segment]
    if (
        len(segments) != 4
        or segments[0].lower() != "subscriptions"
        or segments[2].lower() != "resourcegroups"
    ):
        raise InvalidResourceIdError(f"not a resource group ID: {value!r}")
    return ResourceGroupId(segments[1], segments[3])


def parse_scale_set_id(value: str) -> ScaleSetId:
    """Parse a virtual machine scale set ID."""
    resource = parse_resource_id(value)
    if not resource.is_type("Microsoft.Compute", "virtualMachineScaleSets"):
        raise InvalidResourceIdError(f"not a virtual machine scale set ID: {value!r}")
    return ScaleSetId(resource.subscription_id, resource.resource_group, resource.name)


def parse_network_interface_id(value: str) -> NetworkInterfaceId:
    """Parse a NIC ID, standalone or the scale-set instance view."""
    resource = parse_resource_id(value)
    if resource.is_type("Microsoft.Network", "networkInterfaces"):
        return NetworkInterfaceId(resource.subscription_id, resource.resource_group, resource.name)
    if resource.is_type(
        "Microsoft.Compute", "virtualMachineScaleSets", "virtualMachines", "networkInterfaces"
    ):
        instance = ScaleSetInstanceId(
            resource.subscription_id, resource.resource_group, resource.name, resource.children[0][1]
        )
        return NetworkInterfaceId(
            resource.subscription_id, resource.resource_group, resource.children[1][1], instance
        )
    raise InvalidResourceIdError(f"not a network interface ID: {value!r}")


def parse_subnet_id(value: str) -> SubnetId:
    """Parse a subnet ID."""
    resource = parse_resource_id(value)
    if not resource.is_type("Microsoft.Network", "virtualNetworks", "subnets"):
        raise InvalidResourceIdError(f"not a subnet ID: {value!r}")
    return SubnetId(resource.subscription_id, resource.resource_group, resource.name, resource.children[0][1])


@functools.lru_cache(maxsize=4096)
def parse_user_assigned_identity_id(value: str) -> UserAssignedIdentityId:
    """Parse a user-assigned identity ID, validated with aad-pod-identity's pattern. Kept for the
    4,096 most recent IDs (the result is immutable; the passes ask for the same few many times)."""
    if USER_ASSIGNED_IDENTITY_PATTERN.fullmatch(value.strip()) is None:
        raise InvalidResourceIdError(f"not a user-assigned identity ID: {value!r}")
    resource = parse_resource_id(value)
    if not resource.is_type("Microsoft.ManagedIdentity", "userAssignedIdentities"):
        raise InvalidResourceIdError(f"not a user-assigned identity ID: {value!r}")
    return UserAssignedIdentityId(resource.subscription_id, resource.resource_group, resource.name)


def normalize_identity_id(value: str) -> str:
    """The lowercased key of a user-assigned identity ID (validated)."""
    return parse_user_assigned_identity_id(value).key
