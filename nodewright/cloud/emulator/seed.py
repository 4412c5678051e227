"""Seeding: a Python builder for a starting estate, and seed files (YAML or JSON) read through it.

Seed format (every key optional except names)::

    subscription: 00000000-0000-4000-8000-000000000001   # default subscription for the file
    location: eastus
    operationDurationSeconds: 0          # how long every long-running operation takes
    operationRetryAfterSeconds: 10       # Retry-After while one runs (default 10; null: never sent)
    deniedLinkedScopes: [<ID prefix>]    # writes linking these answer 403 LinkedAuthorizationFailed
    images:                              # besides the built-in catalog (images.MARKETPLACE_IMAGES)
      marketplace:                       # an unknown publisher/offer/sku/version: 404 PlatformImageNotFound
        - {publisher: Contoso, offer: node, sku: gen2, versions: [1.0.0], osType: Linux, hyperVGeneration: V2}
      galleryImages:                     # another version in a known gallery: 404 GalleryImageNotFound
        - {id: /subscriptions/.../galleries/g/images/i, versions: [1.0.0], osType: Linux}
    resourceGroups:
      - name: rg-nodes
        location: eastus
        virtualNetworks:
          - name: vnet
            addressPrefixes: [10.0.0.0/8]
            subnets: [{name: nodes, addressPrefix: 10.240.0.0/24}]
        identities: [{name: id-web}]   # or {name: id-web, clientId: <uuid>, principalId: <uuid>}
        virtualMachines:
          - name: vm-0
            subnet: vnet/nodes           # <vnet>/<subnet> in this group, or a subnet resource ID
            image: {publisher: Canonical, offer: ubuntu-24_04-lts, sku: server, version: latest}
            identities: [id-web]         # names in this group, or identity resource IDs
            systemAssigned: false
            secondaryIpConfigurations: 0
        scaleSets:
          - name: vmss-a
            orchestrationMode: Uniform   # or Flexible
            capacity: 3
            subnet: vnet/nodes
            computerNamePrefix: vmss-a   # Uniform computer names: <prefix>000000, <prefix>000001, ...
            image: {id: /subscriptions/.../galleries/g/images/i/versions/1.0.0}
            identities: []
            secondaryIpConfigurations: 0
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from nodewright.cloud.emulator import compute, extensions, identities, network, scale_sets
from nodewright.cloud.emulator.images import ImageFacts, MarketplaceImage
from nodewright.cloud.emulator.state import (
    DEFAULT_LOCATION,
    DEFAULT_SUBSCRIPTION,
    EmulatorState,
    ScaleSet,
    resource_id,
)

__all__ = ["DEFAULT_IMAGE", "EstateBuilder", "load_seed_file"]

DEFAULT_IMAGE: dict[str, str] = {
    "publisher": "Canonical",
    "offer": "ubuntu-24_04-lts",
    "sku": "server",
    "version": "latest",
}


def _image_facts(image: dict[str, Any]) -> ImageFacts:
    defaults = ImageFacts()
    return ImageFacts(
        os_type=str(image.get("osType") or defaults.os_type),
        hyper_v_generation=str(image.get("hyperVGeneration") or defaults.hyper_v_generation),
        os_name=str(image.get("osName") or defaults.os_name),
        os_version=str(image.get("osVersion") or defaults.os_version),
        os_disk_size_gb=int(image.get("osDiskSizeGB") or defaults.os_disk_size_gb),
    )


def load_seed_file(path: Path) -> dict[str, Any]:
    """Parse a seed file: JSON when it ends in ``.json``, YAML otherwise."""
    text = path.read_text()
    data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"Seed file {path} must hold a mapping at the top level")
    return data


class EstateBuilder:
    """Adds resources to an :class:`EmulatorState` directly (no HTTP). Every method returns the
    new resource's ARM ID; calling one twice with the same name returns the existing resource
    for groups and identities."""

    def __init__(self, state: EmulatorState, subscription: str = DEFAULT_SUBSCRIPTION) -> None:
        self.state = state
        self.subscription = subscription

    def add_resource_group(
        self, name: str, *, location: str = DEFAULT_LOCATION, subscription: str | None = None
    ) -> str:
        subscription = subscription or self.subscription
        self.state.add_resource_group(name, subscription=subscription, location=location)
        return f"/subscriptions/{subscription}/resourceGroups/{name}"

    def _location(self, resource_group: str, subscription: str) -> str:
        with self.state.locked():
            return self.state.require_resource_group(subscription, resource_group).location

    def add_virtual_network(
        self,
        resource_group: str,
        name: str,
        *,
        address_prefixes: list[str] | None = None,
        subnets: dict[str, str] | None = None,
        subscription: str | None = None,
    ) -> str:
        """A virtual network with ``subnets`` (name -> CIDR); returns the network's ID."""
        subscription = subscription or self.subscription
        location = self._location(resource_group, subscription)
        with self.state.locked():
            created = network.new_virtual_network(
                self.state,
                subscription=subscription,
                resource_group=resource_group,
                name=name,
                address_prefixes=address_prefixes or ["10.0.0.0/8"],
                location=location,
            )
            for subnet_name, prefix in (subnets or {}).items():
                network.new_subnet(self.state, created, subnet_name, prefix)
            return created.identifier

    def add_subnet(self, virtual_network_id: str, name: str, prefix: str) -> str:
        with self.state.locked():
            parent = self.state.virtual_networks[virtual_network_id.lower()]
            return network.new_subnet(self.state, parent, name, prefix).resource.identifier

    def add_nat_gateway(
        self,
        resource_group: str,
        name: str,
        *,
        source_virtual_network: str | None = None,
        subnets: tuple[str, ...] = (),
        subscription: str | None = None,
    ) -> str:
        """A NAT gateway (see ``network.new_nat_gateway``); returns its ID."""
        subscription = subscription or self.subscription
        location = self._location(resource_group, subscription)
        with self.state.locked():
            return network.new_nat_gateway(
                self.state,
                subscription=subscription,
                resource_group=resource_group,
                name=name,
                location=location,
                source_virtual_network=source_virtual_network,
                subnets=subnets,
            ).identifier

    def add_identity(
        self,
        resource_group: str,
        name: str,
        *,
        subscription: str | None = None,
        client_id: str | None = None,
        principal_id: str | None = None,
    ) -> str:
        """A user-assigned identity; clientId/principalId fresh unless given. Returns its ID."""
        subscription = subscription or self.subscription
        location = self._location(resource_group, subscription)
        with self.state.locked():
            identity = identities.new_identity(
                self.state,
                subscription=subscription,
                resource_group=resource_group,
                name=name,
                location=location,
            )
            if client_id:
                identity.properties["clientId"] = str(client_id)
            if principal_id:
                identity.properties["principalId"] = str(principal_id)
            return identity.identifier

    def _identity_block(
        self, target_id: str, identity_ids: list[str], system_assigned: bool
    ) -> dict[str, Any] | None:
        if not identity_ids and not system_assigned:
            return None
        kinds = [
            kind
            for kind, on in (("SystemAssigned", system_assigned), ("UserAssigned", bool(identity_ids)))
            if on
        ]
        request = {
            "type": ", ".join(kinds),
            "userAssignedIdentities": {identity_id: {} for identity_id in identity_ids},
        }
        return identities.apply_identity(self.state, target_id, None, request, patch=False)

    def _ip_configurations(
        self, subnet_id: str, secondary: int, *, address_version: bool
    ) -> list[dict[str, Any]]:
        configurations = []
        for index in range(1 + secondary):
            properties: dict[str, Any] = {"subnet": {"id": subnet_id}, "primary": index == 0}
            if address_version:
                properties["privateIPAddressVersion"] = "IPv4"
            else:
                properties["privateIPAllocationMethod"] = "Dynamic"
            configurations.append(
                {"name": "ipconfig1" if index == 0 else f"ipconfig{index + 1}", "properties": properties}
            )
        return configurations

    def add_virtual_machine(
        self,
        resource_group: str,
        name: str,
        *,
        subnet_id: str,
        image: dict[str, str] | None = None,
        identity_ids: list[str] | None = None,
        system_assigned: bool = False,
        secondary_ip_configurations: int = 0,
        vm_size: str = "Standard_D4s_v5",
        computer_name: str | None = None,
        subscription: str | None = None,
    ) -> str:
        """A running VM with one NIC ``<name>-nic`` in ``subnet_id``; returns the VM's ID."""
        subscription = subscription or self.subscription
        location = self._location(resource_group, subscription)
        with self.state.locked():
            nic_id = resource_id(
                subscription, resource_group, "Microsoft.Network", "networkInterfaces", f"{name}-nic"
            )
            nic_body = {
                "location": location,
                "properties": {
                    "ipConfigurations": self._ip_configurations(
                        subnet_id, secondary_ip_configurations, address_version=False
                    )
                },
            }
            network.new_network_interface(self.state, nic_id, location, nic_body, None)
            vm_id = resource_id(subscription, resource_group, "Microsoft.Compute", "virtualMachines", name)
            machine = compute.new_virtual_machine(
                self.state,
                subscription=subscription,
                resource_group=resource_group,
                name=name,
                location=location,
                properties={
                    "hardwareProfile": {"vmSize": vm_size},
                    "storageProfile": {
                        "imageReference": dict(image or DEFAULT_IMAGE),
                        "osDisk": {"osType": "Linux", "createOption": "FromImage", "name": f"{name}-osdisk"},
                    },
                    "osProfile": {"computerName": computer_name or name, "adminUsername": "azureuser"},
                    "networkProfile": {
                        "networkInterfaces": [{"id": nic_id, "properties": {"primary": True}}]
                    },
                },
                identity=self._identity_block(vm_id, identity_ids or [], system_assigned),
            )
            return machine.identifier

    def add_scale_set(
        self,
        resource_group: str,
        name: str,
        *,
        subnet_id: str,
        capacity: int = 0,
        orchestration_mode: str = "Uniform",
        image: dict[str, str] | None = None,
        identity_ids: list[str] | None = None,
        system_assigned: bool = False,
        computer_name_prefix: str | None = None,
        secondary_ip_configurations: int = 0,
        vm_size: str = "Standard_D4s_v5",
        subscription: str | None = None,
    ) -> str:
        """A scale set with ``capacity`` running instances; returns the scale set's ID."""
        subscription = subscription or self.subscription
        location = self._location(resource_group, subscription)
        with self.state.locked():
            scale_set_id = resource_id(
                subscription, resource_group, "Microsoft.Compute", "virtualMachineScaleSets", name
            )
            flexible = orchestration_mode.lower() == "flexible"
            scale_set = scale_sets.new_scale_set(
                self.state,
                subscription=subscription,
                resource_group=resource_group,
                name=name,
                location=location,
                sku={"name": vm_size, "tier": "Standard"},
                properties={
                    "orchestrationMode": "Flexible" if flexible else "Uniform",
                    "virtualMachineProfile": self._machine_profile(
                        name,
                        subnet_id=subnet_id,
                        image=image,
                        computer_name_prefix=computer_name_prefix,
                        secondary_ip_configurations=secondary_ip_configurations,
                    ),
                },
                identity=self._identity_block(scale_set_id, identity_ids or [], system_assigned),
            )
            self._fill(scale_set, capacity)
            return scale_set.resource.identifier

    def _machine_profile(
        self,
        name: str,
        *,
        subnet_id: str,
        image: dict[str, str] | None,
        computer_name_prefix: str | None,
        secondary_ip_configurations: int,
    ) -> dict[str, Any]:
        """A scale set's ``virtualMachineProfile``: Linux from ``image``, one NIC ``<name>-nic``."""
        return {
            "osProfile": {"computerNamePrefix": computer_name_prefix or name, "adminUsername": "azureuser"},
            "storageProfile": {
                "imageReference": dict(image or DEFAULT_IMAGE),
                "osDisk": {"osType": "Linux", "createOption": "FromImage", "caching": "ReadOnly"},
            },
            "networkProfile": {
                "networkInterfaceConfigurations": [
                    {
                        "name": f"{name}-nic",
                        "properties": {
                            "primary": True,
                            "ipConfigurations": self._ip_configurations(
                                subnet_id, secondary_ip_configurations, address_version=True
                            ),
                        },
                    }
                ]
            },
        }

    def _fill(self, scale_set: ScaleSet, capacity: int) -> None:
        """Add ``capacity`` running instances; a failure (a full subnet) removes the scale set.
        Call under the state lock."""
        try:
            created, _ = scale_sets.scale_to(self.state, scale_set, capacity)
        except Exception:
            del self.state.scale_sets[scale_set.resource.identifier.lower()]
            raise
        for member in created:
            member.provisioning_state = "Succeeded"

    def add_extension(
        self, machine_id: str, name: str, properties: dict[str, Any], *, tags: dict[str, str] | None = None
    ) -> str:
        """An extension on a VM or scale-set instance (``publisher``, ``type``,
        ``typeHandlerVersion``, ``settings``...); returns the extension's ID."""
        with self.state.locked():
            machine = self.state.machine(machine_id)
            if machine is None:
                raise KeyError(machine_id)
            return str(extensions.add_extension(machine, name, properties, tags)["id"])

    def add_dedicated_host_group(
        self, resource_group: str, name: str, hosts: list[str], *, subscription: str | None = None
    ) -> str:
        """A dedicated host group with automatic placement and its hosts; machines whose
        ``hostGroup`` names it are placed on the hosts in turn. Returns the group's ID."""
        group_id = resource_id(
            subscription or self.subscription, resource_group, "Microsoft.Compute", "hostGroups", name
        )
        self.state.add_dedicated_hosts(group_id, [f"{group_id}/hosts/{host}" for host in hosts])
        return group_id

    def add_gallery_image(
        self, definition_id: str, versions: list[str], facts: ImageFacts | None = None
    ) -> str:
        """A gallery image definition (``.../galleries/G/images/I`` or a community or shared
        gallery's) with its versions; a write naming another version of a gallery the catalog
        knows then answers 404 GalleryImageNotFound. Returns the definition ID."""
        with self.state.locked():
            self.state.images.add_gallery_image(definition_id, facts or ImageFacts(), tuple(versions))
        return definition_id

    def add_marketplace_image(self, image: MarketplaceImage) -> None:
        """Publish a marketplace image (adds versions to a SKU already known)."""
        with self.state.locked():
            self.state.images.add_marketplace_image(image)

    # Seed documents ----------------------------------------------------------------------------

    def apply(self, seed: dict[str, Any]) -> None:
        """Add everything a seed document describes (see the module docstring)."""
        subscription = str(seed.get("subscription") or self.subscription)
        default_location = str(seed.get("location") or DEFAULT_LOCATION)
        if "operationDurationSeconds" in seed:
            with self.state.locked():
                self.state.operation_duration = float(seed["operationDurationSeconds"])
        if "operationRetryAfterSeconds" in seed:
            with self.state.locked():
                retry_after = seed["operationRetryAfterSeconds"]
                self.state.operation_retry_after = None if retry_after is None else float(retry_after)
        self._apply_estate_wide(seed)
        for group in seed.get("resourceGroups") or []:
            group_name = str(group["name"])
            self.add_resource_group(
                group_name, location=str(group.get("location") or default_location), subscription=subscription
            )
            self._apply_networks_and_identities(group, subscription)
            for machine in group.get("virtualMachines") or []:
                self._apply_virtual_machine(machine, group_name, subscription)
            for scale_set in group.get("scaleSets") or []:
                self._apply_scale_set(scale_set, group_name, subscription)

    def _apply_networks_and_identities(self, group: dict[str, Any], subscription: str) -> None:
        """A seed group's ``virtualNetworks`` and ``identities``."""
        group_name = str(group["name"])
        for vnet in group.get("virtualNetworks") or []:
            self.add_virtual_network(
                group_name,
                str(vnet["name"]),
                address_prefixes=list(vnet.get("addressPrefixes") or ["10.0.0.0/8"]),
                subnets={str(s["name"]): str(s["addressPrefix"]) for s in vnet.get("subnets") or []},
                subscription=subscription,
            )
        for identity in group.get("identities") or []:
            fixed = identity if isinstance(identity, dict) else {}
            self.add_identity(
                group_name,
                str(identity["name"] if isinstance(identity, dict) else identity),
                subscription=subscription,
                client_id=fixed.get("clientId"),
                principal_id=fixed.get("principalId"),
            )

    def _apply_virtual_machine(self, machine: dict[str, Any], group_name: str, subscription: str) -> None:
        """One entry of a seed group's ``virtualMachines``."""
        self.add_virtual_machine(
            group_name,
            str(machine["name"]),
            subnet_id=self._subnet_reference(subscription, group_name, str(machine["subnet"])),
            image=machine.get("image"),
            identity_ids=[
                self._identity_reference(subscription, group_name, i) for i in machine.get("identities") or []
            ],
            system_assigned=bool(machine.get("systemAssigned", False)),
            secondary_ip_configurations=int(machine.get("secondaryIpConfigurations", 0)),
            vm_size=str(machine.get("vmSize", "Standard_D4s_v5")),
            computer_name=machine.get("computerName"),
            subscription=subscription,
        )

    def _apply_scale_set(self, scale_set: dict[str, Any], group_name: str, subscription: str) -> None:
        """One entry of a seed group's ``scaleSets``."""
        self.add_scale_set(
            group_name,
            str(scale_set["name"]),
            subnet_id=self._subnet_reference(subscription, group_name, str(scale_set["subnet"])),
            capacity=int(scale_set.get("capacity", 0)),
            orchestration_mode=str(scale_set.get("orchestrationMode", "Uniform")),
            image=scale_set.get("image"),
            identity_ids=[
                self._identity_reference(subscription, group_name, i)
                for i in scale_set.get("identities") or []
            ],
            system_assigned=bool(scale_set.get("systemAssigned", False)),
            computer_name_prefix=scale_set.get("computerNamePrefix"),
            secondary_ip_configurations=int(scale_set.get("secondaryIpConfigurations", 0)),
            vm_size=str(scale_set.get("vmSize", "Standard_D4s_v5")),
            subscription=subscription,
        )

    def _apply_estate_wide(self, seed: dict[str, Any]) -> None:
        """Denied linked scopes and the images published besides the built-in catalog."""
        for scope in seed.get("deniedLinkedScopes") or []:
            self.state.deny_linked_access(str(scope))
        images = seed.get("images") or {}
        for image in images.get("marketplace") or []:
            self.add_marketplace_image(
                MarketplaceImage(
                    str(image["publisher"]),
                    str(image["offer"]),
                    str(image["sku"]),
                    tuple(str(version) for version in image.get("versions") or ()),
                    _image_facts(image),
                )
            )
        for image in images.get("galleryImages") or []:
            self.add_gallery_image(
                str(image["id"]),
                [str(version) for version in image.get("versions") or ()],
                _image_facts(image),
            )

    @staticmethod
    def _subnet_reference(subscription: str, group: str, reference: str) -> str:
        if reference.startswith("/"):
            return reference
        vnet, subnet = reference.split("/", 1)
        return resource_id(
            subscription, group, "Microsoft.Network", "virtualNetworks", vnet, "subnets", subnet
        )

    @staticmethod
    def _identity_reference(subscription: str, group: str, reference: str) -> str:
        if reference.startswith("/"):
            return reference
        return resource_id(
            subscription, group, "Microsoft.ManagedIdentity", "userAssignedIdentities", reference
        )

    def apply_file(self, path: Path) -> None:
        self.apply(load_seed_file(path))

    def snapshot(self) -> dict[str, Any]:
        """A JSON summary of the estate: IDs by kind, scale-set instances, subnet usage."""
        with self.state.locked():
            return {
                "tenantId": self.state.tenant_id,
                "resourceGroups": [
                    {"subscription": group.subscription, "name": group.name, "location": group.location}
                    for group in self.state.resource_groups.values()
                ],
                "virtualMachines": [vm.identifier for vm in self.state.virtual_machines.values()],
                "scaleSets": {
                    item.resource.identifier: {
                        "capacity": item.resource.document["sku"].get("capacity"),
                        "instances": [instance.identifier for instance in item.instances.values()],
                    }
                    for item in self.state.scale_sets.values()
                },
                "networkInterfaces": [nic.identifier for nic in self.state.network_interfaces.values()],
                "subnets": {
                    subnet.resource.identifier: {"used": subnet.pool.used, "limit": subnet.pool.limit}
                    for subnet in self.state.subnets.values()
                },
                "identities": {
                    identity.identifier: {
                        "clientId": identity.properties["clientId"],
                        "principalId": identity.properties["principalId"],
                    }
                    for identity in self.state.identities.values()
                },
            }
