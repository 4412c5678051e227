"""The small frozen values the cloud layer returns, and the pure mappings that build them.

Nothing above ``cloud/`` sees an SDK model: ``compute``, ``network`` and ``msi`` turn SDK
responses into these dataclasses. Also owns two pure decisions: the instance-view status codes
to ``NodeState`` mapping (constellation's table) and parsing/formatting of image references.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field


class NodeState(enum.Enum):
    """A machine's state as seen by the cloud (PendingNode ``status.cspState``)."""

    UNKNOWN = "Unknown"
    CREATING = "Creating"
    READY = "Ready"
    STOPPED = "Stopped"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"
    FAILED = "Failed"


_PROVISIONING_STATES: dict[str, NodeState] = {
    "creating": NodeState.CREATING,
    "updating": NodeState.STOPPED,
    "migrating": NodeState.STOPPED,
    "failed": NodeState.FAILED,
    "deleting": NodeState.TERMINATING,
}
_POWER_STATES: dict[str, NodeState] = {
    "starting": NodeState.CREATING,
    "stopping": NodeState.STOPPED,
    "stopped": NodeState.STOPPED,
    "deallocating": NodeState.STOPPED,
    "deallocated": NodeState.STOPPED,
    "running": NodeState.READY,
}


def node_state_from_status_codes(codes: Iterable[str]) -> NodeState:
    """Map instance-view status codes (``ProvisioningState/creating``, ``PowerState/running``, ...)
    to a node state; the first code that decides wins, in the order ARM lists them.

    Provisioning states decide before power states (a deleting instance may still say running).
    """
    provisioning: NodeState | None = None
    power: NodeState | None = None
    for code in codes:
        kind, _, rest = code.lower().partition("/")
        value = rest.split("/")[0]
        if kind == "provisioningstate" and provisioning is None:
            provisioning = _PROVISIONING_STATES.get(value)
        elif kind == "powerstate" and power is None:
            power = _POWER_STATES.get(value)
    if provisioning is not None:
        return provisioning
    if power is not None:
        return power
    return NodeState.UNKNOWN


@dataclass(frozen=True)
class ResourceIdentities:
    """The identity block of a VM or scale set: type, system-assigned flag and the user-assigned
    identity IDs (lowercased), and the resource's etag when it was read (not compared: two reads
    of the same identities are equal whatever else changed on the resource)."""

    type: str
    system_assigned: bool
    user_assigned: frozenset[str] = frozenset()
    etag: str | None = field(default=None, compare=False)

    @classmethod
    def from_parts(
        cls, identity_type: str | None, user_assigned: Iterable[str], etag: str | None = None
    ) -> ResourceIdentities:
        identity_type = identity_type or "None"
        return cls(
            type=identity_type,
            system_assigned="systemassigned" in identity_type.replace(" ", "").lower().split(","),
            etag=etag,
            user_assigned=frozenset(identity_id.lower() for identity_id in user_assigned),
        )


IdentityAssignment = ResourceIdentities


@dataclass(frozen=True)
class IdentityRejection:
    """One identity ARM refused, with its error code and message."""

    identity_id: str
    code: str
    message: str


@dataclass(frozen=True)
class IdentityUpdateResult:
    """What an identity update left on the resource, read back after the last request."""

    identities: ResourceIdentities
    rejected: tuple[IdentityRejection, ...] = ()
    requests: int = 0


@dataclass(frozen=True)
class ImageReference:
    """One of: an image (or gallery image version) ID, a community gallery image ID, a shared
    gallery image ID, or a marketplace publisher/offer/sku/version."""

    id: str | None = None
    community_gallery_image_id: str | None = None
    shared_gallery_image_id: str | None = None
    publisher: str | None = None
    offer: str | None = None
    sku: str | None = None
    version: str | None = None

    @classmethod
    def parse(cls, value: str) -> ImageReference:
        """Parse ``/communitygalleries/...`` (case-insensitive), ``/sharedgalleries/...``, any other
        ``/...`` resource ID, or ``publisher:offer:sku:version`` (also with ``/`` separators)."""
        text = value.strip()
        lowered = text.lower()
        if lowered.startswith("/communitygalleries/"):
            return cls(community_gallery_image_id=text)
        if lowered.startswith("/sharedgalleries/"):
            return cls(shared_gallery_image_id=text)
        if text.startswith("/"):
            return cls(id=text)
        separator = ":" if ":" in text else "/"
        parts = text.split(separator)
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"not an image reference: {value!r}")
        publisher, offer, sku, version = parts
        return cls(publisher=publisher, offer=offer, sku=sku, version=version)

    def format(self) -> str:
        """The inverse of ``parse``; marketplace images as ``publisher:offer:sku:version``."""
        if self.community_gallery_image_id:
            return self.community_gallery_image_id
        if self.shared_gallery_image_id:
            return self.shared_gallery_image_id
        if self.id:
            return self.id
        return f"{self.publisher}:{self.offer}:{self.sku}:{self.version}"

    def same_image(self, other: ImageReference) -> bool:
        """Equal ignoring case, as ARM compares IDs."""
        return self.format().lower() == other.format().lower()

    def to_arm(self) -> dict[str, str | None]:
        """The ``imageReference`` body for a PATCH: the unused forms are sent as null so a merge
        does not keep a previous form's fields."""
        return {
            "id": self.id,
            "communityGalleryImageId": self.community_gallery_image_id,
            "sharedGalleryImageId": self.shared_gallery_image_id,
            "publisher": self.publisher,
            "offer": self.offer,
            "sku": self.sku,
            "version": self.version,
        }

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True)
class InstanceInfo:
    """A virtual machine or scale-set instance. ``name`` is the node name (lowercased computer
    name); ``provider_id`` is ``azure://`` + the machine's resource ID."""

    id: str
    name: str
    computer_name: str
    provider_id: str
    state: NodeState
    image: ImageReference | None
    instance_id: str | None = None
    scale_set_id: str | None = None
    """The scale set a VM is a member of (Flexible orchestration); ``None`` for a standalone VM
    and for a Uniform instance (whose ID names its scale set)."""


@dataclass(frozen=True)
class ScaleOutAccepted:
    """A capacity step ARM accepted: the capacity asked for, and the instance IDs listed right
    after that were not there before (ARM lists a step's instances, ``Creating``, once it has
    accepted it; fewer than the step when it has not listed them all yet)."""

    capacity: int
    added: tuple[str, ...]


@dataclass(frozen=True)
class IpConfigurationInfo:
    """One IP configuration of a NIC."""

    name: str
    address: str | None
    primary: bool
    subnet_id: str | None
    provisioning_state: str | None


@dataclass(frozen=True)
class NicInfo:
    """A network interface: its etag and IP configurations; ``primary``: whether it is its
    machine's primary NIC (ARM's read-only ``primary`` property; None when ARM did not say)."""

    id: str
    etag: str | None
    ip_configurations: tuple[IpConfigurationInfo, ...] = field(default_factory=tuple)
    primary: bool | None = None

    @property
    def primary_ip(self) -> str | None:
        for configuration in self.ip_configurations:
            if configuration.primary:
                return configuration.address
        return None

    @property
    def secondary_ip_configurations(self) -> tuple[IpConfigurationInfo, ...]:
        return tuple(configuration for configuration in self.ip_configurations if not configuration.primary)


@dataclass(frozen=True)
class NicListing:
    """The NICs one paged list call returned and how many pages (ARM reads) it took."""

    nics: tuple[NicInfo, ...]
    pages: int


@dataclass(frozen=True)
class SubnetInfo:
    """A subnet's address range and how many of its addresses are used (limit excludes Azure's 5
    reserved addresses)."""

    id: str
    cidr: str | None
    used: int
    limit: int

    @property
    def available(self) -> int:
        return max(0, self.limit - self.used)


@dataclass(frozen=True)
class IdentityInfo:
    """A user-assigned identity's client and principal IDs. ``id`` is lowercased."""

    id: str
    client_id: str | None
    principal_id: str | None
    tenant_id: str | None
