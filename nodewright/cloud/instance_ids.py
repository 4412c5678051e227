"""A scale set's instances read from the raw list answer, without SDK models.

Owns ``list_scale_set_instance_documents`` and ``list_scale_set_instance_ids``: the same paged GET
of ``.../virtualMachineScaleSets/{name}/virtualMachines`` that
``ComputeManagementClient.virtual_machine_scale_set_vms.list`` sends (its request builder, so the
path and ``api-version`` stay the SDK's), read page by page by ``raw_pages``: each instance's
JSON document as ARM sent it, or only its ``instanceId``. Building a full
``VirtualMachineScaleSetVM`` model per instance is what made a listing expensive (issue 32).
Does I/O.
"""

from __future__ import annotations

from typing import Any

from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.operations._operations import (
    build_virtual_machine_scale_set_vms_list_request,
)

from nodewright.cloud.raw_pages import raw_pages
from nodewright.cloud.resource_ids import ScaleSetId

__all__ = ["list_scale_set_instance_documents", "list_scale_set_instance_ids"]


def list_scale_set_instance_documents(
    compute: ComputeManagementClient, scale_set: ScaleSetId
) -> tuple[list[dict[str, Any]], int]:
    """Every instance's document (its model, with ``instanceId`` and ``etag``), in the order
    listed, and the number of pages read."""
    request = build_virtual_machine_scale_set_vms_list_request(
        resource_group_name=scale_set.resource_group,
        virtual_machine_scale_set_name=scale_set.name,
        subscription_id=scale_set.subscription_id,
    )
    documents: list[dict[str, Any]] = []
    pages = 0
    for body in raw_pages(compute, request):
        pages += 1
        documents.extend(entry for entry in body.get("value") or [] if isinstance(entry, dict))
    return documents, pages


def list_scale_set_instance_ids(compute: ComputeManagementClient, scale_set: ScaleSetId) -> list[str]:
    """Every instance ID of the scale set, in the order listed (all pages)."""
    documents, _ = list_scale_set_instance_documents(compute, scale_set)
    return [str(entry["instanceId"]) for entry in documents if entry.get("instanceId") is not None]
