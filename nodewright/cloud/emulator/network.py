"""Microsoft.Network: virtual networks and subnets (with address usage), NAT gateways (state only:
a subnet associated with one names it in ``natGateway``; a network that is a StandardV2 gateway's
``sourceVirtualNetwork`` names it in ``defaultPublicNatGateway``), network interfaces with
full-PUT semantics and etags (a resource group's are listed in pages, :mod:`paging`, and so are a
subscription's virtual networks, each with its subnets inline as in ``VirtualNetworkListAll.json``); the
read-only NICs of Uniform scale-set instances are in :mod:`scale_set_network`.

IP configurations get real addresses from their subnet's pool (:mod:`addresses`). Limits: 256 IP
configurations per NIC (``NetworkInterfaceIpConfigurationCountExceedsLimit``, 400: Azure documents
the limit, the exact code could not be confirmed from public sources, so the emulator names it
plainly), the primary IP configuration can be neither removed nor renamed
(``IpConfigDeleteNotSupported``, 400), and a full subnet fails the write with ``SubnetIsFull`` (400).
"""

from __future__ import annotations

import copy
import random
import uuid
from typing import Any

from nodewright.cloud.emulator import scale_set_network
from nodewright.cloud.emulator.addresses import SubnetAddressPool
from nodewright.cloud.emulator.errors import IP_CONFIGURATION_LIMIT_PER_NIC, ArmError, ErrorCode
from nodewright.cloud.emulator.long_running import OperationError
from nodewright.cloud.emulator.paging import paged
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router, start_operation
from nodewright.cloud.emulator.scale_set_network import instance_network_interfaces
from nodewright.cloud.emulator.state import EmulatorState, Resource, Subnet, resource_id

__all__ = [
    "instance_network_interfaces",
    "new_nat_gateway",
    "new_network_interface",
    "new_subnet",
    "new_virtual_network",
    "register",
    "release_owner_prefix",
    "sync_instance_addresses",
]

_NAMESPACE = "Microsoft.Network"
_READ_ONLY = ("id", "name", "type", "etag")


def new_virtual_network(
    state: EmulatorState,
    *,
    subscription: str,
    resource_group: str,
    name: str,
    address_prefixes: list[str],
    location: str,
) -> Resource:
    """Create a virtual network (no subnets yet); call under the state lock."""
    arm_id = resource_id(subscription, resource_group, _NAMESPACE, "virtualNetworks", name)
    network = Resource(
        {
            "id": arm_id,
            "name": name,
            "type": "Microsoft.Network/virtualNetworks",
            "location": location,
            "properties": {
                "provisioningState": "Succeeded",
                "resourceGuid": str(uuid.uuid4()),
                "addressSpace": {"addressPrefixes": list(address_prefixes)},
            },
        },
        weak_etag=True,
    )
    state.virtual_networks[arm_id.lower()] = network
    return network


def new_subnet(state: EmulatorState, network: Resource, name: str, prefix: str) -> Subnet:
    """Create a subnet with an address pool in ``network``; call under the state lock."""
    arm_id = f"{network.identifier}/subnets/{name}"
    subnet = Subnet(
        Resource(
            {
                "id": arm_id,
                "name": name,
                "type": "Microsoft.Network/virtualNetworks/subnets",
                "properties": {"provisioningState": "Succeeded", "addressPrefix": prefix},
            },
            weak_etag=True,
        ),
        SubnetAddressPool(arm_id, name, prefix),
    )
    state.subnets[arm_id.lower()] = subnet
    return subnet


def new_nat_gateway(
    state: EmulatorState,
    *,
    subscription: str,
    resource_group: str,
    name: str,
    location: str,
    source_virtual_network: str | None = None,
    subnets: tuple[str, ...] = (),
) -> Resource:
    """Create a NAT gateway: StandardV2 serving ``source_virtual_network`` when given (that
    network's default public NAT gateway), else Standard; ``subnets`` (IDs) are associated with
    it. Call under the state lock."""
    arm_id = resource_id(subscription, resource_group, _NAMESPACE, "natGateways", name)
    properties: dict[str, Any] = {
        "provisioningState": "Succeeded",
        "resourceGuid": str(uuid.uuid4()),
        "idleTimeoutInMinutes": 4,
        "subnets": [{"id": subnet_id} for subnet_id in subnets],
    }
    if source_virtual_network is not None:
        properties["sourceVirtualNetwork"] = {"id": source_virtual_network}
    gateway = Resource(
        {
            "id": arm_id,
            "name": name,
            "type": "Microsoft.Network/natGateways",
            "location": location,
            "sku": {"name": "StandardV2" if source_virtual_network is not None else "Standard"},
            "properties": properties,
        },
        weak_etag=True,
    )
    state.nat_gateways[arm_id.lower()] = gateway
    for subnet_id in subnets:
        subnet = state.subnets[subnet_id.lower()]
        subnet.resource.properties["natGateway"] = {"id": arm_id}
    return gateway


def _default_nat_gateway(state: EmulatorState, network: Resource) -> str | None:
    """The NAT gateway whose source virtual network is ``network`` (None when none is)."""
    for gateway in state.nat_gateways.values():
        source = gateway.properties.get("sourceVirtualNetwork") or {}
        if str(source.get("id", "")).lower() == network.identifier.lower():
            return gateway.identifier
    return None


def _mac_address() -> str:
    return "-".join(f"{random.randint(0, 255):02X}" for _ in range(6))  # noqa: S311 - not security relevant


def _prefix_request(prefix_length: Any, owner: str) -> str:
    """A block of addresses for one IP configuration (``privateIPAddressPrefixLength``; Azure
    offers 28, IPv4): the pool's request form ``"/28"``."""
    if prefix_length != 28:
        raise ArmError.invalid_parameter(
            f"IP configuration {owner}: privateIPAddressPrefixLength {prefix_length!r} is not 28.",
            target="privateIPAddressPrefixLength",
        )
    return "/28"


def _subnet_for(state: EmulatorState, configuration: dict[str, Any], owner: str) -> Subnet:
    """The configuration's subnet (a secondary one without a subnet was given the primary's by
    ``_wanted_addresses``, as in Azure's NetworkInterfaceCreate example)."""
    properties = configuration.get("properties") or {}
    subnet_reference = (properties.get("subnet") or {}).get("id")
    if not subnet_reference:
        raise ArmError.invalid_parameter(f"IP configuration {owner} has no subnet.", target="subnet")
    subnet = state.find_subnet(str(subnet_reference))
    if subnet is None:
        raise ArmError(
            400,
            "InvalidResourceReference",
            f"Resource {subnet_reference} referenced by resource {owner} was not found.",
        )
    return subnet


def _allocate_all(
    state: EmulatorState, wanted: list[tuple[str, Subnet, str | None]], held_prefix: str
) -> dict[str, str]:
    """Give each (owner, subnet, static address) an address; release what ``held_prefix`` owners no
    longer want. All-or-nothing: a failure rolls back the new allocations and raises."""
    wanted_keys = {owner.lower() for owner, _, _ in wanted}
    newly_allocated: list[tuple[Subnet, str]] = []
    addresses: dict[str, str] = {}
    try:
        for owner, subnet, static in wanted:
            # An owner that moved subnets gives its old address back first.
            for other in state.subnets.values():
                if other is not subnet and other.pool.address_of(owner) is not None:
                    other.pool.release(owner)
            had = subnet.pool.address_of(owner)
            address = subnet.pool.allocate(owner, static)
            if had is None:
                newly_allocated.append((subnet, owner))
            addresses[owner.lower()] = address
    except ArmError:
        for subnet, owner in newly_allocated:
            subnet.pool.release(owner)
        raise
    for subnet in state.subnets.values():
        for owner in subnet.pool.owners_under(held_prefix):
            if owner.lower() not in wanted_keys:
                subnet.pool.release(owner)
    return addresses


def release_owner_prefix(state: EmulatorState, prefix: str) -> None:
    """Free every address held by an owner whose ID starts with ``prefix`` (a deleted NIC or instance)."""
    for subnet in state.subnets.values():
        for owner in subnet.pool.owners_under(prefix):
            subnet.pool.release(owner)


def _check_ip_configuration_count(nic_name: str, count: int) -> None:
    if count > IP_CONFIGURATION_LIMIT_PER_NIC:
        raise ArmError(
            400,
            ErrorCode.IP_CONFIGURATION_COUNT_EXCEEDS_LIMIT,
            f"Network interface {nic_name} has {count} IP configurations, which exceeds the limit of "
            f"{IP_CONFIGURATION_LIMIT_PER_NIC} IP configurations per network interface.",
        )


def _check_primary_kept(nic_name: str, old_configurations: list[dict[str, Any]], new_names: set[str]) -> None:
    for configuration in old_configurations:
        if (configuration.get("properties") or {}).get("primary") and str(
            configuration.get("name", "")
        ).lower() not in {name.lower() for name in new_names}:
            raise ArmError(
                400,
                ErrorCode.IP_CONFIG_DELETE_NOT_SUPPORTED,
                f"IP Configuration {configuration.get('name')} cannot be deleted. Deletion and renaming of "
                f"primary IP Configuration is not supported (network interface {nic_name}).",
            )


def _wanted_addresses(
    state: EmulatorState, arm_id: str, configurations: list[dict[str, Any]]
) -> list[tuple[str, Subnet, str | None]]:
    """(owner, subnet, static address) per IP configuration. A secondary configuration without a
    subnet takes the primary's, as Azure does; Static without an address is refused."""
    primary = next(c for c in configurations if (c.get("properties") or {}).get("primary"))
    primary_subnet = (primary.get("properties") or {}).get("subnet")
    wanted: list[tuple[str, Subnet, str | None]] = []
    for configuration in configurations:
        owner = f"{arm_id}/ipConfigurations/{configuration['name']}"
        configuration_properties = configuration.setdefault("properties", {})
        if not configuration_properties.get("subnet") and configuration is not primary and primary_subnet:
            configuration_properties["subnet"] = {"id": primary_subnet.get("id")}
        subnet = _subnet_for(state, configuration, owner)
        static = None
        if str(configuration_properties.get("privateIPAllocationMethod", "Dynamic")).lower() == "static":
            static = configuration_properties.get("privateIPAddress")
            if not static:
                raise ArmError(
                    400,
                    ErrorCode.PRIVATE_IP_ADDRESS_MISSING,
                    f"IP configuration {owner} has Static allocation but no private IP address.",
                )
        elif configuration_properties.get("privateIPAddressPrefixLength") is not None:
            static = _prefix_request(configuration_properties["privateIPAddressPrefixLength"], owner)
        wanted.append((owner, subnet, str(static) if static else None))
    return wanted


def new_network_interface(
    state: EmulatorState,
    arm_id: str,
    location: str,
    body: dict[str, Any],
    existing: Resource | None,
) -> Resource:
    """Create or fully replace a standalone NIC from a PUT body: validates limits, allocates
    addresses, keeps read-only fields. Call under the state lock; raises ArmError."""
    name = arm_id.rsplit("/", 1)[-1]
    properties = copy.deepcopy(body.get("properties") or {})
    configurations = properties.get("ipConfigurations") or []
    _check_ip_configurations(name, configurations, existing)
    if not any((configuration.get("properties") or {}).get("primary") for configuration in configurations):
        configurations[0].setdefault("properties", {})["primary"] = True
    wanted = _wanted_addresses(state, arm_id, configurations)
    addresses = _allocate_all(state, wanted, f"{arm_id}/ipConfigurations/")
    rendered_configurations = [
        _rendered_ip_configuration(configuration, owner, subnet, addresses[owner.lower()])
        for configuration, (owner, subnet, _) in zip(configurations, wanted, strict=True)
    ]
    properties["ipConfigurations"] = rendered_configurations
    _complete_nic_properties(properties, existing.properties if existing is not None else {})
    document = {key: value for key, value in body.items() if key not in (*_READ_ONLY, "properties")}
    document.update(
        {
            "id": arm_id,
            "name": name,
            "type": "Microsoft.Network/networkInterfaces",
            "location": body.get("location") or location,
            "properties": properties,
        }
    )
    if existing is None:
        resource = Resource(document, weak_etag=True)
        state.network_interfaces[arm_id.lower()] = resource
    else:
        existing.document = document
        existing.touch()
        resource = existing
    for configuration in rendered_configurations:
        configuration["etag"] = resource.etag
    return resource


def _check_ip_configurations(name: str, configurations: Any, existing: Resource | None) -> None:
    """At least one IP configuration and at most the limit, named and unique, the primary one
    kept (when replacing) and at most one marked primary."""
    if not isinstance(configurations, list) or not configurations:
        raise ArmError.invalid_parameter(
            f"Network interface {name} must have at least one IP configuration.", target="ipConfigurations"
        )
    _check_ip_configuration_count(name, len(configurations))
    names = [str(configuration.get("name", "")) for configuration in configurations]
    if any(not item for item in names) or len({item.lower() for item in names}) != len(names):
        raise ArmError.invalid_parameter(
            f"IP configuration names of network interface {name} must be present and unique.",
            target="ipConfigurations",
        )
    if existing is not None:
        _check_primary_kept(name, existing.properties.get("ipConfigurations") or [], set(names))
    primaries = [c for c in configurations if (c.get("properties") or {}).get("primary")]
    if len(primaries) > 1:
        raise ArmError.invalid_parameter(
            f"Network interface {name} has more than one primary IP configuration.", target="ipConfigurations"
        )


def _rendered_ip_configuration(
    configuration: dict[str, Any], owner: str, subnet: Subnet, address: str
) -> dict[str, Any]:
    """An IP configuration as the NIC stores it: its allocated address, defaults, subnet; the
    etag is filled in once the NIC has one."""
    configuration_properties = configuration["properties"]
    configuration_properties.update(
        {
            "privateIPAddress": address,
            "privateIPAllocationMethod": configuration_properties.get("privateIPAllocationMethod", "Dynamic"),
            "privateIPAddressVersion": configuration_properties.get("privateIPAddressVersion", "IPv4"),
            "primary": bool(configuration_properties.get("primary", False)),
            "provisioningState": "Succeeded",
            "subnet": {"id": subnet.resource.identifier},
        }
    )
    return {
        "id": owner,
        "name": configuration["name"],
        "type": "Microsoft.Network/networkInterfaces/ipConfigurations",
        "etag": "",
        "properties": configuration_properties,
    }


def _complete_nic_properties(properties: dict[str, Any], old: dict[str, Any]) -> None:
    """The read-only and defaulted NIC properties: kept from ``old`` (the replaced NIC's) where
    it has them, fresh otherwise."""
    properties["provisioningState"] = "Succeeded"
    properties["resourceGuid"] = old.get("resourceGuid") or str(uuid.uuid4())
    properties["macAddress"] = old.get("macAddress") or _mac_address()
    properties.setdefault("primary", old.get("primary", True))
    properties.setdefault("vnetEncryptionSupported", False)
    properties.setdefault("dnsSettings", {"dnsServers": [], "appliedDnsServers": []})
    properties.setdefault("nicType", "Standard")
    properties.setdefault("enableAcceleratedNetworking", False)
    properties.setdefault("enableIPForwarding", False)
    if "virtualMachine" in old:
        properties["virtualMachine"] = old["virtualMachine"]


def sync_instance_addresses(state: EmulatorState, instance: Resource) -> None:
    """Allocate addresses for the instance model's IP configurations and free removed ones.
    All-or-nothing (SubnetIsFull leaves the previous allocations). Call under the state lock."""
    configurations = (instance.properties.get("networkProfileConfiguration") or {}).get(
        "networkInterfaceConfigurations"
    ) or []
    wanted: list[tuple[str, Subnet, str | None]] = []
    for nic_configuration in configurations:
        nic_name = str(nic_configuration.get("name"))
        ip_configurations = (nic_configuration.get("properties") or {}).get("ipConfigurations") or []
        _check_ip_configuration_count(nic_name, len(ip_configurations))
        nic_id = f"{instance.identifier}/networkInterfaces/{nic_name}"
        for ip_configuration in ip_configurations:
            owner = f"{nic_id}/ipConfigurations/{ip_configuration.get('name')}"
            wanted.append((owner, _subnet_for(state, ip_configuration, owner), None))
    _allocate_all(state, wanted, f"{instance.identifier}/networkInterfaces/")


# Handlers -------------------------------------------------------------------------------------


def _group(state: EmulatorState, request: ArmRequest) -> str:
    return request.resource_group(state).name


def _nic_id(request: ArmRequest) -> str:
    return request.resource_id(_NAMESPACE, "networkInterfaces", request.parameters["networkInterfaceName"])


def get_network_interface(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    nic = request.require_resource(
        state, state.network_interfaces, "Microsoft.Network/networkInterfaces", "networkInterfaceName"
    )
    return ArmResponse.of(nic)


def create_or_update_network_interface(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = request.resource_group(state)
    body = request.json_object()
    arm_id, existing = request.current(
        state.network_interfaces, _NAMESPACE, "networkInterfaces", "networkInterfaceName"
    )
    previous = copy.deepcopy(existing.document) if existing is not None else None
    nic = new_network_interface(state, arm_id, group.location, body, existing)
    nic.provisioning_state = "Updating"

    def succeed() -> None:
        nic.provisioning_state = "Succeeded"

    def fail(error: OperationError) -> None:
        del error
        if previous is not None:
            nic.document = previous
        nic.provisioning_state = "Failed"
        nic.touch()

    headers = start_operation(
        state, request, namespace=_NAMESPACE, location=group.location, on_success=succeed, on_failure=fail
    )
    return ArmResponse.of(nic, 200 if existing is not None else 201, headers)


def delete_network_interface(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    _group(state, request)
    arm_id = _nic_id(request)
    nic = state.network_interfaces.get(arm_id.lower())
    if nic is None:
        return ArmResponse(204)
    nic.provisioning_state = "Deleting"

    def succeed() -> None:
        state.network_interfaces.pop(arm_id.lower(), None)
        release_owner_prefix(state, f"{arm_id}/ipConfigurations/")

    def fail(error: OperationError) -> None:
        del error
        nic.provisioning_state = "Succeeded"

    location = str(nic.document.get("location") or "")
    headers = start_operation(
        state, request, namespace=_NAMESPACE, location=location, on_success=succeed, on_failure=fail
    )
    return ArmResponse(202, None, headers)


def list_network_interfaces(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = _group(state, request)
    prefix = f"/subscriptions/{request.parameters['subscriptionId']}/resourcegroups/{group}/".lower()
    values = [nic.render() for key, nic in state.network_interfaces.items() if key.startswith(prefix)]
    return paged(request, values, state.list_page_size)


def _virtual_network(state: EmulatorState, request: ArmRequest) -> Resource:
    group = _group(state, request)
    arm_id = resource_id(
        request.parameters["subscriptionId"],
        group,
        _NAMESPACE,
        "virtualNetworks",
        request.parameters["virtualNetworkName"],
    )
    network = state.virtual_networks.get(arm_id.lower())
    if network is None:
        raise ArmError.resource_not_found(
            "Microsoft.Network/virtualNetworks", request.parameters["virtualNetworkName"], group
        )
    return network


def _subnets_of(state: EmulatorState, network: Resource) -> list[Subnet]:
    prefix = f"{network.identifier}/subnets/".lower()
    return [subnet for key, subnet in state.subnets.items() if key.startswith(prefix)]


def _rendered_network(state: EmulatorState, network: Resource) -> dict[str, Any]:
    """A virtual network as ARM answers it, its subnets inline."""
    document = network.render()
    document["properties"]["subnets"] = [subnet.render() for subnet in _subnets_of(state, network)]
    default_gateway = _default_nat_gateway(state, network)
    if default_gateway is not None:
        document["properties"]["defaultPublicNatGateway"] = {"id": default_gateway}
    document["properties"].setdefault("virtualNetworkPeerings", [])
    document["properties"].setdefault("enableDdosProtection", False)
    document["properties"].setdefault("dhcpOptions", {"dnsServers": []})
    return document


def get_virtual_network(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    network = _virtual_network(state, request)
    return ArmResponse(200, _rendered_network(state, network), {"ETag": network.etag})


def list_all_virtual_networks(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    """Every virtual network of the subscription, each with its subnets, in pages."""
    prefix = f"/subscriptions/{request.parameters['subscriptionId']}/".lower()
    values = [
        _rendered_network(state, network)
        for key, network in sorted(state.virtual_networks.items())
        if key.startswith(prefix)
    ]
    return paged(request, values, state.list_page_size)


def get_subnet(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    network = _virtual_network(state, request)
    subnet = state.find_subnet(f"{network.identifier}/subnets/{request.parameters['subnetName']}")
    if subnet is None:
        raise ArmError(
            404,
            ErrorCode.NOT_FOUND,
            f"Resource {network.identifier}/subnets/{request.parameters['subnetName']} not found.",
        )
    return ArmResponse(200, subnet.render(), {"ETag": subnet.resource.etag})


def list_subnets(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    network = _virtual_network(state, request)
    return ArmResponse(200, {"value": [subnet.render() for subnet in _subnets_of(state, network)]})


def list_usage(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    network = _virtual_network(state, request)
    usages = [
        {
            "id": subnet.resource.identifier,
            "currentValue": float(subnet.pool.used),
            "limit": float(subnet.pool.limit),
            "unit": "Count",
            "name": {"value": "SubnetSpace", "localizedValue": "Subnet size and usage"},
        }
        for subnet in _subnets_of(state, network)
    ]
    return ArmResponse(200, {"value": usages})


def register(router: Router) -> None:
    group = "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/"
    nics = group + "Microsoft.Network/networkInterfaces"
    router.add("GET", nics, "NetworkInterfaces.list", list_network_interfaces)
    router.add("GET", nics + "/{networkInterfaceName}", "NetworkInterfaces.get", get_network_interface)
    router.add(
        "PUT",
        nics + "/{networkInterfaceName}",
        "NetworkInterfaces.create_or_update",
        create_or_update_network_interface,
    )
    router.add(
        "DELETE", nics + "/{networkInterfaceName}", "NetworkInterfaces.delete", delete_network_interface
    )
    scale_set_network.register(router)
    router.add(
        "GET",
        "/subscriptions/{subscriptionId}/providers/Microsoft.Network/virtualNetworks",
        "VirtualNetworks.list_all",
        list_all_virtual_networks,
    )
    networks = group + "Microsoft.Network/virtualNetworks/{virtualNetworkName}"
    router.add("GET", networks, "VirtualNetworks.get", get_virtual_network)
    router.add("GET", networks + "/usages", "VirtualNetworks.list_usage", list_usage)
    router.add("GET", networks + "/subnets", "Subnets.list", list_subnets)
    router.add("GET", networks + "/subnets/{subnetName}", "Subnets.get", get_subnet)
