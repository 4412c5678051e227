"""The read-only NICs of Uniform scale-set instances, as Microsoft.Network shows them: built from
the instance's NIC configurations (its copy of the scale set's model) and the addresses its IP
configurations hold in their subnets' pools.

What the model references is shown as Azure shows it on the instance's NIC: the network security
group, load balancer backend pools, application gateway pools and application security groups as
given; each inbound NAT pool as the instance's own NAT rule ``<pool>.<instance id>``; a public IP
configuration as the public address ``<ip configuration>/publicIPAddresses/<name>``. The NIC's MAC
address is stable per NIC; its DNS settings carry the virtual network's internal domain suffix.
The emulator keeps no load balancer, security group or public address state of its own: the
references are reflected, not checked. Writes to these NICs are refused (405). The NICs of a whole
scale set are listed in pages (:mod:`paging`), instance by instance, as Azure's
ListVirtualMachineScaleSetNetworkInterfaces answers; the emulator checks no api-version, so the
old ones Azure still serves on this route (2017-03-30, 2018-10-01, ...) are answered too. No I/O.
"""

from __future__ import annotations

import uuid
from typing import Any

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.paging import paged
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router
from nodewright.cloud.emulator.state import EmulatorState, Resource, ScaleSet, resource_id

__all__ = ["instance_network_interfaces", "internal_domain_name_suffix", "register"]

_COPIED_REFERENCES = (
    "loadBalancerBackendAddressPools",
    "applicationGatewayBackendAddressPools",
    "applicationSecurityGroups",
)


def internal_domain_name_suffix(virtual_network_id: str) -> str:
    """The internal DNS suffix Azure gives the NICs of one virtual network (stable per network)."""
    digest = uuid.uuid5(uuid.NAMESPACE_URL, virtual_network_id.lower()).hex
    return f"{digest[:26]}.bx.internal.cloudapp.net"


def _mac_address(nic_id: str) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_URL, nic_id.lower()).bytes
    return "-".join(f"{byte:02X}" for byte in (0x00, 0x0D, 0x3A, *digest[:3]))


def _ip_configuration(
    state: EmulatorState, instance: Resource, owner: str, ip_configuration: dict[str, Any]
) -> dict[str, Any]:
    ip_properties = ip_configuration.get("properties") or {}
    subnet_id = str((ip_properties.get("subnet") or {}).get("id", ""))
    subnet = state.find_subnet(subnet_id)
    properties: dict[str, Any] = {
        "privateIPAddress": subnet.pool.address_of(owner) if subnet is not None else None,
        "privateIPAllocationMethod": "Dynamic",
        "privateIPAddressVersion": ip_properties.get("privateIPAddressVersion", "IPv4"),
        "primary": bool(ip_properties.get("primary", False)),
        "provisioningState": "Succeeded",
        "subnet": {"id": subnet.resource.identifier if subnet is not None else subnet_id},
    }
    for key in _COPIED_REFERENCES:
        if ip_properties.get(key):
            properties[key] = [{"id": str(item.get("id"))} for item in ip_properties[key]]
    instance_id = str(instance.document.get("instanceId"))
    nat_pools = ip_properties.get("loadBalancerInboundNatPools") or []
    if nat_pools:
        properties["loadBalancerInboundNatRules"] = [
            {"id": str(pool.get("id")).replace("/inboundNatPools/", "/inboundNatRules/") + f".{instance_id}"}
            for pool in nat_pools
        ]
    public = ip_properties.get("publicIPAddressConfiguration")
    if isinstance(public, dict) and public.get("name"):
        properties["publicIPAddress"] = {"id": f"{owner}/publicIPAddresses/{public['name']}"}
    return {
        "id": owner,
        "name": ip_configuration.get("name"),
        "etag": instance.etag,
        "properties": properties,
    }


def _dns_settings(state: EmulatorState, nic_properties: dict[str, Any]) -> dict[str, Any]:
    configured = (nic_properties.get("dnsSettings") or {}).get("dnsServers") or []
    settings: dict[str, Any] = {"dnsServers": list(configured), "appliedDnsServers": list(configured)}
    for ip_configuration in nic_properties.get("ipConfigurations") or []:
        subnet_id = str(((ip_configuration.get("properties") or {}).get("subnet") or {}).get("id", ""))
        if state.find_subnet(subnet_id) is not None:
            settings["internalDomainNameSuffix"] = internal_domain_name_suffix(
                subnet_id.split("/subnets/", maxsplit=1)[0]
            )
            break
    return settings


def _nic_properties(
    state: EmulatorState, instance: Resource, nic_id: str, nic_properties: dict[str, Any]
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "provisioningState": "Succeeded",
        "resourceGuid": str(uuid.uuid5(uuid.NAMESPACE_URL, nic_id.lower())),
        "ipConfigurations": [
            _ip_configuration(state, instance, f"{nic_id}/ipConfigurations/{item.get('name')}", item)
            for item in nic_properties.get("ipConfigurations") or []
        ],
        "dnsSettings": _dns_settings(state, nic_properties),
        "macAddress": _mac_address(nic_id),
        "primary": bool(nic_properties.get("primary", False)),
        "enableAcceleratedNetworking": bool(nic_properties.get("enableAcceleratedNetworking", False)),
        "enableIPForwarding": bool(nic_properties.get("enableIPForwarding", False)),
        "virtualMachine": {"id": instance.identifier},
        "nicType": "Standard",
    }
    security_group = nic_properties.get("networkSecurityGroup")
    if isinstance(security_group, dict) and security_group.get("id"):
        properties["networkSecurityGroup"] = {"id": str(security_group["id"])}
    return properties


def instance_network_interfaces(
    state: EmulatorState, scale_set: ScaleSet, instance: Resource
) -> list[dict[str, Any]]:
    """The read-only NIC documents of a Uniform scale-set instance, built from its model."""
    configurations = (instance.properties.get("networkProfileConfiguration") or {}).get(
        "networkInterfaceConfigurations"
    ) or []
    nics = []
    for nic_configuration in configurations:
        nic_name = str(nic_configuration.get("name"))
        nic_id = f"{instance.identifier}/networkInterfaces/{nic_name}"
        nics.append(
            {
                "id": nic_id,
                "name": nic_name,
                "etag": instance.etag,
                "location": scale_set.resource.document.get("location"),
                "properties": _nic_properties(
                    state, instance, nic_id, nic_configuration.get("properties") or {}
                ),
            }
        )
    return nics


def _scale_set(state: EmulatorState, request: ArmRequest) -> ScaleSet:
    group = request.resource_group(state).name
    scale_set_name = request.parameters["virtualMachineScaleSetName"]
    arm_id = resource_id(
        request.parameters["subscriptionId"],
        group,
        "Microsoft.Compute",
        "virtualMachineScaleSets",
        scale_set_name,
    )
    scale_set = state.scale_sets.get(arm_id.lower())
    if scale_set is None:
        raise ArmError.resource_not_found("Microsoft.Compute/virtualMachineScaleSets", scale_set_name, group)
    return scale_set


def _scale_set_instance(state: EmulatorState, request: ArmRequest) -> tuple[ScaleSet, Resource]:
    scale_set = _scale_set(state, request)
    group = request.resource_group(state).name
    scale_set_name = request.parameters["virtualMachineScaleSetName"]
    instance = scale_set.instances.get(request.parameters["virtualmachineIndex"])
    if instance is None:
        raise ArmError.resource_not_found(
            "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
            f"{scale_set_name}/{request.parameters['virtualmachineIndex']}",
            group,
        )
    return scale_set, instance


def get_scale_set_network_interface(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    scale_set, instance = _scale_set_instance(state, request)
    for nic in instance_network_interfaces(state, scale_set, instance):
        if str(nic["name"]).lower() == request.parameters["networkInterfaceName"].lower():
            return ArmResponse(200, nic)
    raise ArmError.resource_not_found(
        "Microsoft.Network/networkInterfaces",
        request.parameters["networkInterfaceName"],
        request.parameters["resourceGroupName"],
    )


def list_scale_set_vm_network_interfaces(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    scale_set, instance = _scale_set_instance(state, request)
    return ArmResponse(200, {"value": instance_network_interfaces(state, scale_set, instance)})


def _instance_order(instance_id: str) -> tuple[int, str]:
    return (int(instance_id), instance_id) if instance_id.isdigit() else (1 << 62, instance_id)


def list_scale_set_network_interfaces(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    """Every instance's NICs, instances in ID order, in pages (a Flexible scale set's members have
    standalone NICs, listed with the resource group's: this route shows none for them)."""
    scale_set = _scale_set(state, request)
    values: list[dict[str, Any]] = []
    for instance_id in sorted(scale_set.instances, key=_instance_order):
        values.extend(instance_network_interfaces(state, scale_set, scale_set.instances[instance_id]))
    return paged(request, values, state.list_page_size)


def reject_scale_set_nic_write(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    del state
    raise ArmError(
        405,
        ErrorCode.OPERATION_NOT_ALLOWED,
        " ".join(("Network interfaces of Uniform scale-set instances are read-only:", request.path)),
    )


def register(router: Router) -> None:
    instance_nics = (
        "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/"
        "Microsoft.Compute/virtualMachineScaleSets/{virtualMachineScaleSetName}/virtualMachines/"
        "{virtualmachineIndex}/networkInterfaces"
    )
    scale_set_nics = (
        "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/"
        "Microsoft.Compute/virtualMachineScaleSets/{virtualMachineScaleSetName}/networkInterfaces"
    )
    router.add(
        "GET",
        scale_set_nics,
        "NetworkInterfaces.list_virtual_machine_scale_set_network_interfaces",
        list_scale_set_network_interfaces,
    )
    router.add(
        "GET",
        instance_nics,
        "NetworkInterfaces.list_virtual_machine_scale_set_vm_network_interfaces",
        list_scale_set_vm_network_interfaces,
    )
    router.add(
        "GET",
        instance_nics + "/{networkInterfaceName}",
        "NetworkInterfaces.get_virtual_machine_scale_set_network_interface",
        get_scale_set_network_interface,
    )
    for method in ("PUT", "PATCH", "DELETE"):
        router.add(
            method,
            instance_nics + "/{networkInterfaceName}",
            "NetworkInterfaces.scale_set_write",
            reject_scale_set_nic_write,
        )
