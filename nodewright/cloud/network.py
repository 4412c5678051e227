"""Network operations through azure-mgmt-network: NICs, their secondary IP configurations, subnets.

Owns: reading a NIC (standalone, or the read-only view of a uniform scale-set instance's NIC);
adding and removing secondary IP configurations, one writer per NIC at a time in this process;
a standalone NIC is a full PUT guarded by its etag (``If-Match``), retried from a fresh read when
another writer got there first; a uniform scale-set instance's NIC is changed through
``ComputeService`` (ARM refuses writes to those NICs) and its addresses read back from the NIC
view. The ``begin_`` variants return once ARM accepted the write and leave the operation to the
shared ``operations.OperationTracker``, which calls back when it ends. Listing NICs a scope at
a time, one paged call each: the NICs of a Uniform scale set's instances
(ListVirtualMachineScaleSetNetworkInterfaces) and a resource group's standalone NICs (Flexible
members and VMs), with the number of pages (ARM reads) each took. Also a subnet's CIDR and
usage (virtual network usage API). Every method does I/O and may raise a ``CloudError``; calls
go through ``calls.GuardedCalls``, as ``ComputeService``'s do.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network import models as network_models

from nodewright.cloud.backoff import TargetBackoff
from nodewright.cloud.budget import ArmBudget
from nodewright.cloud.calls import GuardedCalls
from nodewright.cloud.compute import ComputeService
from nodewright.cloud.errors import PreconditionFailedError
from nodewright.cloud.ip_configurations import (
    MAX_IP_CONFIGURATIONS_PER_NIC,
    changed,
    with_configurations_added,
    with_configurations_removed,
)
from nodewright.cloud.locks import KeyedLocks
from nodewright.cloud.models import IpConfigurationInfo, NicInfo, NicListing, SubnetInfo
from nodewright.cloud.nic_pages import NicPageMemo, list_group_nics, list_scale_set_nics
from nodewright.cloud.operations import OperationOutcome, OperationTracker
from nodewright.cloud.resource_ids import (
    NetworkInterfaceId,
    SubnetId,
    parse_network_interface_id,
    parse_subnet_id,
)
from nodewright.cloud.throttle import DEFAULT_PACING_MAX_WAIT_SECONDS, CallObserver, TokenBucket

log = logging.getLogger(__name__)

AZURE_RESERVED_ADDRESSES_PER_SUBNET = 5

R = TypeVar("R")
NIC_PUT = "PUT Microsoft.Network/networkInterfaces"
"""A standalone NIC's PUT, named as the budget names requests (``throttle.operation_name``)."""
Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def nic_from_sdk(nic: network_models.NetworkInterface) -> NicInfo:
    """Our ``NicInfo`` from the SDK model."""
    configurations = []
    for configuration in nic.ip_configurations or []:
        configurations.append(
            IpConfigurationInfo(
                name=str(configuration.name),
                address=configuration.private_ip_address,
                primary=bool(configuration.primary),
                subnet_id=configuration.subnet.id if configuration.subnet is not None else None,
                provisioning_state=configuration.provisioning_state,
            )
        )
    return NicInfo(
        id=str(nic.id), etag=nic.etag, ip_configurations=tuple(configurations), primary=nic.primary
    )


def subnet_limit_from_cidr(cidr: str) -> int:
    """Usable addresses of a subnet: its size minus the 5 Azure reserves."""
    return max(
        0, ipaddress.ip_network(cidr, strict=False).num_addresses - AZURE_RESERVED_ADDRESSES_PER_SUBNET
    )


def _as_nic_id(nic: str | NetworkInterfaceId) -> NetworkInterfaceId:
    return nic if isinstance(nic, NetworkInterfaceId) else parse_network_interface_id(nic)


class NetworkService:
    """Network operations for nodewright (see the module docstring)."""

    def __init__(
        self,
        network: NetworkManagementClient,
        compute: ComputeService | None = None,
        *,
        observer: CallObserver | None = None,
        backoff: TargetBackoff | None = None,
        conflict_retries: int = 2,
        max_ip_configurations_per_nic: int = MAX_IP_CONFIGURATIONS_PER_NIC,
        operations: OperationTracker | None = None,
        budget: ArmBudget | None = None,
        pacing_max_wait_seconds: float = DEFAULT_PACING_MAX_WAIT_SECONDS,
        mutation_bucket: TokenBucket | None = None,
    ) -> None:
        self._network = network
        self._compute = compute
        self.operations = operations or (
            compute.operations if compute is not None else OperationTracker(interval=30.0, observer=observer)
        )
        """Follows the operations of ``begin_*`` calls (the compute service's, when given)."""
        self._call = GuardedCalls(observer, backoff, budget, pacing_max_wait_seconds, mutation_bucket)
        self.conflict_retries = conflict_retries
        self.max_ip_configurations_per_nic = max_ip_configurations_per_nic
        self._nic_locks = KeyedLocks()
        self.nic_pages = NicPageMemo()
        """What each NIC list page gave last time: an unchanged page is not decoded again."""
        self._subnet_cidrs: dict[str, str | None] = {}
        """Address prefix per subnet key, once read: ARM refuses to change the prefix of a subnet
        whose addresses are in use, so a usage refresh needs only the usage list."""

    def reserved_write(self, nic: str | NetworkInterfaceId) -> AbstractContextManager[float]:
        """The ARM budget and mutation token of a write of the NIC's IP configurations, taken for
        the calling thread's block (``GuardedCalls.reserved_write``: yields 0.0 when taken, else
        the seconds until they could be), so that a pass reads what only the write needs after
        the write is sure to go."""
        nic_id = _as_nic_id(nic)
        if nic_id.scale_set_instance is not None:
            return self._require_compute().reserved_instance_write()
        return self._call.reserved_write(NIC_PUT)

    def get_network_interface(self, nic: str | NetworkInterfaceId) -> NicInfo:
        """Read a NIC: standalone, or a uniform scale-set instance's (read-only) NIC view."""
        return nic_from_sdk(self._get_sdk_nic(_as_nic_id(nic)))

    def _get_sdk_nic(self, nic_id: NetworkInterfaceId) -> network_models.NetworkInterface:
        instance = nic_id.scale_set_instance
        if instance is not None:
            return self._call(
                "network.get_scale_set_instance_nic",
                lambda: self._network.network_interfaces.get_virtual_machine_scale_set_network_interface(
                    instance.resource_group, instance.scale_set_name, instance.instance_id, nic_id.name
                ),
                nic_id,
            )
        return self._call(
            "network.get_nic",
            lambda: self._network.network_interfaces.get(nic_id.resource_group, nic_id.name),
            nic_id,
        )

    def list_scale_set_network_interfaces(self, resource_group: str, scale_set: str) -> NicListing:
        """The NICs of every instance of a Uniform scale set, all pages (one read each), read
        from the JSON without SDK models (``nic_pages``)."""
        return self._call(
            "network.list_scale_set_nics",
            lambda: list_scale_set_nics(self._network, resource_group, scale_set, self.nic_pages),
            f"{resource_group}/{scale_set}",
        )

    def list_network_interfaces(self, resource_group: str) -> NicListing:
        """The standalone NICs of a resource group (Flexible members, VMs), all pages."""
        return self._call(
            "network.list_nics",
            lambda: list_group_nics(self._network, resource_group, self.nic_pages),
            resource_group,
        )

    def add_secondary_ip_configurations(
        self,
        nic: str | NetworkInterfaceId,
        names: Sequence[str],
        subnet_id: str | None = None,
        prefix_length: int | None = None,
    ) -> NicInfo:
        """Add secondary IP configurations (dynamic addresses) named ``names``; names present are
        kept. ``subnet_id`` defaults to the primary configuration's subnet. Returns the NIC as read
        after the change. Raises ``LimitExceededError`` past 256 per NIC, ``SubnetFullError``
        when the subnet has no room. ``prefix_length`` (28, experimental) gives each a block."""
        nic_id = _as_nic_id(nic)
        return self._edit(nic_id, self._adding(nic_id, names, subnet_id, prefix_length), "added")

    def remove_secondary_ip_configurations(
        self, nic: str | NetworkInterfaceId, names: Sequence[str]
    ) -> NicInfo:
        """Remove the named secondary IP configurations (absent names are ignored; the primary one
        cannot be removed). Returns the NIC as read after the change."""
        nic_id = _as_nic_id(nic)
        return self._edit(
            nic_id, lambda configurations: with_configurations_removed(configurations, names), "removed"
        )

    def begin_add_secondary_ip_configurations(
        self,
        nic: str | NetworkInterfaceId,
        names: Sequence[str],
        subnet_id: str | None = None,
        prefix_length: int | None = None,
        *,
        on_done: Callable[[OperationOutcome], None],
    ) -> bool:
        """As ``add_secondary_ip_configurations``, but returns as soon as ARM accepted the write:
        the operation tracker follows it and calls ``on_done`` when it ends (the caller reads the
        NIC then). False when nothing was to change (``on_done`` is never called). Errors ARM
        answers at once (400 SubnetIsFull, 412 after the retries, 429) raise here."""
        nic_id = _as_nic_id(nic)
        return self._begin_edit(
            nic_id, self._adding(nic_id, names, subnet_id, prefix_length), "added", on_done
        )

    def begin_remove_secondary_ip_configurations(
        self,
        nic: str | NetworkInterfaceId,
        names: Sequence[str],
        *,
        on_done: Callable[[OperationOutcome], None],
    ) -> bool:
        """As ``remove_secondary_ip_configurations``, returning once ARM accepted the write (see
        ``begin_add_secondary_ip_configurations``)."""
        nic_id = _as_nic_id(nic)
        return self._begin_edit(
            nic_id,
            lambda configurations: with_configurations_removed(configurations, names),
            "removed",
            on_done,
        )

    def _adding(
        self,
        nic_id: NetworkInterfaceId,
        names: Sequence[str],
        subnet_id: str | None,
        prefix_length: int | None,
    ) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
        def edit(configurations: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return with_configurations_added(
                configurations,
                names,
                subnet_id,
                scale_set_instance=nic_id.scale_set_instance is not None,
                limit=self.max_ip_configurations_per_nic,
                prefix_length=prefix_length,
            )

        return edit

    def _edit(self, nic_id: NetworkInterfaceId, edit: Edit, verb: str) -> NicInfo:
        instance = nic_id.scale_set_instance
        if instance is not None:
            self._require_compute().edit_scale_set_instance_ip_configurations(instance, nic_id.name, edit)
            return self.get_network_interface(nic_id)
        current, updated = self._edit_standalone(nic_id, edit, verb, self._put_nic)
        return updated if updated is not None else nic_from_sdk(current)

    def _begin_edit(
        self, nic_id: NetworkInterfaceId, edit: Edit, verb: str, on_done: Callable[[OperationOutcome], None]
    ) -> bool:
        instance = nic_id.scale_set_instance
        if instance is not None:
            compute = self._require_compute()
            return compute.edit_scale_set_instance_ip_configurations(instance, nic_id.name, edit, on_done)

        def begin_put(nic: NetworkInterfaceId, body: dict[str, Any], etag: str | None) -> bool:
            polling = self.operations.polling()
            self._call(
                "network.put_nic",
                lambda: self._send_nic(nic, body, etag, polling),
                nic,
                write=True,
            )
            self._call.track(self.operations, "network.put_nic", nic, polling, on_done)
            return True

        _, started = self._edit_standalone(nic_id, edit, verb, begin_put)
        return bool(started)

    def _require_compute(self) -> ComputeService:
        if self._compute is None:
            raise RuntimeError("scale-set instance NICs need a ComputeService")
        return self._compute

    def _edit_standalone(
        self,
        nic_id: NetworkInterfaceId,
        edit: Edit,
        verb: str,
        put: Callable[[NetworkInterfaceId, dict[str, Any], str | None], R],
    ) -> tuple[network_models.NetworkInterface, R | None]:
        """Read the NIC, edit its IP configurations and ``put`` it with its etag when changed,
        from a fresh read again after a 412; the NIC read and ``put``'s result (None: unchanged)."""
        self._call.check_write(nic_id)
        with self._call.prepaid_write("network.put_nic", NIC_PUT, nic_id), self._nic_locks.hold(nic_id.key):
            attempt = 0
            while True:
                current = self._get_sdk_nic(nic_id)
                body = current.as_dict()
                properties = body.setdefault("properties", {})
                before: list[dict[str, Any]] = properties.get("ipConfigurations") or []
                after = edit(before)
                if not changed(before, after):
                    return current, None
                properties["ipConfigurations"] = after
                try:
                    result = put(nic_id, body, current.etag)
                except PreconditionFailedError:
                    attempt += 1
                    if attempt > self.conflict_retries:
                        raise
                    log.info("NIC changed by another writer, retrying: nic=%s attempt=%d", nic_id, attempt)
                    continue
                log.info("Changed IP configurations: nic=%s change=%s", nic_id, verb)
                return current, result

    def _send_nic(
        self, nic_id: NetworkInterfaceId, body: dict[str, Any], etag: str | None, polling: Any = True
    ) -> Any:
        headers = {"If-Match": etag} if etag else {}
        return self._network.network_interfaces.begin_create_or_update(
            nic_id.resource_group,
            nic_id.name,
            network_models.NetworkInterface(body),
            headers=headers,
            polling=polling,
        )

    def _put_nic(self, nic_id: NetworkInterfaceId, body: dict[str, Any], etag: str | None) -> NicInfo:
        updated = self._call(
            "network.put_nic", lambda: self._send_nic(nic_id, body, etag).result(), nic_id, write=True
        )
        return nic_from_sdk(updated)

    def get_subnet(self, subnet: str) -> SubnetInfo:
        """A subnet's CIDR and how many addresses are used, from the virtual network usage API.

        The subnet itself (whose document lists every IP configuration in it: thousands in a big
        cluster) is read only the first time, for its address prefix; later calls read the usage
        list alone, and fall back to the subnet's document when the list does not name it."""
        subnet_id = parse_subnet_id(subnet)
        listed_already = subnet_id.key in self._subnet_cidrs
        if listed_already:
            found = self._subnet_usage(subnet_id, str(subnet_id), self._subnet_cidrs[subnet_id.key])
            if found is not None:
                return found
        model = self._call(
            "network.get_subnet",
            lambda: self._network.subnets.get(
                subnet_id.resource_group, subnet_id.virtual_network_name, subnet_id.name
            ),
        )
        cidr = model.address_prefix or next(iter(model.address_prefixes or []), None)
        self._subnet_cidrs[subnet_id.key] = cidr
        found = None if listed_already else self._subnet_usage(subnet_id, str(model.id or subnet_id), cidr)
        if found is not None:
            return found
        return SubnetInfo(
            id=str(model.id or subnet_id),
            cidr=cidr,
            used=len(model.ip_configurations or []),
            limit=subnet_limit_from_cidr(cidr) if cidr else 0,
        )

    def _subnet_usage(self, subnet_id: SubnetId, name: str, cidr: str | None) -> SubnetInfo | None:
        """The subnet's entry in its virtual network's usage list (``None``: not listed)."""
        usages = self._call(
            "network.list_virtual_network_usage",
            lambda: list(
                self._network.virtual_networks.list_usage(
                    subnet_id.resource_group, subnet_id.virtual_network_name
                )
            ),
        )
        for usage in usages:
            if usage.id is not None and usage.id.lower() == subnet_id.key:
                return SubnetInfo(
                    id=name, cidr=cidr, used=int(usage.current_value or 0), limit=int(usage.limit or 0)
                )
        return None
