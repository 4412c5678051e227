"""Replaying Azure's published request/response examples against the emulator (for
``test_examples``): where the examples live, how each becomes a request, and how an answer is
compared with the example's (status, LRO headers, presence and JSON type of every field). How the
emulator is seeded for each example is in :mod:`tests.cloud.emulator.example_seeds`.

The examples are read from ``shared/reference/azure-rest-api-examples`` beside the project (a CI
clone has ``shared/`` beside it too); they are never copied into the repository.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.core.rest import HttpRequest

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION
from tests.cloud.emulator.sdk_clients import Clients

PROJECT_ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = PROJECT_ROOT.parent / "shared" / "reference" / "azure-rest-api-examples"

COMPUTE = "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Compute"
NETWORK = "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/Microsoft.Network"
IDENTITY = (
    "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}"
    "/providers/Microsoft.ManagedIdentity/userAssignedIdentities"
)
VMSS = COMPUTE + "/virtualMachineScaleSets/{vmScaleSetName}"
VMSS_VMS = COMPUTE + "/virtualMachineScaleSets/{virtualMachineScaleSetName}/virtualMachines"
VMSS_NICS = VMSS_VMS + "/{virtualmachineIndex}/networkInterfaces"


@dataclass(frozen=True)
class Case:
    """One example: its file, the operation it exercises, and how to send it."""

    file: str
    operation: str
    method: str
    path: str
    body_parameter: str | None = None
    query: tuple[str, ...] = ()
    seed: str = "nothing"
    overrides: tuple[tuple[str, Any], ...] = ()


CASES = [
    Case(
        "compute/VirtualMachine_List_MinimumSet_Gen.json",
        "VirtualMachines.list",
        "GET",
        COMPUTE + "/virtualMachines",
        seed="vm",
    ),
    Case(
        "compute/VirtualMachine_Get_WithVMSizeProperties.json",
        "VirtualMachines.get",
        "GET",
        COMPUTE + "/virtualMachines/{vmName}",
        query=("$expand=userData",),
        seed="vm",
    ),
    Case(
        "compute/VirtualMachine_Create_WithEncryptionIdentity.json",
        "VirtualMachines.create_or_update",
        "PUT",
        COMPUTE + "/virtualMachines/{vmName}",
        "parameters",
        seed="references",
    ),
    Case(
        "compute/VirtualMachine_Update_WithInstanceProfile.json",
        "VirtualMachines.update",
        "PATCH",
        COMPUTE + "/virtualMachines/{vmName}",
        "parameters",
        seed="vm",
    ),
    Case(
        "compute/VirtualMachine_Delete_Force.json",
        "VirtualMachines.delete",
        "DELETE",
        COMPUTE + "/virtualMachines/{vmName}",
        query=("forceDeletion=true",),
        seed="vm",
    ),
    Case(
        "compute/VirtualMachine_Get_InstanceView.json",
        "VirtualMachines.instance_view",
        "GET",
        COMPUTE + "/virtualMachines/{vmName}/instanceView",
        seed="vm-with-guest",
    ),
    Case(
        "compute/VirtualMachineScaleSet_List_MinimumSet_Gen.json",
        "VirtualMachineScaleSets.list",
        "GET",
        COMPUTE + "/virtualMachineScaleSets",
        seed="vmss",
    ),
    # Azure documents that a scale set's userData comes back only with $expand=userData; the
    # example shows it, so the replay asks for it as a client wanting it would.
    Case(
        "compute/VirtualMachineScaleSet_Get.json",
        "VirtualMachineScaleSets.get",
        "GET",
        VMSS,
        query=("$expand=userData",),
        seed="vmss",
    ),
    Case(
        "compute/VirtualMachineScaleSet_Create_WithSshAuthentication.json",
        "VirtualMachineScaleSets.create_or_update",
        "PUT",
        VMSS,
        "parameters",
        seed="references",
    ),
    Case(
        "compute/VirtualMachineScaleSet_Update_MinimumSet_Gen.json",
        "VirtualMachineScaleSets.update",
        "PATCH",
        VMSS,
        "parameters",
        seed="vmss",
    ),
    Case(
        "compute/VirtualMachineScaleSet_Delete_Force.json",
        "VirtualMachineScaleSets.delete",
        "DELETE",
        VMSS,
        query=("forceDeletion=true",),
        seed="vmss",
    ),
    Case(
        "compute/VirtualMachineScaleSet_DeleteInstances_MaximumSet_Gen.json",
        "VirtualMachineScaleSets.delete_instances",
        "POST",
        VMSS + "/delete",
        "vmInstanceIDs",
        query=("forceDeletion=true",),
        seed="vmss",
        overrides=(("vmInstanceIDs", {"instanceIds": ["0"]}),),
    ),
    Case(
        "compute/VirtualMachineScaleSet_GetInstanceView_MaximumSet_Gen.json",
        "VirtualMachineScaleSets.get_instance_view",
        "GET",
        VMSS + "/instanceView",
        seed="vmss",
    ),
    Case(
        "compute/VirtualMachineScaleSetVM_List_MinimumSet_Gen.json",
        "VirtualMachineScaleSetVMs.list",
        "GET",
        VMSS_VMS,
        seed="vmss",
    ),
    Case(
        "compute/VirtualMachineScaleSetVM_Get_WithVMSizeProperties.json",
        "VirtualMachineScaleSetVMs.get",
        "GET",
        VMSS + "/virtualMachines/{instanceId}",
        query=("$expand=userData",),
        seed="vmss-from-instance",
        overrides=(("vmScaleSetName", "myvmss"),),
    ),
    Case(
        "compute/VirtualMachineScaleSetVM_Update_MinimumSet_Gen.json",
        "VirtualMachineScaleSetVMs.update",
        "PUT",
        VMSS + "/virtualMachines/{instanceId}",
        "parameters",
        seed="vmss",
        overrides=(("instanceId", "0"),),
    ),
    Case(
        "compute/VirtualMachineScaleSetVM_Delete_Force.json",
        "VirtualMachineScaleSetVMs.delete",
        "DELETE",
        VMSS + "/virtualMachines/{instanceId}",
        query=("forceDeletion=true",),
        seed="vmss",
    ),
    Case(
        "compute/VirtualMachineScaleSetVM_Get_InstanceViewAutoPlacedOnDedicatedHostGroup.json",
        "VirtualMachineScaleSetVMs.get_instance_view",
        "GET",
        VMSS + "/virtualMachines/{instanceId}/instanceView",
        seed="vmss-on-host",
    ),
    Case(
        "network/NetworkInterfaceList.json",
        "NetworkInterfaces.list",
        "GET",
        NETWORK + "/networkInterfaces",
        seed="nic",
    ),
    Case(
        "network/NetworkInterfaceGet.json",
        "NetworkInterfaces.get",
        "GET",
        NETWORK + "/networkInterfaces/{networkInterfaceName}",
        seed="nic",
    ),
    Case(
        "network/NetworkInterfaceCreate.json",
        "NetworkInterfaces.create_or_update",
        "PUT",
        NETWORK + "/networkInterfaces/{networkInterfaceName}",
        "parameters",
        seed="references",
    ),
    Case(
        "network/NetworkInterfaceDelete.json",
        "NetworkInterfaces.delete",
        "DELETE",
        NETWORK + "/networkInterfaces/{networkInterfaceName}",
        seed="nic",
    ),
    Case(
        "network/VmssVmNetworkInterfaceList.json",
        "NetworkInterfaces.list_virtual_machine_scale_set_vm_network_interfaces",
        "GET",
        VMSS_NICS,
        seed="vmss",
    ),
    Case(
        "network/VmssNetworkInterfaceGet.json",
        "NetworkInterfaces.get_virtual_machine_scale_set_network_interface",
        "GET",
        VMSS_NICS + "/{networkInterfaceName}",
        seed="vmss",
        overrides=(("networkInterfaceName", "vmss1-nic"),),
    ),
    Case(
        "network/VirtualNetworkGet.json",
        "VirtualNetworks.get",
        "GET",
        NETWORK + "/virtualNetworks/{virtualNetworkName}",
        seed="vnet",
    ),
    Case(
        "network/VirtualNetworkListUsage.json",
        "VirtualNetworks.list_usage",
        "GET",
        NETWORK + "/virtualNetworks/{virtualNetworkName}/usages",
        seed="vnet",
    ),
    Case(
        "network/SubnetList.json",
        "Subnets.list",
        "GET",
        NETWORK + "/virtualNetworks/{virtualNetworkName}/subnets",
        seed="vnet",
    ),
    Case(
        "network/SubnetGet.json",
        "Subnets.get",
        "GET",
        NETWORK + "/virtualNetworks/{virtualNetworkName}/subnets/{subnetName}",
        seed="vnet",
    ),
    Case(
        "msi/IdentityCreate.json",
        "UserAssignedIdentities.create_or_update",
        "PUT",
        IDENTITY + "/{resourceName}",
        "parameters",
        seed="group",
    ),
    Case(
        "msi/IdentityGet.json",
        "UserAssignedIdentities.get",
        "GET",
        IDENTITY + "/{resourceName}",
        seed="identity",
    ),
    Case(
        "msi/IdentityListByResourceGroup.json",
        "UserAssignedIdentities.list_by_resource_group",
        "GET",
        IDENTITY,
        seed="identity",
    ),
    Case(
        "msi/IdentityDelete.json",
        "UserAssignedIdentities.delete",
        "DELETE",
        IDENTITY + "/{resourceName}",
        seed="identity",
    ),
]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class Verdict:
    """What differs between an answer and the example (empty lists: a full match)."""

    status_ok: bool
    lro_headers_missing: list[str] = field(default_factory=list)
    key_fields_missing: list[str] = field(default_factory=list)
    fields_differing: list[str] = field(default_factory=list)


def load(case: Case) -> dict[str, Any]:
    """The example, its subscription replaced by the emulator's default (values are not compared)."""
    text = (EXAMPLES / case.file).read_text()
    document = json.loads(text)
    subscription = str(document["parameters"].get("subscriptionId", ""))
    if subscription:
        text = text.replace(subscription, DEFAULT_SUBSCRIPTION)
    text = text.replace("{subscription-id}", DEFAULT_SUBSCRIPTION).replace(
        "{subscriptionId}", DEFAULT_SUBSCRIPTION
    )
    loaded: dict[str, Any] = json.loads(text)
    loaded["parameters"].update(dict(case.overrides))
    return loaded


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def shape_differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every field of ``expected`` that ``actual`` lacks or carries with another JSON type (arrays:
    the first element of each, when the example has one). Pure."""
    if json_type(expected) != json_type(actual):
        return [f"{path or '.'}: {json_type(actual)} instead of {json_type(expected)}"]
    if isinstance(expected, dict):
        differences: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                differences.append(f"{path}.{key}: missing")
            else:
                differences.extend(shape_differences(value, actual[key], f"{path}.{key}"))
        return differences
    if isinstance(expected, list) and expected:
        if not actual:
            return [f"{path}[]: empty"]
        return shape_differences(expected[0], actual[0], f"{path}[0]")
    return []


KEY_FIELDS = ("id", "name", "type", "location")


def key_fields_missing(expected: Any, actual: Any) -> list[str]:
    """Top-level identity fields and ``properties.provisioningState`` the example has and we lack."""
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return []
    if "value" in expected and isinstance(expected["value"], list):
        first = expected["value"][0] if expected["value"] else None
        return key_fields_missing(first, (actual.get("value") or [None])[0])
    missing = [key for key in KEY_FIELDS if key in expected and key not in actual]
    if "provisioningState" in (expected.get("properties") or {}) and "provisioningState" not in (
        actual.get("properties") or {}
    ):
        missing.append("properties.provisioningState")
    return missing


def judge(example: dict[str, Any], answer: Answer) -> Verdict:
    """Compare one answer with the example's response of the same status."""
    responses: dict[str, Any] = example["responses"]
    expected = responses.get(str(answer.status))
    if expected is None:
        return Verdict(status_ok=False)
    headers = {key.lower() for key in answer.headers}
    lro = [name for name in (expected.get("headers") or {}) if name.lower() not in headers]
    expected_body = expected.get("body")
    if expected_body is None:
        return Verdict(status_ok=True, lro_headers_missing=lro)
    return Verdict(
        status_ok=True,
        lro_headers_missing=lro,
        key_fields_missing=key_fields_missing(expected_body, answer.body),
        fields_differing=shape_differences(expected_body, answer.body),
    )


def request_for(case: Case, example: dict[str, Any], base_url: str) -> HttpRequest:
    parameters: dict[str, Any] = example["parameters"]
    path = re.sub(r"\{(\w+)\}", lambda match: str(parameters[match.group(1)]), case.path)
    query = "&".join((f"api-version={parameters['api-version']}", *case.query))
    body = parameters.get(case.body_parameter) if case.body_parameter else None
    return HttpRequest(case.method, f"{base_url}{path}?{query}", json=body)


def send(clients: Clients, request: HttpRequest) -> Answer:
    """Send through the real SDK pipeline (the Compute client's: bearer token, TLS, policies)."""
    response = clients.compute._client.send_request(request)
    text = response.text()
    return Answer(response.status_code, dict(response.headers), json.loads(text) if text else None)
