"""Microsoft.Compute virtual machine scale sets (Uniform and Flexible) and their instances:
model GET/PATCH/PUT, capacity changes that create and remove instances, the instance list, GET,
PUT (the per-instance model, including its NIC IP configurations), delete and instance view.

The members themselves are built in :mod:`scale_set_members`. Uniform instances have read-only
NICs (:mod:`network`); Flexible members are standalone VMs listed by name as instance ID. Members
being created are ``Creating`` and members being removed ``Deleting`` until their long-running
operation finishes.
"""

from __future__ import annotations

import copy
from typing import Any

from nodewright.cloud.emulator import network
from nodewright.cloud.emulator.compute import (
    check_linked_image,
    expand_instance_view,
    group_name,
    merge,
    start_compute_operation,
    start_update,
    update_machine,
    writable_fields,
)
from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.emulator.identities import apply_identity
from nodewright.cloud.emulator.instance_views import instance_view, scale_set_instance_view
from nodewright.cloud.emulator.long_running import OperationError
from nodewright.cloud.emulator.paging import paged
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router
from nodewright.cloud.emulator.scale_set_members import (
    finish_members,
    flexible_members,
    members,
    new_scale_set,
    remove_member,
    scale_to,
)
from nodewright.cloud.emulator.state import EmulatorState, Resource, ScaleSet

__all__ = ["new_scale_set", "register", "scale_to"]

_NAMESPACE = "Microsoft.Compute"
_SCALE_SET_TYPE = "Microsoft.Compute/virtualMachineScaleSets"
_INSTANCE_TYPE = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines"


def _scale_set_name(request: ArmRequest) -> str:
    return request.parameters.get("vmScaleSetName") or request.parameters["virtualMachineScaleSetName"]


def _scale_set_id(request: ArmRequest) -> str:
    return request.resource_id(_NAMESPACE, "virtualMachineScaleSets", _scale_set_name(request))


def _find_scale_set(state: EmulatorState, request: ArmRequest) -> ScaleSet:
    group = group_name(state, request)
    scale_set = state.scale_sets.get(_scale_set_id(request).lower())
    if scale_set is None:
        raise ArmError.resource_not_found(_SCALE_SET_TYPE, _scale_set_name(request), group)
    return scale_set


def _find_member(state: EmulatorState, scale_set: ScaleSet, instance_id: str, group: str) -> Resource:
    if scale_set.flexible:
        for member in flexible_members(state, scale_set):
            if member.name.lower() == instance_id.lower():
                return member
    else:
        instance = scale_set.instances.get(instance_id)
        if instance is not None:
            return instance
    raise ArmError.resource_not_found(_INSTANCE_TYPE, f"{scale_set.resource.name}/{instance_id}", group)


def _render_member(
    state: EmulatorState, scale_set: ScaleSet, member: Resource, *, with_instance_view: bool
) -> dict[str, Any]:
    document = member.render()
    if scale_set.flexible:
        document["instanceId"] = member.name
    else:
        document["properties"]["latestModelApplied"] = member.model_generation == scale_set.model_generation
    if with_instance_view:
        document["properties"]["instanceView"] = instance_view(
            state.images, member, None if scale_set.flexible else scale_set
        )
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
        finish_members(state, scale_set, created, deleting, succeeded=True)

    def fail(error: OperationError) -> None:
        del error
        for member in created:
            remove_member(state, scale_set, member)
        for member in deleting:
            member.provisioning_state = "Succeeded"
        resource.document = previous
        scale_set.model_generation = previous_generation
        resource.provisioning_state = "Failed"
        resource.touch()

    headers = start_compute_operation(state, request, resource, succeed, fail)
    return ArmResponse.of(resource, status, headers)


def update_scale_set(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    scale_set = _find_scale_set(state, request)
    request.check_preconditions(scale_set.resource, scale_set.resource.identifier)
    return _update_scale_set(state, request, scale_set, request.json_object(), patch=True, status=200)


def create_or_update_scale_set(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = request.resource_group(state)
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
        location=request.requested_location(group.location),
        sku=sku,
        properties={**properties, "provisioningState": "Creating"},
        identity=identity,
        tags=request.requested_tags(),
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
        finish_members(state, scale_set, created, [], succeeded=True)

    def fail(error: OperationError) -> None:
        del error
        scale_set.resource.provisioning_state = "Failed"
        finish_members(state, scale_set, created, [], succeeded=False)

    headers = start_compute_operation(state, request, scale_set.resource, succeed, fail)
    return ArmResponse.of(scale_set.resource, 201, headers)


def delete_scale_set(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group_name(state, request)  # 404 ResourceGroupNotFound first, as ARM answers
    scale_set = state.scale_sets.get(_scale_set_id(request).lower())
    if scale_set is None:
        return ArmResponse(204)
    scale_set.resource.provisioning_state = "Deleting"

    def succeed() -> None:
        for member in members(state, scale_set):
            remove_member(state, scale_set, member)
        state.scale_sets.pop(scale_set.resource.identifier.lower(), None)

    def fail(error: OperationError) -> None:
        del error
        scale_set.resource.provisioning_state = "Failed"

    return ArmResponse(202, None, start_compute_operation(state, request, scale_set.resource, succeed, fail))


def get_scale_set_instance_view(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    scale_set = _find_scale_set(state, request)
    return ArmResponse(200, scale_set_instance_view(scale_set, members(state, scale_set)))


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
            remove_member(state, scale_set, member)

    def fail(error: OperationError) -> None:
        del error
        sku["capacity"] = previous_capacity
        for member in members:
            member.provisioning_state = "Failed"
            member.touch()

    return ArmResponse(202, None, start_compute_operation(state, request, scale_set.resource, succeed, fail))


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
        _render_member(state, scale_set, member, with_instance_view=expand)
        for member in members(state, scale_set)
    ]
    return paged(request, values, state.list_page_size)


def get_instance(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    scale_set = _find_scale_set(state, request)
    member = _find_member(state, scale_set, request.parameters["instanceId"], group)
    body = _render_member(state, scale_set, member, with_instance_view=expand_instance_view(request))
    return ArmResponse(200, body, {"ETag": member.etag})


def instance_instance_view(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    scale_set = _find_scale_set(state, request)
    member = _find_member(state, scale_set, request.parameters["instanceId"], group)
    return ArmResponse(200, instance_view(state.images, member, None if scale_set.flexible else scale_set))


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
    headers = start_update(
        state, request, member, previous, restored=lambda: network.sync_instance_addresses(state, member)
    )
    response_body = _render_member(state, scale_set, member, with_instance_view=False)
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
        "GET", one + "/instanceView", "VirtualMachineScaleSets.get_instance_view", get_scale_set_instance_view
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
