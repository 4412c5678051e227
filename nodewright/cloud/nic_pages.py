"""NIC lists read as plain JSON: a Uniform scale set's instance NICs and a resource group's NICs.

Owns ``list_scale_set_nics``, ``list_group_nics`` and ``nic_from_json``. The requests are the
SDK's own (``NetworkInterfacesOperations.list_virtual_machine_scale_set_network_interfaces`` and
``.list``: their request builders, so paths and ``api-version`` stay the SDK's), read page by page
by ``raw_pages``; each entry becomes a ``NicInfo`` straight from its JSON, the fields
``network.nic_from_sdk`` reads from the model. The NIC watcher lists every scale set once a
minute: building an SDK model for every NIC and IP configuration was three quarters of the
manager's CPU at rest with 1,000 nodes (issue 32). Does I/O.
"""

from __future__ import annotations

from typing import Any

from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network.operations._operations import (
    build_network_interfaces_list_request,
    build_network_interfaces_list_virtual_machine_scale_set_network_interfaces_request,
)

from nodewright.cloud.models import IpConfigurationInfo, NicInfo, NicListing
from nodewright.cloud.raw_pages import raw_pages

__all__ = ["list_group_nics", "list_scale_set_nics", "nic_from_json"]


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def nic_from_json(entry: dict[str, Any]) -> NicInfo:
    """Our ``NicInfo`` from a NIC's ARM JSON (as ``nic_from_sdk`` reads the SDK model)."""
    configurations = []
    for configuration in _object(entry.get("properties")).get("ipConfigurations") or []:
        properties = _object(_object(configuration).get("properties"))
        subnet = properties.get("subnet")
        configurations.append(
            IpConfigurationInfo(
                name=str(configuration.get("name")),
                address=properties.get("privateIPAddress"),
                primary=bool(properties.get("primary")),
                subnet_id=_object(subnet).get("id") if subnet is not None else None,
                provisioning_state=properties.get("provisioningState"),
            )
        )
    primary = _object(entry.get("properties")).get("primary")
    return NicInfo(
        id=str(entry.get("id")),
        etag=entry.get("etag"),
        ip_configurations=tuple(configurations),
        primary=primary if isinstance(primary, bool) else None,
    )


def _listing(network: NetworkManagementClient, first: Any) -> NicListing:
    nics: list[NicInfo] = []
    pages = 0
    for body in raw_pages(network, first):
        pages += 1
        nics.extend(nic_from_json(entry) for entry in body.get("value") or [] if isinstance(entry, dict))
    return NicListing(nics=tuple(nics), pages=pages)


def _subscription(network: NetworkManagementClient) -> str:
    # The client's own subscription, as its operations fill in every request they build.
    return str(network._config.subscription_id)  # no public accessor


def list_scale_set_nics(network: NetworkManagementClient, resource_group: str, scale_set: str) -> NicListing:
    """The NICs of every instance of a Uniform scale set, all pages (one read each)."""
    request = build_network_interfaces_list_virtual_machine_scale_set_network_interfaces_request(
        resource_group_name=resource_group,
        virtual_machine_scale_set_name=scale_set,
        subscription_id=_subscription(network),
    )
    return _listing(network, request)


def list_group_nics(network: NetworkManagementClient, resource_group: str) -> NicListing:
    """The standalone NICs of a resource group (Flexible members, VMs), all pages."""
    request = build_network_interfaces_list_request(
        resource_group_name=resource_group, subscription_id=_subscription(network)
    )
    return _listing(network, request)
