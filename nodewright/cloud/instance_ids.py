"""A scale set's instance IDs read from the raw list answer, without SDK models.

Owns ``list_scale_set_instance_ids``: the same paged GET of
``.../virtualMachineScaleSets/{name}/virtualMachines`` that
``ComputeManagementClient.virtual_machine_scale_set_vms.list`` sends (its request builder, so the
path and ``api-version`` stay the SDK's), sent through the client's own pipeline
(authentication, retries, logging), following each page's ``nextLink``; only ``instanceId`` is
read from each entry. Building a full ``VirtualMachineScaleSetVM`` model per instance is what
made a listing expensive (issue 32). A failed page raises the azure-core error the SDK would
(``ResourceNotFoundError`` for 404, else ``HttpResponseError`` with the ARM error parsed), so
``calls.GuardedCalls`` translates it as any SDK call's. Does I/O.
"""

from __future__ import annotations

from typing import Any

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ResourceNotModifiedError,
    map_error,
)
from azure.core.rest import HttpRequest
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.operations._operations import (
    build_virtual_machine_scale_set_vms_list_request,
)
from azure.mgmt.core.exceptions import ARMErrorFormat

from nodewright.cloud.resource_ids import ScaleSetId

__all__ = ["list_scale_set_instance_ids"]

_ERROR_MAP: dict[int, Any] = {
    401: ClientAuthenticationError,
    404: ResourceNotFoundError,
    409: ResourceExistsError,
    304: ResourceNotModifiedError,
}


def _page(compute: ComputeManagementClient, request: HttpRequest) -> dict[str, Any]:
    response = compute.send_request(request)
    if response.status_code != 200:
        map_error(status_code=response.status_code, response=response, error_map=_ERROR_MAP)
        raise HttpResponseError(response=response, error_format=ARMErrorFormat)
    body = response.json()
    return body if isinstance(body, dict) else {}


def list_scale_set_instance_ids(compute: ComputeManagementClient, scale_set: ScaleSetId) -> list[str]:
    """Every instance ID of the scale set, in the order listed (all pages)."""
    request: HttpRequest | None = build_virtual_machine_scale_set_vms_list_request(
        resource_group_name=scale_set.resource_group,
        virtual_machine_scale_set_name=scale_set.name,
        subscription_id=scale_set.subscription_id,
    )
    ids: list[str] = []
    while request is not None:
        body = _page(compute, request)
        for entry in body.get("value") or []:
            instance_id = entry.get("instanceId") if isinstance(entry, dict) else None
            if instance_id is not None:
                ids.append(str(instance_id))
        next_link = body.get("nextLink")
        request = HttpRequest("GET", str(next_link)) if next_link else None
    return ids
