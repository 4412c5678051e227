"""User-assigned identities (Microsoft.ManagedIdentity) and the ``identity`` block of VMs and scale
sets: the delta semantics of a PATCH (add ``{}``, remove ``null``), the 150-per-request limit, and
the errors ARM gives for an identity that does not exist or may not be assigned.

Error shapes follow what ARM returned to aad-pod-identity users: ``FailedIdentityOperation`` (400)
wrapping the ManagedIdentity provider's ``BadRequest`` for a missing identity (aad-pod-identity
#515) and for more than 150 identities in one request (aad-pod-identity #813, bicep #16559), and
``LinkedAuthorizationFailed`` (403) when the caller may not assign the identity (aad-pod-identity #585).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from nodewright.cloud.emulator.errors import IDENTITY_LIMIT_PER_REQUEST, ArmError, ErrorCode
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router
from nodewright.cloud.emulator.state import EmulatorState, Resource, resource_id, tracked_resource

__all__ = ["apply_identity", "new_identity", "register"]

_NAMESPACE = "Microsoft.ManagedIdentity"
_TYPE = "userAssignedIdentities"
_CANONICAL_TYPES = {
    "none": "None",
    "systemassigned": "SystemAssigned",
    "userassigned": "UserAssigned",
    "systemassigned,userassigned": "SystemAssigned, UserAssigned",
}


def new_identity(
    state: EmulatorState,
    *,
    subscription: str,
    resource_group: str,
    name: str,
    location: str,
    tags: dict[str, str] | None = None,
) -> Resource:
    """Create (or return the existing) user-assigned identity; call under the state lock."""
    arm_id = resource_id(subscription, resource_group, _NAMESPACE, _TYPE, name)
    existing = state.identities.get(arm_id.lower())
    if existing is not None:
        return existing
    identity = Resource(
        {
            **tracked_resource(arm_id, f"{_NAMESPACE}/{_TYPE}", location, tags),
            "properties": {
                "tenantId": state.tenant_id,
                "principalId": str(uuid.uuid4()),
                "clientId": str(uuid.uuid4()),
                "isolationScope": "None",
            },
        },
        etag_in_body=False,
    )
    state.identities[arm_id.lower()] = identity
    return identity


def _canonical_type(value: Any) -> str:
    key = str(value).replace(" ", "").lower()
    if key not in _CANONICAL_TYPES:
        raise ArmError.invalid_parameter(
            f"The identity type '{value}' is not valid. Allowed values: None, SystemAssigned, UserAssigned, "
            "'SystemAssigned, UserAssigned'.",
            target="identity.type",
        )
    return _CANONICAL_TYPES[key]


def _identity_failure(target_id: str, inner_code: str, inner_message: str) -> ArmError:
    inner = json.dumps({"error": {"code": inner_code, "message": inner_message}}, separators=(",", ":"))
    return ArmError(
        400,
        ErrorCode.FAILED_IDENTITY_OPERATION,
        f"Identity operation for resource '{target_id}' failed with error 'Failed to perform resource "
        f"identity operation. Status: 'BadRequest'. Response: '{inner}'.'.",
    )


def apply_identity(
    state: EmulatorState,
    target_id: str,
    current: dict[str, Any] | None,
    incoming: Any,
    *,
    patch: bool,
) -> dict[str, Any] | None:
    """The identity block after a PATCH (delta map) or PUT (whole map) of ``target_id``.

    Raises FailedIdentityOperation for an unknown identity or more than 150 entries in the
    request, LinkedAuthorizationFailed for an identity under a denied scope, InvalidParameter
    for a type that contradicts the map. Call under the state lock.
    """
    if incoming is None:
        return current
    requested_map = _requested_map(target_id, incoming)
    current = current or {}
    identity_type = _canonical_type(incoming.get("type", current.get("type", "None")))
    kept = (current.get("userAssignedIdentities") or {}) if patch else {}
    result_map = _merged_map(state, target_id, kept, requested_map)
    result_map = _map_for_type(identity_type, requested_map, result_map)
    if identity_type == "None":
        return None
    result: dict[str, Any] = {"type": identity_type}
    if "SystemAssigned" in identity_type:
        result["principalId"] = current.get("principalId") or str(uuid.uuid4())
        result["tenantId"] = current.get("tenantId") or state.tenant_id
    if result_map:
        result["userAssignedIdentities"] = result_map
    return result


def _requested_map(target_id: str, incoming: Any) -> dict[str, Any]:
    """The request's ``userAssignedIdentities`` map, checked for shape and the 150 limit."""
    if not isinstance(incoming, dict):
        raise ArmError.invalid_parameter("The identity must be a JSON object.", target="identity")
    requested_map = incoming.get("userAssignedIdentities") or {}
    if not isinstance(requested_map, dict):
        raise ArmError.invalid_parameter("userAssignedIdentities must be a map.", target="identity")
    if len(requested_map) > IDENTITY_LIMIT_PER_REQUEST:
        raise _identity_failure(
            target_id,
            ErrorCode.BAD_REQUEST,
            f"User Assigned Identities Number '{len(requested_map)}' Assign exceed limit "
            f"'{IDENTITY_LIMIT_PER_REQUEST}' in one request.",
        )
    return requested_map


def _merged_map(
    state: EmulatorState, target_id: str, kept: dict[str, Any], requested_map: dict[str, Any]
) -> dict[str, dict[str, str]]:
    """``kept`` (the current map for a PATCH, empty for a PUT) with the request's entries:
    ``null`` removes one, anything else assigns it (IDs matched case-insensitively)."""
    result_map = {key: dict(value) for key, value in kept.items()}
    for requested_id, value in requested_map.items():
        existing_key = next((key for key in result_map if key.lower() == requested_id.lower()), None)
        if existing_key is not None:
            del result_map[existing_key]
        if value is None:
            continue
        identity = _assignable_identity(state, target_id, requested_id)
        result_map[identity.identifier] = {
            "principalId": identity.properties["principalId"],
            "clientId": identity.properties["clientId"],
        }
    return result_map


def _assignable_identity(state: EmulatorState, target_id: str, requested_id: str) -> Resource:
    """The identity ``requested_id`` names, if it exists and the caller may assign it."""
    identity = state.find_identity(requested_id)
    if identity is None:
        raise _identity_failure(
            target_id, ErrorCode.BAD_REQUEST, f"Resource '{requested_id.lower()}' was not found."
        )
    if state.linked_access_denied(requested_id):
        action = (
            "virtualMachineScaleSets"
            if "/virtualmachinescalesets/" in target_id.lower()
            else "virtualMachines"
        )
        raise ArmError(
            403,
            ErrorCode.LINKED_AUTHORIZATION_FAILED,
            f"The client '{state.tenant_id}' has permission to perform action "
            f"'Microsoft.Compute/{action}/write' on scope '{target_id}'; however, it does not have "
            "permission to perform action "
            "'Microsoft.ManagedIdentity/userAssignedIdentities/assign/action' on the linked scope(s) "
            f"'{requested_id}' or the linked scope(s) are invalid.",
        )
    return identity


def _map_for_type(
    identity_type: str, requested_map: dict[str, Any], result_map: dict[str, dict[str, str]]
) -> dict[str, dict[str, str]]:
    """The map the identity type allows: none without UserAssigned (assigning one then is an
    error), at least one with it."""
    if "UserAssigned" not in identity_type:
        if any(value is not None for value in requested_map.values()):
            raise ArmError.invalid_parameter(
                f"User assigned identities can only be given with identity type 'UserAssigned' or "
                f"'SystemAssigned, UserAssigned', not '{identity_type}'.",
                target="identity.userAssignedIdentities",
            )
        return {}
    if not result_map:
        raise ArmError.invalid_parameter(
            f"The identity type '{identity_type}' requires at least one user assigned identity; use type "
            "'None' or 'SystemAssigned' to remove the last one.",
            target="identity.userAssignedIdentities",
        )
    return result_map


def _identity_id(request: ArmRequest) -> str:
    return request.resource_id(_NAMESPACE, _TYPE, request.parameters["resourceName"])


def _find(state: EmulatorState, request: ArmRequest) -> Resource:
    return request.require_resource(state, state.identities, f"{_NAMESPACE}/{_TYPE}", "resourceName")


def get_identity(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    return ArmResponse(200, _find(state, request).render())


def create_or_update_identity(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    body = request.json_object()
    group = request.resource_group(state)
    existing = state.identities.get(_identity_id(request).lower())
    if existing is not None:
        if isinstance(body.get("tags"), dict):
            existing.document["tags"] = dict(body["tags"])
        existing.touch()
        return ArmResponse(200, existing.render())
    created = new_identity(
        state,
        subscription=request.parameters["subscriptionId"],
        resource_group=group.name,
        name=request.parameters["resourceName"],
        location=request.requested_location(group.location),
        tags=request.requested_tags(),
    )
    return ArmResponse(201, created.render())


def delete_identity(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    request.resource_group(state)
    removed = state.identities.pop(_identity_id(request).lower(), None)
    return ArmResponse(200 if removed is not None else 204)


def list_identities(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    group = request.resource_group(state)
    prefix = f"/subscriptions/{group.subscription}/resourcegroups/{group.name}/".lower()
    values = [identity.render() for key, identity in state.identities.items() if key.startswith(prefix)]
    return ArmResponse(200, {"value": values})


def register(router: Router) -> None:
    base = (
        "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/"
        "Microsoft.ManagedIdentity/userAssignedIdentities"
    )
    router.add("GET", base, "UserAssignedIdentities.list_by_resource_group", list_identities)
    router.add("GET", base + "/{resourceName}", "UserAssignedIdentities.get", get_identity)
    router.add(
        "PUT", base + "/{resourceName}", "UserAssignedIdentities.create_or_update", create_or_update_identity
    )
    router.add("DELETE", base + "/{resourceName}", "UserAssignedIdentities.delete", delete_identity)
