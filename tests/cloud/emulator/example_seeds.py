"""Seeding the emulator for Azure's published examples (for ``test_examples``): what each example
assumes exists, created under the example's names, through the estate builder or the emulator's
own PUT (so the emulator fills in what Azure would).
"""

from __future__ import annotations

import json
import re
from typing import Any

from azure.core.rest import HttpRequest

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.compute import new_virtual_machine
from nodewright.cloud.emulator.images import ImageFacts, MarketplaceImage
from nodewright.cloud.emulator.network import new_network_interface
from nodewright.cloud.emulator.seed import DEFAULT_IMAGE
from tests.cloud.emulator.examples import Case, request_for, send
from tests.cloud.emulator.sdk_clients import sdk_clients


def seeded_names(example: dict[str, Any]) -> dict[str, str]:
    return {key: str(value) for key, value in example["parameters"].items() if isinstance(value, (str, int))}


def seed(emulator: ArmEmulator, case: Case, example: dict[str, Any]) -> None:
    """Create what the example assumes exists, under the example's names."""
    names = seeded_names(example)
    builder = emulator.estate
    group = names["resourceGroupName"]
    builder.add_resource_group(group)
    if case.seed in ("group", "nothing"):
        return
    vnet_name = names.get("virtualNetworkName", "vnet")
    vnet = builder.add_virtual_network(
        group, vnet_name, subnets={names.get("subnetName", "default"): "10.0.0.0/16"}
    )
    subnet_id = vnet + "/subnets/" + names.get("subnetName", "default")
    _seed_references(emulator, example, group, subnet_id)
    stored = _stored_in_example(example)
    if case.file in CREATED_FROM_EXAMPLE and stored is not None:
        _seed_references(emulator, {"parameters": stored}, group, subnet_id)
        path = request_for(case, example, "").url.split("?")[0] if case.path.endswith("}") else None
        _put_as_created(emulator, stored, path)
        _attach_to_machine(emulator, stored)
        _add_extensions(emulator, stored)
        return
    if case.seed == "vm":
        builder.add_virtual_machine(group, names.get("vmName", "vm-0"), subnet_id=subnet_id)
    elif case.seed == "vm-with-guest":
        _put_vm_with_guest(emulator, group, names.get("vmName", "vm-0"), subnet_id)
    elif case.seed == "vmss":
        scale_set = names.get("vmScaleSetName") or names.get("virtualMachineScaleSetName") or "vmss"
        _put_scale_set(emulator, group, scale_set, subnet_id)
    elif case.seed == "vmss-from-instance" and stored is not None:
        _put_scale_set_for_instance(emulator, group, names["vmScaleSetName"], subnet_id, stored)
    elif case.seed == "vmss-on-host":
        scale_set = names.get("vmScaleSetName") or names.get("virtualMachineScaleSetName") or "vmss"
        _put_scale_set_on_host(emulator, group, scale_set, subnet_id)
    elif case.seed == "nic":
        builder.add_virtual_machine(group, "vm-0", subnet_id=subnet_id)
        name = names.get("networkInterfaceName")
        if name:
            _put_nic(emulator, group, name, subnet_id)
    elif case.seed == "vnet":
        # The network examples show a subnet with an address in use: a VM holds one.
        builder.add_virtual_machine(group, "vm-0", subnet_id=subnet_id)
        _seed_default_nat_gateway(emulator, example, group, vnet)
    elif case.seed == "identity":
        builder.add_identity(group, names["resourceName"])


# What Azure fills in itself (read-only): never sent when the example's resource is created, so the
# emulator must produce each of these on its own for the answer to match.
READ_ONLY = frozenset(
    {
        "etag",
        "provisioningState",
        "vmId",
        "timeCreated",
        "uniqueId",
        "resourceGuid",
        "macAddress",
        "instanceView",
        "principalId",
        "clientId",
        "tenantId",
        "privateIPAddress",
        "virtualMachine",
        "hostedWorkloads",
        "tapConfigurations",
        "nicType",
        "vnetEncryptionSupported",
        "primary",
        "systemData",
    }
)
TOP_LEVEL_READ_ONLY = frozenset({"id", "type", "name"})


def _writable(document: Any, depth: int = 0) -> Any:
    if isinstance(document, list):
        return [_writable(item, depth + 1) for item in document]
    if not isinstance(document, dict):
        return document
    kept = {}
    for key, value in document.items():
        if key in READ_ONLY or (depth == 0 and key in TOP_LEVEL_READ_ONLY):
            continue
        kept[key] = _writable(value, depth + 1)
    return kept


# GETs and lists whose example resource can be created as it is through the emulator's own PUT
# (its read-only fields left out): the answer must then carry every field the example shows.
CREATED_FROM_EXAMPLE = frozenset(
    {
        "compute/VirtualMachine_Get_WithVMSizeProperties.json",
        "compute/VirtualMachine_Update_WithInstanceProfile.json",
        "compute/VirtualMachineScaleSet_Get.json",
        "network/NetworkInterfaceList.json",
        "network/NetworkInterfaceGet.json",
        "msi/IdentityGet.json",
        "msi/IdentityListByResourceGroup.json",
    }
)

_CREATABLE = {
    "microsoft.compute/virtualmachines": "2024-11-01",
    "microsoft.compute/virtualmachinescalesets": "2024-11-01",
    "microsoft.network/networkinterfaces": "2024-05-01",
    "microsoft.managedidentity/userassignedidentities": "2023-01-31",
}


def _stored_in_example(example: dict[str, Any]) -> dict[str, Any] | None:
    """The resource an example GET (or list) answers with: the first one in it."""
    body = (example["responses"].get("200") or {}).get("body")
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("value"), list):
        return body["value"][0] if body["value"] else None
    return body if "id" in body else None


def _put_as_created(emulator: ArmEmulator, stored: dict[str, Any], path: str | None) -> None:
    """Create the example's resource through the emulator's own PUT, read-only fields left out."""
    body = _writable(stored)
    configurations = (body.get("properties") or {}).get("ipConfigurations")
    if isinstance(configurations, list):
        for configuration in configurations:
            configuration.get("properties", {}).pop("privateIPAddress", None)
    path = path or re.sub(
        r"^/subscriptions/[^/]+", f"/subscriptions/{DEFAULT_SUBSCRIPTION}", str(stored["id"])
    )
    emulator.estate.add_resource_group(path.split("/")[4])
    _publish_image(emulator, body)
    _put(emulator, path, _CREATABLE[str(stored["type"]).lower()], body)


def _attach_to_machine(emulator: ArmEmulator, stored: dict[str, Any]) -> None:
    """A NIC the example shows attached to a VM: create that VM with the NIC as its own."""
    properties = stored.get("properties") or {}
    machine_id = str((properties.get("virtualMachine") or {}).get("id", ""))
    if "/networkinterfaces/" not in str(stored.get("id", "")).lower() or not machine_id:
        return
    machine_id = re.sub(r"^/subscriptions/[^/]+", f"/subscriptions/{DEFAULT_SUBSCRIPTION}", machine_id)
    nic_id = re.sub(r"^/subscriptions/[^/]+", f"/subscriptions/{DEFAULT_SUBSCRIPTION}", str(stored["id"]))
    group = machine_id.split("/")[4]
    emulator.estate.add_resource_group(group)
    with emulator.state.locked() as state:
        new_virtual_machine(
            state,
            subscription=DEFAULT_SUBSCRIPTION,
            resource_group=group,
            name=machine_id.rsplit("/", 1)[-1],
            location=str(stored.get("location") or "westus"),
            properties={
                "hardwareProfile": {"vmSize": "Standard_D2s_v3"},
                "storageProfile": {"imageReference": dict(DEFAULT_IMAGE)},
                "networkProfile": {"networkInterfaces": [{"id": nic_id, "properties": {"primary": True}}]},
            },
        )


def _publish_image(emulator: ArmEmulator, body: dict[str, Any]) -> None:
    """The marketplace image an example's resource was built from is published (Azure refuses an
    image it does not have, and the emulator's catalog holds only a few common ones)."""
    properties = body.get("properties") or {}
    storage = (properties.get("virtualMachineProfile") or properties).get("storageProfile") or {}
    reference = storage.get("imageReference") or {}
    if not reference.get("publisher") or str(reference.get("version", "latest")).lower() == "latest":
        return
    os_type = str((storage.get("osDisk") or {}).get("osType") or "Linux")
    emulator.estate.add_marketplace_image(
        MarketplaceImage(
            str(reference["publisher"]),
            str(reference["offer"]),
            str(reference["sku"]),
            (str(reference["version"]),),
            ImageFacts(os_type=os_type),
        )
    )


def _put_scale_set(emulator: ArmEmulator, group: str, name: str, subnet_id: str) -> None:
    """A Uniform scale set of two instances as the scale-set examples assume one: behind a load
    balancer (backend pool, inbound NAT pool), with a network security group, a public address
    per instance, a data disk, boot diagnostics, user data, a health extension and automatic
    repairs. Created through the emulator's PUT, so the emulator fills in what Azure would."""
    path = f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute"
    _put(
        emulator,
        f"{path}/virtualMachineScaleSets/{name}",
        "2024-11-01",
        _scale_set_body(group, name, subnet_id),
    )


def _scale_set_body(group: str, name: str, subnet_id: str) -> dict[str, Any]:
    network = f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Network"
    ip_configuration = {
        "name": "ipconfig1",
        "properties": {
            "subnet": {"id": subnet_id},
            "loadBalancerBackendAddressPools": [
                {"id": f"{network}/loadBalancers/lb/backendAddressPools/nodes"}
            ],
            "loadBalancerInboundNatPools": [{"id": f"{network}/loadBalancers/lb/inboundNatPools/ssh"}],
            "publicIPAddressConfiguration": {"name": "public", "properties": {"idleTimeoutInMinutes": 15}},
        },
    }
    health = {
        "name": "health",
        "properties": {
            "publisher": "Microsoft.ManagedServices",
            "type": "ApplicationHealthLinux",
            "typeHandlerVersion": "1.0",
            "autoUpgradeMinorVersion": True,
            "settings": {"protocol": "tcp", "port": 22},
        },
    }
    profile = {
        "storageProfile": {
            "imageReference": dict(DEFAULT_IMAGE),
            "osDisk": {"createOption": "FromImage", "caching": "ReadOnly"},
            "dataDisks": [{"lun": 1, "createOption": "Empty", "diskSizeGB": 128}],
        },
        "osProfile": {"computerNamePrefix": name, "adminUsername": "azureuser"},
        "diagnosticsProfile": {"bootDiagnostics": {"enabled": True}},
        "userData": "dXNlcmRhdGE=",
        "extensionProfile": {"extensions": [health]},
        "networkProfile": {
            "networkInterfaceConfigurations": [
                {
                    "name": f"{name}-nic",
                    "properties": {
                        "primary": True,
                        "networkSecurityGroup": {"id": f"{network}/networkSecurityGroups/nodes"},
                        "ipConfigurations": [ip_configuration],
                    },
                }
            ]
        },
    }
    body: dict[str, Any] = {
        "location": "westus",
        "tags": {"pool": name},
        "sku": {"name": "Standard_D2s_v3", "tier": "Standard", "capacity": 2},
        "properties": {
            "upgradePolicy": {"mode": "Manual"},
            "automaticRepairsPolicy": {"enabled": True, "gracePeriod": "PT30M"},
            "virtualMachineProfile": profile,
        },
    }
    return body


# The parts of an instance's properties that come from its scale set's model.
_MODEL_PARTS = ("hardwareProfile", "storageProfile", "osProfile", "userData", "diagnosticsProfile")


def _put_scale_set_for_instance(
    emulator: ArmEmulator, group: str, name: str, subnet_id: str, instance: dict[str, Any]
) -> None:
    """The scale set an example's instance was made from: its model holds the instance's size
    properties, image, disks, OS settings, user data and diagnostics, and the set its tags."""
    body = _scale_set_body(group, name, subnet_id)
    properties = _writable(instance)["properties"]
    model = {key: properties[key] for key in _MODEL_PARTS if key in properties}
    model["hardwareProfile"].pop("vmSize", None)
    storage = model["storageProfile"]
    os_type = str((storage.get("osDisk") or {}).get("osType") or "Linux")
    for disk in (storage.get("osDisk") or {}, *(storage.get("dataDisks") or [])):
        for key in ("name", "managedDisk", "toBeDetached", "osType"):
            disk.pop(key, None)
    storage["imageReference"].pop("exactVersion", None)
    model["osProfile"]["computerNamePrefix"] = model["osProfile"].pop("computerName")
    body["properties"]["virtualMachineProfile"].update(model)
    body["tags"] = dict(instance.get("tags") or {})
    _publish_image(emulator, {"properties": {"storageProfile": {**storage, "osDisk": {"osType": os_type}}}})
    path = f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute"
    _put(emulator, f"{path}/virtualMachineScaleSets/{name}", "2024-11-01", body)


def _put_vm_with_guest(emulator: ArmEmulator, group: str, name: str, subnet_id: str) -> None:
    """A VM as the instance-view example shows one: a data disk, boot diagnostics kept in a
    storage account, and an extension (added as a child resource)."""
    _put_nic(emulator, group, f"{name}-nic", subnet_id)
    prefix = f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{group}/providers"
    body = {
        "location": "westus",
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v3"},
            "storageProfile": {
                "imageReference": dict(DEFAULT_IMAGE),
                "osDisk": {"createOption": "FromImage"},
                "dataDisks": [{"lun": 0, "createOption": "Empty", "diskSizeGB": 64}],
            },
            "osProfile": {"computerName": name, "adminUsername": "azureuser"},
            "diagnosticsProfile": {
                "bootDiagnostics": {
                    "enabled": True,
                    "storageUri": "https://diagnostics.blob.core.windows.net/",
                }
            },
            "networkProfile": {
                "networkInterfaces": [{"id": f"{prefix}/Microsoft.Network/networkInterfaces/{name}-nic"}]
            },
        },
    }
    machine_id = f"{prefix}/Microsoft.Compute/virtualMachines/{name}"
    _put(emulator, machine_id, "2024-11-01", body)
    extension = {
        "publisher": "Microsoft.Azure.Monitor",
        "type": "AzureMonitorLinuxAgent",
        "typeHandlerVersion": "1.0",
    }
    emulator.estate.add_extension(machine_id, "monitor", extension)


def _put_scale_set_on_host(emulator: ArmEmulator, group: str, name: str, subnet_id: str) -> None:
    """A plain scale set (no extensions, no boot diagnostics) placed automatically on a dedicated
    host group of two hosts, as the dedicated-host examples assume."""
    host_group = emulator.estate.add_dedicated_host_group(group, "hosts", ["host-1", "host-2"])
    body = _scale_set_body(group, name, subnet_id)
    profile = body["properties"]["virtualMachineProfile"]
    for key in ("extensionProfile", "diagnosticsProfile"):
        del profile[key]
    del body["properties"]["automaticRepairsPolicy"]
    body["properties"].update({"hostGroup": {"id": host_group}, "platformFaultDomainCount": 1})
    path = f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute"
    _put(emulator, f"{path}/virtualMachineScaleSets/{name}", "2024-11-01", body)


def _add_extensions(emulator: ArmEmulator, stored: dict[str, Any]) -> None:
    """The extensions an example's VM shows in ``resources`` (child resources, never sent in the
    VM's own PUT), added to the created VM."""
    if str(stored.get("type", "")).lower() != "microsoft.compute/virtualmachines":
        return
    machine_id = re.sub(r"^/subscriptions/[^/]+", f"/subscriptions/{DEFAULT_SUBSCRIPTION}", str(stored["id"]))
    for extension in stored.get("resources") or []:
        emulator.estate.add_extension(
            machine_id, str(extension["name"]), extension.get("properties") or {}, tags=extension.get("tags")
        )


def _put(emulator: ArmEmulator, path: str, version: str, body: dict[str, Any]) -> None:
    clients = sdk_clients(emulator, retry_total=0)
    answer = send(clients, HttpRequest("PUT", f"{emulator.endpoint}{path}?api-version={version}", json=body))
    if answer.status >= 300:
        raise AssertionError(f"Seeding {path} failed: {answer.status} {json.dumps(answer.body)[-300:]}")


def _put_nic(emulator: ArmEmulator, group: str, name: str, subnet_id: str) -> None:
    with emulator.state.locked() as state:
        arm_id = (
            f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{group}"
            f"/providers/Microsoft.Network/networkInterfaces/{name}"
        )
        new_network_interface(
            state,
            arm_id,
            "westus",
            {
                "properties": {
                    "ipConfigurations": [{"name": "ipconfig1", "properties": {"subnet": {"id": subnet_id}}}]
                }
            },
            None,
        )


_REFERENCE = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/(?P<group>[^/]+)/providers/"
    r"(?:Microsoft\.Network/virtualNetworks/(?P<vnet>[^/]+)/subnets/(?P<subnet>[^/\"]+)"
    r"|Microsoft\.ManagedIdentity/userAssignedIdentities/(?P<identity>[^/\"]+)"
    r"|Microsoft\.Network/networkInterfaces/(?P<nic>[^/\"]+))",
    re.IGNORECASE,
)


def _seed_references(emulator: ArmEmulator, example: dict[str, Any], group: str, subnet_id: str) -> None:
    """Subnets, identities and NICs the request body names must exist (Azure checks them)."""
    body = json.dumps(example["parameters"])
    builder = emulator.estate
    for match in _REFERENCE.finditer(body):
        reference_group = match.group("group")
        builder.add_resource_group(reference_group)
        if match.group("vnet"):
            builder.add_virtual_network(
                reference_group, match.group("vnet"), subnets={match.group("subnet"): "10.1.0.0/16"}
            )
        elif match.group("identity"):
            builder.add_identity(reference_group, match.group("identity"))
        elif match.group("nic"):
            _put_nic(emulator, reference_group, match.group("nic"), subnet_id)


def _seed_default_nat_gateway(emulator: ArmEmulator, example: dict[str, Any], group: str, vnet: str) -> None:
    """The example's network is the source network of a StandardV2 NAT gateway (its answer names
    it as ``defaultPublicNatGateway``): that gateway exists in the example's estate, so create it,
    under its name, with the network as its source."""
    answer = example["responses"].get("200", {}).get("body", {})
    reference = (answer.get("properties") or {}).get("defaultPublicNatGateway") or {}
    if reference.get("id"):
        name = str(reference["id"]).rstrip("/").rsplit("/", 1)[-1]
        emulator.estate.add_nat_gateway(group, name, source_virtual_network=vnet)
