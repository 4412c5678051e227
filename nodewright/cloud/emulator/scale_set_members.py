"""The members of Microsoft.Compute virtual machine scale sets: a new scale set's stored model, the
Uniform instances and Flexible member VMs built from it when capacity grows, and their removal.

Uniform instances are named ``<scale set>_<instance id>`` with computer names
``<prefix><instance id in base 36, 6 digits>``; Flexible members are standalone VMs
``<scale set>_<8 hex>`` with their own NIC. New members are ``Creating`` and removed ones
``Deleting`` until :func:`finish_members` settles them. Call everything under the state lock.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from nodewright.cloud.emulator import network
from nodewright.cloud.emulator.compute import computer_name, new_virtual_machine, now_iso
from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.emulator.extensions import model_extensions
from nodewright.cloud.emulator.machine_defaults import with_disk_defaults, with_server_defaults
from nodewright.cloud.emulator.state import EmulatorState, Resource, ScaleSet, resource_id, tracked_resource

__all__ = [
    "finish_members",
    "flexible_members",
    "members",
    "new_scale_set",
    "remove_member",
    "scale_set_model",
    "scale_to",
]

_NAMESPACE = "Microsoft.Compute"
_SCALE_SET_TYPE = "Microsoft.Compute/virtualMachineScaleSets"
_INSTANCE_TYPE = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines"


def new_scale_set(
    state: EmulatorState,
    *,
    subscription: str,
    resource_group: str,
    name: str,
    location: str,
    sku: dict[str, Any],
    properties: dict[str, Any],
    identity: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
) -> ScaleSet:
    """Store a scale set (no instances yet; call :func:`scale_to`). Call under the state lock."""
    arm_id = resource_id(subscription, resource_group, _NAMESPACE, "virtualMachineScaleSets", name)
    properties = copy.deepcopy(properties)
    properties.setdefault("orchestrationMode", "Uniform")
    properties.setdefault("provisioningState", "Succeeded")
    properties["uniqueId"] = str(uuid.uuid4())
    properties["timeCreated"] = now_iso()
    profile = properties.get("virtualMachineProfile")
    if isinstance(profile, dict):
        with_server_defaults(
            profile, state.images.facts((profile.get("storageProfile") or {}).get("imageReference"))
        )
        profile.setdefault("timeCreated", properties["timeCreated"])
    if str(properties["orchestrationMode"]).lower() == "uniform":
        properties.setdefault("upgradePolicy", {"mode": "Manual"})
        properties.setdefault("overprovision", False)
        properties.setdefault("singlePlacementGroup", True)
    document = {
        **tracked_resource(arm_id, _SCALE_SET_TYPE, location, tags),
        "sku": {"name": "Standard_D4s_v5", "tier": "Standard", "capacity": 0, **sku},
        "properties": properties,
    }
    if identity:
        document["identity"] = identity
    scale_set = ScaleSet(Resource(document))
    state.scale_sets[arm_id.lower()] = scale_set
    return scale_set


def flexible_members(state: EmulatorState, scale_set: ScaleSet) -> list[Resource]:
    key = scale_set.resource.identifier.lower()
    return [
        machine
        for machine in state.virtual_machines.values()
        if str((machine.properties.get("virtualMachineScaleSet") or {}).get("id", "")).lower() == key
    ]


def members(state: EmulatorState, scale_set: ScaleSet) -> list[Resource]:
    """Instances (Uniform) or member VMs (Flexible), in creation order."""
    if scale_set.flexible:
        return flexible_members(state, scale_set)
    return list(scale_set.instances.values())


def scale_set_model(scale_set: ScaleSet) -> dict[str, Any]:
    model: dict[str, Any] = scale_set.resource.properties.setdefault("virtualMachineProfile", {})
    return model


# What an instance takes from the scale set's model besides its storage, OS and network profiles.
_COPIED_FROM_MODEL = (
    "diagnosticsProfile",
    "securityProfile",
    "userData",
    "additionalCapabilities",
    "licenseType",
    "billingProfile",
)


def _instance_properties(scale_set: ScaleSet, arm_id: str, index: int) -> dict[str, Any]:
    """A new Uniform instance's properties, built from the scale set's model as Azure does."""
    model = scale_set_model(scale_set)
    sku = scale_set.resource.document["sku"]
    prefix = (model.get("osProfile") or {}).get("computerNamePrefix") or scale_set.resource.name
    nic_configurations = copy.deepcopy(
        (model.get("networkProfile") or {}).get("networkInterfaceConfigurations") or []
    )
    os_profile = {
        key: copy.deepcopy(value)
        for key, value in (model.get("osProfile") or {}).items()
        if key not in ("computerNamePrefix", "customData")
    }
    os_profile["computerName"] = computer_name(str(prefix), index)
    properties: dict[str, Any] = {
        "latestModelApplied": True,
        "modelDefinitionApplied": "VirtualMachineScaleSet",
        "vmId": str(uuid.uuid4()),
        "provisioningState": "Creating",
        "hardwareProfile": {**copy.deepcopy(model.get("hardwareProfile") or {}), "vmSize": sku.get("name")},
        "storageProfile": copy.deepcopy(model.get("storageProfile") or {}),
        "osProfile": os_profile,
        "networkProfile": {
            "networkInterfaces": [
                {
                    "id": f"{arm_id}/networkInterfaces/{configuration.get('name')}",
                    "properties": {"primary": bool((configuration.get("properties") or {}).get("primary"))},
                }
                for configuration in nic_configurations
            ]
        },
        "networkProfileConfiguration": {"networkInterfaceConfigurations": nic_configurations},
        "timeCreated": now_iso(),
    }
    properties.update({key: copy.deepcopy(model[key]) for key in _COPIED_FROM_MODEL if key in model})
    return properties


def _new_uniform_instance(state: EmulatorState, scale_set: ScaleSet) -> Resource:
    index = scale_set.next_index
    scale_set.next_index += 1
    document = scale_set.resource.document
    arm_id = f"{scale_set.resource.identifier}/virtualMachines/{index}"
    name = f"{scale_set.resource.name}_{index}"
    properties = _instance_properties(scale_set, arm_id, index)
    reference = properties["storageProfile"].get("imageReference")
    with_disk_defaults(
        properties,
        disk_prefix=f"{scale_set.resource.name}_{name}",
        resource_group_id=arm_id.split("/providers/", 1)[0],
        resolved=state.images.resolve(reference),
        image=state.images.facts(reference),
    )
    instance = Resource(
        {
            "id": arm_id,
            "name": name,
            "type": _INSTANCE_TYPE,
            "location": document.get("location"),
            "instanceId": str(index),
            "sku": {"name": document["sku"].get("name"), "tier": document["sku"].get("tier", "Standard")},
            "tags": copy.deepcopy(document.get("tags") or {}),
            "properties": properties,
        },
        model_generation=scale_set.model_generation,
    )
    instance.document["resources"] = model_extensions(
        arm_id, document.get("location"), scale_set_model(scale_set)
    )
    instance.assigned_host = state.place_on_host(scale_set.resource.properties.get("hostGroup"))
    if "zones" in document:
        instance.document["zones"] = list(document["zones"])[:1]
    network.sync_instance_addresses(state, instance)
    scale_set.instances[str(index)] = instance
    return instance


def _new_flexible_member(state: EmulatorState, scale_set: ScaleSet) -> Resource:
    model = scale_set_model(scale_set)
    document = scale_set.resource.document
    subscription = scale_set.resource.identifier.split("/")[2]
    group = scale_set.resource.identifier.split("/")[4]
    name = f"{scale_set.resource.name}_{uuid.uuid4().hex[:8]}"
    nic_references = []
    created_nics: list[str] = []
    try:
        for configuration in (model.get("networkProfile") or {}).get("networkInterfaceConfigurations") or []:
            nic_id = resource_id(
                subscription,
                group,
                "Microsoft.Network",
                "networkInterfaces",
                f"{name}-{configuration.get('name')}",
            )
            body = {
                "location": document.get("location"),
                "properties": copy.deepcopy(configuration.get("properties") or {}),
            }
            network.new_network_interface(state, nic_id, str(document.get("location")), body, None)
            created_nics.append(nic_id)
            nic_references.append(
                {
                    "id": nic_id,
                    "properties": {"primary": bool((configuration.get("properties") or {}).get("primary"))},
                }
            )
    except ArmError:
        for nic_id in created_nics:
            state.network_interfaces.pop(nic_id.lower(), None)
            network.release_owner_prefix(state, f"{nic_id}/ipConfigurations/")
        raise
    prefix = (model.get("osProfile") or {}).get("computerNamePrefix") or scale_set.resource.name
    machine = new_virtual_machine(
        state,
        subscription=subscription,
        resource_group=group,
        name=name,
        location=str(document.get("location")),
        properties={
            "provisioningState": "Creating",
            "hardwareProfile": {"vmSize": document["sku"].get("name")},
            "storageProfile": copy.deepcopy(model.get("storageProfile") or {}),
            "osProfile": {"computerName": f"{prefix}{uuid.uuid4().hex[:6]}"},
            "networkProfile": {"networkInterfaces": nic_references},
            "virtualMachineScaleSet": {"id": scale_set.resource.identifier},
        },
        identity=copy.deepcopy(document.get("identity")),
        tags=copy.deepcopy(document.get("tags") or {}),
    )
    machine.model_generation = scale_set.model_generation
    return machine


def remove_member(state: EmulatorState, scale_set: ScaleSet, member: Resource) -> None:
    """Delete an instance or member VM (and a Flexible member's NICs) and free its addresses."""
    if scale_set.flexible:
        state.virtual_machines.pop(member.identifier.lower(), None)
        for reference in (member.properties.get("networkProfile") or {}).get("networkInterfaces") or []:
            nic_id = str(reference.get("id", ""))
            state.network_interfaces.pop(nic_id.lower(), None)
            network.release_owner_prefix(state, f"{nic_id}/ipConfigurations/")
    else:
        scale_set.instances.pop(str(member.document.get("instanceId")), None)
        network.release_owner_prefix(state, f"{member.identifier}/networkInterfaces/")


def _live_members(state: EmulatorState, scale_set: ScaleSet) -> list[Resource]:
    return [member for member in members(state, scale_set) if member.provisioning_state != "Deleting"]


def scale_to(
    state: EmulatorState, scale_set: ScaleSet, capacity: int
) -> tuple[list[Resource], list[Resource]]:
    """Create or mark for deletion members until ``capacity`` are live; returns (created, deleting).
    New members are ``Creating``, removed ones ``Deleting``; finish them with :func:`finish_members`.
    All-or-nothing on SubnetIsFull. Call under the state lock."""
    live = _live_members(state, scale_set)
    created: list[Resource] = []
    deleting: list[Resource] = []
    try:
        while len(live) + len(created) < capacity:
            if scale_set.flexible:
                created.append(_new_flexible_member(state, scale_set))
            else:
                created.append(_new_uniform_instance(state, scale_set))
    except ArmError:
        for member in created:
            remove_member(state, scale_set, member)
        raise
    if len(live) > capacity:
        deleting = sorted(live, key=_member_order, reverse=True)[: len(live) - capacity]
        for member in deleting:
            member.provisioning_state = "Deleting"
            member.touch()
    scale_set.resource.document["sku"]["capacity"] = capacity
    return created, deleting


def _member_order(member: Resource) -> tuple[int, str]:
    instance_id = str(member.document.get("instanceId", ""))
    return (
        (int(instance_id), "")
        if instance_id.isdigit()
        else (0, str(member.properties.get("timeCreated", "")))
    )


def finish_members(
    state: EmulatorState,
    scale_set: ScaleSet,
    created: list[Resource],
    deleting: list[Resource],
    *,
    succeeded: bool,
) -> None:
    for member in created:
        member.provisioning_state = "Succeeded" if succeeded else "Failed"
        member.touch()
    for member in deleting:
        if succeeded:
            remove_member(state, scale_set, member)
        else:
            member.provisioning_state = "Failed"
            member.touch()
