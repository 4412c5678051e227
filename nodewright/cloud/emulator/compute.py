"""Microsoft.Compute virtual machines, and what all Compute writes share: the merge semantics
(omitted properties kept, arrays replaced whole, ``imageReference`` replaced as a unit), the
identity delta, the linked-scope check, instance views and long-running operations.

A write that links an image or identity under a scope denied by
:meth:`EmulatorState.deny_linked_access` fails with 403 LinkedAuthorizationFailed. Scale sets and
their instances live in :mod:`scale_sets`, which builds on these helpers.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.identities import apply_identity
from nodewright.cloud.emulator.instance_views import instance_view
from nodewright.cloud.emulator.long_running import OperationError
from nodewright.cloud.emulator.machine_defaults import with_disk_defaults, with_server_defaults
from nodewright.cloud.emulator.machine_resources import release_attached_resources
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router, start_operation
from nodewright.cloud.emulator.state import EmulatorState, Resource, now_iso, resource_id, tracked_resource

__all__ = [
    "check_image_exists",
    "check_linked_image",
    "computer_name",
    "expand_instance_view",
    "group_name",
    "instance_view",
    "merge",
    "new_virtual_machine",
    "now_iso",
    "register",
    "resource_location",
    "start_compute_operation",
    "start_update",
    "update_machine",
    "writable_fields",
]

_NAMESPACE = "Microsoft.Compute"
_VM_TYPE = "Microsoft.Compute/virtualMachines"
_READ_ONLY_TOP = {"id", "name", "type", "etag", "instanceId", "resources", "identity"}
_READ_ONLY_PROPERTIES = {
    "provisioningState",
    "vmId",
    "instanceView",
    "uniqueId",
    "latestModelApplied",
    "timeCreated",
}
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_REPLACED_AS_A_UNIT = {"imageReference"}


def computer_name(prefix: str, index: int) -> str:
    """Uniform scale-set computer name: prefix plus the instance ID in base 36, six digits."""
    digits = ""
    value = index
    while True:
        value, remainder = divmod(value, 36)
        digits = _BASE36[remainder] + digits
        if value == 0:
            break
    return prefix + digits.rjust(6, "0")


def merge(target: dict[str, Any], incoming: dict[str, Any]) -> None:
    """Compute merge: objects merge recursively, arrays and scalars replace, nulls are ignored.
    ``imageReference`` is replaced as one object (without its null keys), as ARM validates and
    stores it whole: switching from a marketplace image to an image ID drops publisher/offer/..."""
    for key, value in incoming.items():
        if value is None:
            continue
        if key in _REPLACED_AS_A_UNIT and isinstance(value, dict):
            target[key] = {name: copy.deepcopy(item) for name, item in value.items() if item is not None}
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def writable_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The body without read-only fields (top level and properties)."""
    result = {key: value for key, value in body.items() if key not in _READ_ONLY_TOP}
    properties = body.get("properties")
    if isinstance(properties, dict):
        result["properties"] = {
            key: value for key, value in properties.items() if key not in _READ_ONLY_PROPERTIES
        }
    return result


_NEVER_RETURNED = ("adminPassword", "customData")


def _strip_secrets(properties: Any, *, keep_user_data: bool) -> None:
    if not isinstance(properties, dict):
        return
    os_profile = properties.get("osProfile")
    if isinstance(os_profile, dict):
        for key in _NEVER_RETURNED:
            os_profile.pop(key, None)
    if not keep_user_data:
        properties.pop("userData", None)
    _strip_secrets(properties.get("virtualMachineProfile"), keep_user_data=keep_user_data)


def redact_for_response(body: Any, query: dict[str, str]) -> None:
    """What Azure never sends back, removed in place from a Compute answer: ``adminPassword`` and
    ``customData`` never; ``userData`` unless ``$expand=userData``. Lists are walked."""
    if not isinstance(body, dict):
        return
    expand = next((value for key, value in query.items() if key.lower() == "$expand"), "")
    keep_user_data = "userdata" in expand.lower()
    listed = body.get("value")
    for document in listed if isinstance(listed, list) else [body]:
        if isinstance(document, dict):
            _strip_secrets(document.get("properties"), keep_user_data=keep_user_data)


def check_linked_image(state: EmulatorState, target_id: str, storage_profile: Any) -> None:
    """The image a write names must be readable (403 LinkedAuthorizationFailed under a denied
    scope) and must exist (:func:`check_image_exists`)."""
    if not isinstance(storage_profile, dict):
        return
    image_id = (storage_profile.get("imageReference") or {}).get("id")
    if image_id and state.linked_access_denied(str(image_id)):
        raise ArmError(
            403,
            ErrorCode.LINKED_AUTHORIZATION_FAILED,
            f"The client '{state.tenant_id}' has permission to perform action on scope '{target_id}'; "
            "however, it does not have permission to perform action "
            "'Microsoft.Compute/galleries/images/versions/read' "
            f"on the linked scope(s) '{image_id}' or the linked scope(s) are invalid.",
        )
    check_image_exists(state, storage_profile.get("imageReference"))


def check_image_exists(state: EmulatorState, reference: Any) -> None:
    """A marketplace image (publisher, offer, sku, version) must be in the catalog, else 404
    PlatformImageNotFound; a gallery image under a gallery the catalog knows must be one of its
    versions, else 404 GalleryImageNotFound. Images of galleries the emulator was never told about
    are taken as they are (nothing to check them against)."""
    if not isinstance(reference, dict) or state.images.resolve(reference) is not None:
        return
    gallery_id = reference.get("id") or reference.get("communityGalleryImageId")
    gallery_id = gallery_id or reference.get("sharedGalleryImageId")
    if gallery_id:
        if state.images.knows_gallery_of(str(gallery_id)):
            raise ArmError(
                404,
                ErrorCode.GALLERY_IMAGE_NOT_FOUND,
                f"The gallery image {gallery_id} is not available.",
                target="imageReference",
            )
        return
    if not reference.get("publisher") and not reference.get("offer"):
        return
    urn = ":".join(str(reference.get(key) or "") for key in ("publisher", "offer", "sku"))
    urn += ":" + str(reference.get("version") or "latest")
    raise ArmError(
        404,
        ErrorCode.PLATFORM_IMAGE_NOT_FOUND,
        f"The platform image '{urn}' is not available. Verify that all fields in the storage profile are "
        "correct. For more details about storage profile information, please refer to "
        "https://aka.ms/storageprofile",
        target="imageReference",
    )


def new_virtual_machine(
    state: EmulatorState,
    *,
    subscription: str,
    resource_group: str,
    name: str,
    location: str,
    properties: dict[str, Any],
    identity: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
    zones: list[str] | None = None,
) -> Resource:
    """Store a VM built from ``properties`` (networkProfile must name existing NICs); the NICs are
    linked back to it. Call under the state lock."""
    arm_id = resource_id(subscription, resource_group, _NAMESPACE, "virtualMachines", name)
    properties = copy.deepcopy(properties)
    properties.setdefault("provisioningState", "Succeeded")
    properties["vmId"] = str(uuid.uuid4())
    properties.setdefault("osProfile", {}).setdefault("computerName", name)
    reference = (properties.get("storageProfile") or {}).get("imageReference")
    resolved = state.images.resolve(reference)
    image = state.images.facts(reference)
    with_server_defaults(properties, image)
    with_disk_defaults(
        properties,
        disk_prefix=name,
        resource_group_id=f"/subscriptions/{subscription}/resourceGroups/{resource_group}",
        resolved=resolved,
        image=image,
    )
    properties["timeCreated"] = now_iso()
    document = {**tracked_resource(arm_id, _VM_TYPE, location, tags), "properties": properties}
    if zones:
        document["zones"] = list(zones)
    if identity:
        document["identity"] = identity
    machine = Resource(document, assigned_host=state.place_on_host(properties.get("hostGroup")))
    state.virtual_machines[arm_id.lower()] = machine
    for reference in (properties.get("networkProfile") or {}).get("networkInterfaces") or []:
        nic = state.network_interfaces.get(str(reference.get("id", "")).lower())
        if nic is not None:
            nic.properties["virtualMachine"] = {"id": arm_id}
            nic.touch()
    return machine


def group_name(state: EmulatorState, request: ArmRequest) -> str:
    return request.resource_group(state).name


def _vm_id(request: ArmRequest) -> str:
    return request.resource_id(_NAMESPACE, "virtualMachines", request.parameters["vmName"])


def _find_vm(state: EmulatorState, request: ArmRequest) -> Resource:
    return request.require_resource(state, state.virtual_machines, _VM_TYPE, "vmName")


def expand_instance_view(request: ArmRequest) -> bool:
    return "instanceview" in (request.query_value("$expand") or "").lower()


def resource_location(resource: Resource) -> str:
    return str(resource.document.get("location") or "eastus")


def start_compute_operation(
    state: EmulatorState,
    request: ArmRequest,
    resource: Resource,
    on_success: Callable[[], None],
    on_failure: Callable[[OperationError], None],
) -> dict[str, str]:
    """Start the Compute operation that finishes a change of ``resource`` (in its location); its headers."""
    return start_operation(
        state,
        request,
        namespace=_NAMESPACE,
        location=resource_location(resource),
        on_success=on_success,
        on_failure=on_failure,
    )


def start_update(
    state: EmulatorState,
    request: ArmRequest,
    machine: Resource,
    previous: dict[str, Any],
    restored: Callable[[], None] = lambda: None,
) -> dict[str, str]:
    """Mark ``machine`` (a VM or scale-set instance, already changed) Updating and start the
    operation that ends the update: Succeeded, or back to the ``previous`` document (then
    ``restored``, for what follows from it) and Failed. The operation's headers."""
    machine.provisioning_state = "Updating"
    machine.touch()

    def succeed() -> None:
        machine.provisioning_state = "Succeeded"

    def fail(error: OperationError) -> None:
        del error
        machine.document = previous
        restored()
        machine.provisioning_state = "Failed"
        machine.touch()

    return start_compute_operation(state, request, machine, succeed, fail)


def get_vm(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    machine = _find_vm(state, request)
    response = ArmResponse.of(machine)
    if expand_instance_view(request):
        response.body["properties"]["instanceView"] = instance_view(state.images, machine)
    return response


def list_vms(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = group_name(state, request)
    prefix = f"/subscriptions/{request.parameters['subscriptionId']}/resourcegroups/{group}/".lower()
    return ArmResponse(
        200, {"value": [vm.render() for key, vm in state.virtual_machines.items() if key.startswith(prefix)]}
    )


def vm_instance_view(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    return ArmResponse(200, instance_view(state.images, _find_vm(state, request)))


def update_machine(
    state: EmulatorState, request: ArmRequest, machine: Resource, body: dict[str, Any], *, patch: bool
) -> ArmResponse:
    """PATCH or PUT of an existing VM: identity delta, merge, LRO with rollback on failure."""
    previous = copy.deepcopy(machine.document)
    identity = apply_identity(
        state, machine.identifier, machine.document.get("identity"), body.get("identity"), patch=patch
    )
    writable = writable_fields(body)
    check_linked_image(state, machine.identifier, (writable.get("properties") or {}).get("storageProfile"))
    merge(machine.document, writable)
    if identity is None:
        machine.document.pop("identity", None)
    else:
        machine.document["identity"] = identity
    headers = start_update(state, request, machine, previous)
    return ArmResponse.of(machine, 200, headers)


def update_vm(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    machine = _find_vm(state, request)
    request.check_preconditions(machine, machine.identifier)
    return update_machine(state, request, machine, request.json_object(), patch=True)


def create_or_update_vm(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = request.resource_group(state)
    body = request.json_object()
    arm_id, existing = request.current(state.virtual_machines, _NAMESPACE, "virtualMachines", "vmName")
    if existing is not None:
        return update_machine(state, request, existing, body, patch=False)
    identity = apply_identity(state, arm_id, None, body.get("identity"), patch=False)
    writable = writable_fields(body)
    properties = writable.get("properties") or {}
    check_linked_image(state, arm_id, properties.get("storageProfile"))
    for reference in (properties.get("networkProfile") or {}).get("networkInterfaces") or []:
        if str(reference.get("id", "")).lower() not in state.network_interfaces:
            raise ArmError(
                400,
                "InvalidResourceReference",
                f"Resource {reference.get('id')} referenced by resource {arm_id} was not found.",
            )
    machine = new_virtual_machine(
        state,
        subscription=request.parameters["subscriptionId"],
        resource_group=group.name,
        name=request.parameters["vmName"],
        location=request.requested_location(group.location),
        properties={**properties, "provisioningState": "Creating"},
        identity=identity,
        tags=request.requested_tags(),
        zones=body.get("zones") if isinstance(body.get("zones"), list) else None,
    )

    def succeed() -> None:
        machine.provisioning_state = "Succeeded"

    def fail(error: OperationError) -> None:
        del error
        machine.provisioning_state = "Failed"
        machine.touch()

    headers = start_compute_operation(state, request, machine, succeed, fail)
    return ArmResponse.of(machine, 201, headers)


def delete_vm(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group_name(state, request)
    machine = state.virtual_machines.get(_vm_id(request).lower())
    if machine is None:
        return ArmResponse(204)
    machine.provisioning_state = "Deleting"
    machine.touch()
    # A Flexible scale set's member deleted through the VM API lowers the set's capacity, as in Azure.
    member_of = str((machine.properties.get("virtualMachineScaleSet") or {}).get("id", "")).lower()
    scale_set = state.scale_sets.get(member_of)
    sku = scale_set.resource.document.get("sku") if scale_set is not None else None
    if isinstance(sku, dict):
        sku["capacity"] = max(0, int(sku.get("capacity", 0)) - 1)

    def succeed() -> None:
        state.virtual_machines.pop(machine.identifier.lower(), None)
        release_attached_resources(state, machine)  # NICs marked deleteOption Delete go with it

    def fail(error: OperationError) -> None:
        del error
        machine.provisioning_state = "Failed"
        machine.touch()
        if isinstance(sku, dict):
            sku["capacity"] = int(sku.get("capacity", 0)) + 1

    return ArmResponse(202, None, start_compute_operation(state, request, machine, succeed, fail))


def register(router: Router) -> None:
    group = "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute/"
    vms = group + "virtualMachines"
    router.add("GET", vms, "VirtualMachines.list", list_vms)
    router.add("GET", vms + "/{vmName}", "VirtualMachines.get", get_vm)
    router.add("PUT", vms + "/{vmName}", "VirtualMachines.create_or_update", create_or_update_vm)
    router.add("PATCH", vms + "/{vmName}", "VirtualMachines.update", update_vm)
    router.add("DELETE", vms + "/{vmName}", "VirtualMachines.delete", delete_vm)
    router.add("GET", vms + "/{vmName}/instanceView", "VirtualMachines.instance_view", vm_instance_view)
