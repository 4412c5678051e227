"""Microsoft.Compute virtual machine scale sets (Uniform and Flexible) and their instances:
model GET/PATCH/PUT, capacity changes that create and remove instances, the instance list, GET,
PUT (the per-instance model, including its NIC IP configurations), delete and instance view.

Uniform instances are named ``<scale set>_<instance id>`` with computer names
``<prefix><instance id in base 36, 6 digits>`` and read-only NICs (:mod:`network`); Flexible
members are standalone VMs ``<scale set>_<8 hex>`` with their own NIC, listed by name as
instance ID. Members being created are ``Creating`` and members being removed ``Deleting`` until
their long-running operation finishes.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from nodewright.cloud.emulator import network
from nodewright.cloud.emulator.compute import (
    check_linked_image,
    computer_name,
    expand_instance_view,
    group_name,
    instance_view,
    merge,
    new_virtual_machine,
    now_iso,
    resource_location,
    start_compute_operation,
    update_machine,
    with_server_defaults,
    writable_fields,
)
from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.emulator.identities import apply_identity
from nodewright.cloud.emulator.long_running import OperationError
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router
from nodewright.cloud.emulator.state import EmulatorState, Resource, ScaleSet, resource_id

__all__ = ["new_scale_set", "register", "scale_to"]

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
        with_server_defaults(profile)
        profile.setdefault("timeCreated", properties["timeCreated"])
    if str(properties["orchestrationMode"]).lower() == "uniform":
        properties.setdefault("upgradePolicy", {"mode": "Manual"})
        properties.setdefault("overprovision", False)
        properties.setdefault("singlePlacementGroup", True)
    document: dict[str, Any] = {
        "id": arm_id,
        "name": name,
        "type": _SCALE_SET_TYPE,
        "location": location,
        "tags": dict(tags or {}),
        "sku": {"name": "Standard_D4s_v5", "tier": "Standard", "capacity": 0, **sku},
        "properties": properties,
    }
    if identity:
        document["identity"] = identity
    scale_set = ScaleSet(Resource(document))
    state.scale_sets[arm_id.lower()] = scale_set
    return scale_set


def _flexible_members(state: EmulatorState, scale_set: ScaleSet) -> list[Resource]:
    key = scale_set.resource.identifier.lower()
    return [
        machine
        for machine in state.virtual_machines.values()
        if str((machine.properties.get("virtualMachineScaleSet") or {}).get("id", "")).lower() == key
    ]


def _members(state: EmulatorState, scale_set: ScaleSet) -> list[Resource]:
    """Instances (Uniform) or member VMs (Flexible), in creation order."""
    if scale_set.flexible:
        return _flexible_members(state, scale_set)
    return list(scale_set.instances.values())


def _model(scale_set: ScaleSet) -> dict[str, Any]:
    model: dict[str, Any] = scale_set.resource.properties.setdefault("virtualMachineProfile", {})
    return model


def _new_uniform_instance(state: EmulatorState, scale_set: ScaleSet) -> Resource:
    index = scale_set.next_index
    scale_set.next_index += 1
    model = _model(scale_set)
    document = scale_set.resource.document
    arm_id = f"{scale_set.resource.identifier}/virtualMachines/{index}"
    prefix = (model.get("osProfile") or {}).get("computerNamePrefix") or scale_set.resource.name
    nic_configurations = copy.deepcopy(
        (model.get("networkProfile") or {}).get("networkInterfaceConfigurations") or []
    )
    os_profile = {
        key: value
        for key, value in (model.get("osProfile") or {}).items()
        if key not in ("computerNamePrefix", "customData")
    }
    os_profile["computerName"] = computer_name(str(prefix), index)
    instance = Resource(
        {
            "id": arm_id,
            "name": f"{scale_set.resource.name}_{index}",
            "type": _INSTANCE_TYPE,
            "location": document.get("location"),
            "instanceId": str(index),
            "sku": {"name": document["sku"].get("name"), "tier": document["sku"].get("tier", "Standard")},
            "tags": copy.deepcopy(document.get("tags") or {}),
            "properties": {
                "latestModelApplied": True,
                "vmId": str(uuid.uuid4()),
                "provisioningState": "Creating",
                "hardwareProfile": {"vmSize": document["sku"].get("name")},
                "storageProfile": copy.deepcopy(model.get("storageProfile") or {}),
                "osProfile": os_profile,
                "networkProfile": {
                    "networkInterfaces": [
                        {
                            "id": f"{arm_id}/networkInterfaces/{configuration.get('name')}",
                            "properties": {
                                "primary": bool((configuration.get("properties") or {}).get("primary"))
                            },
                        }
                        for configuration in nic_configurations
                    ]
                },
                "networkProfileConfiguration": {"networkInterfaceConfigurations": nic_configurations},
                "timeCreated": now_iso(),
            },
        },
        model_generation=scale_set.model_generation,
    )
    if "zones" in document:
        instance.document["zones"] = list(document["zones"])[:1]
    network.sync_instance_addresses(state, instance)
    scale_set.instances[str(index)] = instance
    return instance


def _new_flexible_member(state: EmulatorState, scale_set: ScaleSet) -> Resource:
    model = _model(scale_set)
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


def _remove_member(state: EmulatorState, scale_set: ScaleSet, member: Resource) -> None:
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
    return [member for member in _members(state, scale_set) if member.provisioning_state != "Deleting"]


def scale_to(
    state: EmulatorState, scale_set: ScaleSet, capacity: int
) -> tuple[list[Resource], list[Resource]]:
    """Create or mark for deletion members until ``capacity`` are live; returns (created, deleting).
    New members are ``Creating``, removed ones ``Deleting``; finish them with :func:`_finish_members`.
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
            _remove_member(state, scale_set, member)
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


def _finish_members(
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
            _remove_member(state, scale_set, member)
        else:
            member.provisioning_state = "Failed"
            member.touch()


def _scale_set_name(request: ArmRequest) -> str:
    return request.parameters.get("vmScaleSetName") or request.parameters["virtualMachineScaleSetName"]


def _scale_set_id(request: ArmRequest) -> str:
    return resource_id(
        request.parameters["subscriptionId"],
        request.parameters["resourceGroupName"],
        _NAMESPACE,
        "virtualMachineScaleSets",
        _scale_set_name(request),
    )


def _find_scale_set(state: EmulatorState, request: ArmRequest) -> ScaleSet:
    group = group_name(state, request)
    scale_set = state.scale_sets.get(_scale_set_id(request).lower())
    if scale_set is None:
        raise ArmError.resource_not_found(_SCALE_SET_TYPE, _scale_set_name(request), group)
    return scale_set


def _find_member(state: EmulatorState, scale_set: ScaleSet, instance_id: str, group: str) -> Resource:
    if scale_set.flexible:
        for member in _flexible_members(state, scale_set):
            if member.name.lower() == instance_id.lower():
                return member
    else:
        instance = scale_set.instances.get(instance_id)
        if instance is not None:
            return instance
    raise ArmError.resource_not_found(_INSTANCE_TYPE, f"{scale_set.resource.name}/{instance_id}", group)


def _render_member(scale_set: ScaleSet, member: Resource, *, with_instance_view: bool) -> dict[str, Any]:
    document = member.render()
    if scale_set.flexible:
        document["instanceId"] = member.name
    else:
        document["properties"]["latestModelApplied"] = member.model_generation == scale_set.model_generation
    if with_instance_view:
        document["properties"]["instanceView"] = instance_view(member)
    return document


def get_scale_set(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    return ArmResponse.of(_find_scale_set(state, request).resource)


def list_scale_sets(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    prefix = f"/subscriptions/{request.parameters['subscriptionId']}/resourcegroups/{group}/".lower()
    values = [item.resource.render() for key, item in state.scale_sets.items() if key.startswith(prefix)]
    return ArmResponse(200, {"value": values})


def _update_scale_set(
    state: EmulatorState,
    request: ArmRequest,
    scale_set: ScaleSet,
    body: dict[str, Any],
    *,
    patch: bool,
    status: int,
) -> ArmResponse:
    resource = scale_set.resource
    previous = copy.deepcopy(resource.document)
    previous_generation = scale_set.model_generation
    identity = apply_identity(
        state, resource.identifier, resource.document.get("identity"), body.get("identity"), patch=patch
    )
    writable = writable_fields(body)
    model_change = (writable.get("properties") or {}).get("virtualMachineProfile")
    if isinstance(model_change, dict):
        check_linked_image(state, resource.identifier, model_change.get("storageProfile"))
    capacity = (writable.get("sku") or {}).get("capacity")
    merge(resource.document, writable)
    if identity is None:
        resource.document.pop("identity", None)
    else:
        resource.document["identity"] = identity
    if model_change:
        scale_set.model_generation += 1
    created: list[Resource] = []
    deleting: list[Resource] = []
    if capacity is not None:
        try:
            created, deleting = scale_to(state, scale_set, int(capacity))
        except ArmError:
            resource.document = previous
            scale_set.model_generation = previous_generation
            raise
    resource.provisioning_state = "Updating"
    resource.touch()

    def succeed() -> None:
        resource.provisioning_state = "Succeeded"
        _finish_members(state, scale_set, created, deleting, succeeded=True)

    def fail(error: OperationError) -> None:
        del error
        for member in created:
            _remove_member(state, scale_set, member)
        for member in deleting:
            member.provisioning_state = "Succeeded"
        resource.document = previous
        scale_set.model_generation = previous_generation
        resource.provisioning_state = "Failed"
        resource.touch()

    headers = start_compute_operation(state, request, resource_location(resource), succeed, fail)
    return ArmResponse.of(resource, status, headers)


def update_scale_set(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    scale_set = _find_scale_set(state, request)
    request.check_preconditions(scale_set.resource, scale_set.resource.identifier)
    return _update_scale_set(state, request, scale_set, request.json_object(), patch=True, status=200)


def create_or_update_scale_set(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = state.require_resource_group(
        request.parameters["subscriptionId"], request.parameters["resourceGroupName"]
    )
    body = request.json_object()
    arm_id = _scale_set_id(request)
    existing = state.scale_sets.get(arm_id.lower())
    request.check_preconditions(existing.resource if existing else None, arm_id)
    if existing is not None:
        return _update_scale_set(state, request, existing, body, patch=False, status=200)
    identity = apply_identity(state, arm_id, None, body.get("identity"), patch=False)
    writable = writable_fields(body)
    properties = writable.get("properties") or {}
    check_linked_image(state, arm_id, (properties.get("virtualMachineProfile") or {}).get("storageProfile"))
    sku = dict(writable.get("sku") or {})
    capacity = int(sku.pop("capacity", 0) or 0)
    scale_set = new_scale_set(
        state,
        subscription=request.parameters["subscriptionId"],
        resource_group=group.name,
        name=_scale_set_name(request),
        location=str(body.get("location") or group.location),
        sku=sku,
        properties={**properties, "provisioningState": "Creating"},
        identity=identity,
        tags=body.get("tags") if isinstance(body.get("tags"), dict) else None,
    )
    if isinstance(body.get("zones"), list):
        scale_set.resource.document["zones"] = list(body["zones"])
    try:
        created, _ = scale_to(state, scale_set, capacity)
    except ArmError:
        del state.scale_sets[arm_id.lower()]
        raise

    def succeed() -> None:
        scale_set.resource.provisioning_state = "Succeeded"
        _finish_members(state, scale_set, created, [], succeeded=True)

    def fail(error: OperationError) -> None:
        del error
        scale_set.resource.provisioning_state = "Failed"
        _finish_members(state, scale_set, created, [], succeeded=False)

    headers = start_compute_operation(state, request, resource_location(scale_set.resource), succeed, fail)
    return ArmResponse.of(scale_set.resource, 201, headers)


def delete_scale_set(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group_name(state, request)  # 404 ResourceGroupNotFound first, as ARM answers
    scale_set = state.scale_sets.get(_scale_set_id(request).lower())
    if scale_set is None:
        return ArmResponse(204)
    scale_set.resource.provisioning_state = "Deleting"

    def succeed() -> None:
        for member in _members(state, scale_set):
            _remove_member(state, scale_set, member)
        state.scale_sets.pop(scale_set.resource.identifier.lower(), None)

    def fail(error: OperationError) -> None:
        del error
        scale_set.resource.provisioning_state = "Failed"

    return ArmResponse(
        202,
        None,
        start_compute_operation(state, request, resource_location(scale_set.resource), succeed, fail),
    )


def scale_set_instance_view(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    scale_set = _find_scale_set(state, request)
    summary: dict[str, int] = {}
    for member in _members(state, scale_set):
        code = f"ProvisioningState/{member.provisioning_state.lower()}"
        summary[code] = summary.get(code, 0) + 1
    provisioning = scale_set.resource.provisioning_state
    return ArmResponse(
        200,
        {
            "virtualMachine": {
                "statusesSummary": [{"code": code, "count": count} for code, count in summary.items()]
            },
            "statuses": [
                {
                    "code": f"ProvisioningState/{provisioning.lower()}",
                    "level": "Info",
                    "displayStatus": "Provisioning succeeded"
                    if provisioning == "Succeeded"
                    else provisioning,
                    "time": now_iso(),
                }
            ],
        },
    )


def _delete_members(
    state: EmulatorState, request: ArmRequest, scale_set: ScaleSet, members: list[Resource]
) -> ArmResponse:
    """Mark members Deleting and lower capacity now; remove them when the operation succeeds."""
    members = [member for member in members if member.provisioning_state != "Deleting"]
    sku = scale_set.resource.document["sku"]
    previous_capacity = int(sku.get("capacity", 0))
    sku["capacity"] = max(0, previous_capacity - len(members))
    for member in members:
        member.provisioning_state = "Deleting"
        member.touch()
    scale_set.resource.touch()

    def succeed() -> None:
        for member in members:
            _remove_member(state, scale_set, member)

    def fail(error: OperationError) -> None:
        del error
        sku["capacity"] = previous_capacity
        for member in members:
            member.provisioning_state = "Failed"
            member.touch()

    return ArmResponse(
        202,
        None,
        start_compute_operation(state, request, resource_location(scale_set.resource), succeed, fail),
    )


def delete_instances(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    scale_set = _find_scale_set(state, request)
    body = request.json_object()
    instance_ids = body.get("instanceIds")
    if not isinstance(instance_ids, list) or not instance_ids:
        raise ArmError.invalid_parameter("instanceIds must list at least one instance.", target="instanceIds")
    members = [_find_member(state, scale_set, str(instance_id), group) for instance_id in instance_ids]
    return _delete_members(state, request, scale_set, members)


def list_instances(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    scale_set = _find_scale_set(state, request)
    expand = expand_instance_view(request)
    values = [
        _render_member(scale_set, member, with_instance_view=expand) for member in _members(state, scale_set)
    ]
    return ArmResponse(200, {"value": values})


def get_instance(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    scale_set = _find_scale_set(state, request)
    member = _find_member(state, scale_set, request.parameters["instanceId"], group)
    body = _render_member(scale_set, member, with_instance_view=expand_instance_view(request))
    return ArmResponse(200, body, {"ETag": member.etag})


def instance_instance_view(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    scale_set = _find_scale_set(state, request)
    return ArmResponse(
        200, instance_view(_find_member(state, scale_set, request.parameters["instanceId"], group))
    )


def update_instance(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    scale_set = _find_scale_set(state, request)
    member = _find_member(state, scale_set, request.parameters["instanceId"], group)
    request.check_preconditions(member, member.identifier)
    body = request.json_object()
    if scale_set.flexible:
        return update_machine(state, request, member, body, patch=False)
    previous = copy.deepcopy(member.document)
    writable = writable_fields(body)
    writable.pop("sku", None)
    check_linked_image(state, member.identifier, (writable.get("properties") or {}).get("storageProfile"))
    merge(member.document, writable)
    try:
        network.sync_instance_addresses(state, member)
    except ArmError:
        member.document = previous
        raise
    member.provisioning_state = "Updating"
    member.touch()

    def succeed() -> None:
        member.provisioning_state = "Succeeded"

    def fail(error: OperationError) -> None:
        del error
        member.document = previous
        network.sync_instance_addresses(state, member)
        member.provisioning_state = "Failed"
        member.touch()

    headers = start_compute_operation(state, request, resource_location(member), succeed, fail)
    response_body = _render_member(scale_set, member, with_instance_view=False)
    return ArmResponse(200, response_body, {"ETag": member.etag, **headers})


def delete_instance(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    scale_set = _find_scale_set(state, request)
    try:
        member = _find_member(state, scale_set, request.parameters["instanceId"], group)
    except ArmError:
        return ArmResponse(204)
    return _delete_members(state, request, scale_set, [member])


def register(router: Router) -> None:
    group = "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
    sets = group + "virtualMachineScaleSets"
    one = sets + "/{vmScaleSetName}"
    router.add("GET", sets, "VirtualMachineScaleSets.list", list_scale_sets)
    router.add("GET", one, "VirtualMachineScaleSets.get", get_scale_set)
    router.add("PUT", one, "VirtualMachineScaleSets.create_or_update", create_or_update_scale_set)
    router.add("PATCH", one, "VirtualMachineScaleSets.update", update_scale_set)
    router.add("DELETE", one, "VirtualMachineScaleSets.delete", delete_scale_set)
    router.add("POST", one + "/delete", "VirtualMachineScaleSets.delete_instances", delete_instances)
    router.add(
        "GET", one + "/instanceView", "VirtualMachineScaleSets.get_instance_view", scale_set_instance_view
    )
    instances = one + "/virtualMachines"
    router.add("GET", instances, "VirtualMachineScaleSetVMs.list", list_instances)
    router.add("GET", instances + "/{instanceId}", "VirtualMachineScaleSetVMs.get", get_instance)
    router.add("PUT", instances + "/{instanceId}", "VirtualMachineScaleSetVMs.update", update_instance)
    router.add("DELETE", instances + "/{instanceId}", "VirtualMachineScaleSetVMs.delete", delete_instance)
    router.add(
        "GET",
        instances + "/{instanceId}/instanceView",
        "VirtualMachineScaleSetVMs.get_instance_view",
        instance_instance_view,
    )
