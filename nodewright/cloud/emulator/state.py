"""The emulator's in-memory estate: resource groups, VMs, scale sets and their instances, NICs,
virtual networks with subnets (and their address pools), user-assigned identities and the image catalog.

Everything is stored as ARM JSON documents keyed by lower-cased resource ID, behind one re-entrant
lock. :meth:`EmulatorState.locked` takes the lock and first finishes any long-running operation
that is due, so every reader sees settled state. The request handlers (``compute``, ``network``,
``identities``) and the seed builder (``seed``) are the only writers.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.emulator.addresses import SubnetAddressPool
from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.emulator.images import ImageCatalog
from nodewright.cloud.emulator.long_running import LongRunningOperations

__all__ = [
    "DEFAULT_LIST_PAGE_SIZE",
    "DEFAULT_LOCATION",
    "DEFAULT_OPERATION_RETRY_AFTER",
    "DEFAULT_SUBSCRIPTION",
    "EmulatorState",
    "Resource",
    "ScaleSet",
    "Subnet",
    "now_iso",
    "resource_id",
    "tracked_resource",
]

DEFAULT_SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
DEFAULT_LOCATION = "eastus"


def now_iso() -> str:
    """The current time as ARM writes timestamps (UTC, microseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def tracked_resource(
    arm_id: str, resource_type: str, location: str, tags: dict[str, str] | None
) -> dict[str, Any]:
    """The fields every tracked ARM resource opens with: ``id``, ``name`` (the ID's last
    segment), ``type``, ``location`` and ``tags``; the caller adds the rest in order."""
    return {
        "id": arm_id,
        "name": arm_id.rsplit("/", 1)[-1],
        "type": resource_type,
        "location": location,
        "tags": dict(tags or {}),
    }


def resource_id(subscription: str, resource_group: str, namespace: str, *type_and_names: str) -> str:
    """``/subscriptions/{s}/resourceGroups/{g}/providers/{namespace}/{type}/{name}[/{type}/{name}...]``."""
    return f"/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/{namespace}/" + "/".join(
        type_and_names
    )


def new_etag(weak: bool) -> str:
    """A fresh etag as the provider would send it: ``W/"uuid"`` (Network) or ``"uuid"`` (Compute)."""
    value = f'"{uuid.uuid4()}"'
    return f"W/{value}" if weak else value


def etag_matches(condition: str, etag: str) -> bool:
    """Whether an If-Match value names ``etag`` (``*`` matches any; quotes and ``W/`` ignored)."""

    def normal(value: str) -> str:
        value = value.strip()
        if value[:2].upper() == "W/":
            value = value[2:]
        return value.strip('"')

    return any(
        candidate.strip() == "*" or normal(candidate) == normal(etag) for candidate in condition.split(",")
    )


@dataclass
class Resource:
    """One stored ARM resource: its JSON document, etag and (for machines) power state and the
    dedicated host it was placed on."""

    document: dict[str, Any]
    weak_etag: bool = False
    etag: str = ""
    power_state: str = "running"
    model_generation: int = 0
    etag_in_body: bool = True
    assigned_host: str | None = None

    def __post_init__(self) -> None:
        if not self.etag:
            self.etag = new_etag(self.weak_etag)

    @property
    def identifier(self) -> str:
        return str(self.document["id"])

    @property
    def name(self) -> str:
        return str(self.document["name"])

    @property
    def properties(self) -> dict[str, Any]:
        properties: dict[str, Any] = self.document.setdefault("properties", {})
        return properties

    @property
    def provisioning_state(self) -> str:
        return str(self.properties.get("provisioningState", "Succeeded"))

    @provisioning_state.setter
    def provisioning_state(self, value: str) -> None:
        self.properties["provisioningState"] = value

    def touch(self) -> None:
        """Record a write: a new etag."""
        self.etag = new_etag(self.weak_etag)

    def render(self) -> dict[str, Any]:
        """A deep copy of the document with the current etag."""
        document = copy.deepcopy(self.document)
        if self.etag_in_body:
            document["etag"] = self.etag
        return document


@dataclass
class ScaleSet:
    """A VM scale set with, for Uniform orchestration, its instances keyed by instance ID."""

    resource: Resource
    instances: dict[str, Resource] = field(default_factory=dict)
    next_index: int = 0
    model_generation: int = 0

    @property
    def flexible(self) -> bool:
        mode = str(self.resource.properties.get("orchestrationMode", "Uniform"))
        return mode.lower() == "flexible"


@dataclass
class Subnet:
    """A subnet document and its address pool."""

    resource: Resource
    pool: SubnetAddressPool

    def render(self) -> dict[str, Any]:
        """The subnet document with the IP configurations that hold its addresses."""
        document = self.resource.render()
        owners = self.pool.owners()
        if owners:
            document["properties"]["ipConfigurations"] = [{"id": owner} for owner in owners]
        return document


@dataclass
class ResourceGroup:
    subscription: str
    name: str
    location: str


DEFAULT_LIST_PAGE_SIZE = 100
DEFAULT_OPERATION_RETRY_AFTER = 10.0
"""``Retry-After`` (seconds) on answers about a running operation: ARM's resource provider
contract allows whole seconds from 10 to 600, and 10 is the value of its in-progress example
(``long_running`` names the sources)."""
"""Items per page of a paged list answer (Azure publishes no size; see :mod:`paging`)."""


class EmulatorState:
    """The whole estate. Use ``with state.locked():`` around any read or write."""

    def __init__(self, *, tenant_id: str | None = None) -> None:
        self._lock = threading.RLock()
        self.tenant_id = tenant_id or str(uuid.uuid4())
        self.operations = LongRunningOperations()
        self.operation_duration = 0.0
        self.operation_retry_after: float | None = DEFAULT_OPERATION_RETRY_AFTER
        """``Retry-After`` seconds on answers about an operation still running (the write's own
        answer, InProgress status polls, 202 result polls), as ARM documents it (see
        :mod:`~nodewright.cloud.emulator.long_running`); None: never sent."""
        self.list_page_size = DEFAULT_LIST_PAGE_SIZE
        """Items per page of the paged lists (:mod:`paging`)."""
        self.resource_groups: dict[tuple[str, str], ResourceGroup] = {}
        self.virtual_machines: dict[str, Resource] = {}
        self.scale_sets: dict[str, ScaleSet] = {}
        self.network_interfaces: dict[str, Resource] = {}
        self.virtual_networks: dict[str, Resource] = {}
        self.subnets: dict[str, Subnet] = {}
        self.nat_gateways: dict[str, Resource] = {}
        self.identities: dict[str, Resource] = {}
        self.denied_linked_scopes: list[str] = []
        self.images = ImageCatalog()
        self.dedicated_hosts: dict[str, list[str]] = {}
        self._placements: dict[str, int] = {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[EmulatorState]:
        """Hold the state lock, after finishing every long-running operation that is due."""
        with self._lock:
            self.operations.settle()
            yield self

    # Resource groups -------------------------------------------------------------------------

    def add_resource_group(
        self, name: str, *, subscription: str = DEFAULT_SUBSCRIPTION, location: str = DEFAULT_LOCATION
    ) -> ResourceGroup:
        with self.locked():
            group = ResourceGroup(subscription, name, location)
            self.resource_groups.setdefault((subscription.lower(), name.lower()), group)
            return self.resource_groups[(subscription.lower(), name.lower())]

    def require_resource_group(self, subscription: str, name: str) -> ResourceGroup:
        """The resource group, or 404 ResourceGroupNotFound."""
        group = self.resource_groups.get((subscription.lower(), name.lower()))
        if group is None:
            raise ArmError.resource_group_not_found(name)
        return group

    # Linked access -----------------------------------------------------------------------------

    def deny_linked_access(self, scope: str) -> None:
        """Make writes that link a resource under ``scope`` (an ID prefix) fail with 403
        LinkedAuthorizationFailed, as when the caller lacks ``.../assign/action`` or gallery read."""
        with self.locked():
            self.denied_linked_scopes.append(scope.lower().rstrip("/"))

    def linked_access_denied(self, linked_id: str) -> bool:
        key = linked_id.lower()
        return any(key == scope or key.startswith(scope + "/") for scope in self.denied_linked_scopes)

    # Dedicated hosts ---------------------------------------------------------------------------

    def add_dedicated_hosts(self, host_group_id: str, host_ids: list[str]) -> None:
        """A dedicated host group with automatic placement and its hosts (resource IDs)."""
        with self.locked():
            self.dedicated_hosts.setdefault(host_group_id.lower().rstrip("/"), []).extend(host_ids)

    def place_on_host(self, host_group: Any) -> str | None:
        """The host of ``host_group`` (a ``{"id": ...}`` reference) a new machine is placed on:
        round robin over the group's hosts; None without a group or for a group the emulator does
        not know."""
        group_id = (
            str((host_group or {}).get("id", "")).lower().rstrip("/") if isinstance(host_group, dict) else ""
        )
        hosts = self.dedicated_hosts.get(group_id) if group_id else None
        if not hosts:
            return None
        placed = self._placements.get(group_id, 0)
        self._placements[group_id] = placed + 1
        return hosts[placed % len(hosts)]

    # Lookups -----------------------------------------------------------------------------------

    def find_subnet(self, subnet_id: str) -> Subnet | None:
        return self.subnets.get(subnet_id.lower())

    def find_identity(self, identity_id: str) -> Resource | None:
        return self.identities.get(identity_id.lower())

    def render(self, arm_id: str) -> dict[str, Any] | None:
        """The current JSON of any stored resource by ID (None when absent). For tests."""
        key = arm_id.lower().rstrip("/")
        with self.locked():
            for table in (
                self.virtual_machines,
                self.network_interfaces,
                self.virtual_networks,
                self.nat_gateways,
                self.identities,
            ):
                resource = table.get(key)
                if resource is not None:
                    return resource.render()
            scale_set = self.scale_sets.get(key)
            if scale_set is not None:
                return scale_set.resource.render()
            subnet = self.subnets.get(key)
            if subnet is not None:
                return subnet.render()
            for scale_set in self.scale_sets.values():
                for instance in scale_set.instances.values():
                    if instance.identifier.lower() == key:
                        return instance.render()
        return None

    def machine(self, arm_id: str) -> Resource | None:
        """A standalone VM or a Uniform scale-set instance by resource ID."""
        key = arm_id.lower().rstrip("/")
        if key in self.virtual_machines:
            return self.virtual_machines[key]
        for scale_set in self.scale_sets.values():
            for instance in scale_set.instances.values():
                if instance.identifier.lower() == key:
                    return instance
        return None

    def set_power_state(self, machine_id: str, power_state: str) -> None:
        """Set a VM's or instance's power state (``running``, ``stopped``, ``deallocated``, ...)."""
        with self.locked():
            machine = self.machine(machine_id)
            if machine is None:
                raise KeyError(machine_id)
            machine.power_state = power_state

    def set_provisioning_state(self, arm_id: str, provisioning_state: str) -> None:
        """Force a resource's provisioningState (``Failed``, ``Updating``, ...)."""
        with self.locked():
            machine = self.machine(arm_id)
            scale_set = self.scale_sets.get(arm_id.lower())
            target = machine or (scale_set.resource if scale_set else None)
            target = target or self.network_interfaces.get(arm_id.lower())
            if target is None:
                raise KeyError(arm_id)
            target.provisioning_state = provisioning_state
