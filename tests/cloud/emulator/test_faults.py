"""Fault injection and ARM protocol behaviour the SDKs rely on: 429 + Retry-After (honoured by
azure-core; no request before the deadline), 5xx retries, failed and slow long-running
operations, added latency, etag preconditions on Compute, authentication and api-version."""

from __future__ import annotations

import time

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceModifiedError
from azure.mgmt.compute import models

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.raw_https import call
from tests.cloud.emulator.sdk_clients import Clients, sdk_clients


def test_throttled_call_is_retried_after_the_deadline(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """429 with Retry-After: 1 -> azure-core retries, and no request arrives before the deadline."""
    arm_emulator.faults.throttle("VirtualMachineScaleSets.get", times=1, retry_after=1)
    scale_set = clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a")
    assert scale_set.name == "vmss-a"
    entries = arm_emulator.requests.entries()
    throttled = entries[0]
    assert (throttled.operation, throttled.status) == ("VirtualMachineScaleSets.get", 429)
    deadline = throttled.monotonic + 1.0
    assert [entry.status for entry in entries] == [429, 200]
    assert all(entry.monotonic >= deadline for entry in entries[1:])


def test_throttle_by_method_and_path_pattern(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A fault matched by method and path glob throttles only matching calls, N times."""
    arm_emulator.faults.throttle(
        method="GET", path="*/virtualMachineScaleSets/vmss-a/virtualMachines", times=2, retry_after=0
    )
    clients.compute.virtual_machines.get(estate.group, "vm-0")
    list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-a"))
    statuses = [(entry.operation, entry.status) for entry in arm_emulator.requests.entries()]
    assert statuses == [
        ("VirtualMachines.get", 200),
        ("VirtualMachineScaleSetVMs.list", 429),
        ("VirtualMachineScaleSetVMs.list", 429),
        ("VirtualMachineScaleSetVMs.list", 200),
    ]


def test_server_errors_are_retried(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """Two 503s then success: azure-core retries; without retries the SDK raises 503."""
    arm_emulator.faults.server_error("NetworkInterfaces.get", times=2, status=503)
    nic = clients.network.network_interfaces.get(estate.group, "vm-0-nic")
    assert nic.name == "vm-0-nic"
    assert [entry.status for entry in arm_emulator.requests.entries("NetworkInterfaces.get")] == [
        503,
        503,
        200,
    ]
    arm_emulator.faults.server_error("NetworkInterfaces.get", times=1, status=500)
    with pytest.raises(HttpResponseError) as raised:
        sdk_clients(arm_emulator, retry_total=0).network.network_interfaces.get(estate.group, "vm-0-nic")
    assert raised.value.status_code == 500
    assert raised.value.error is not None
    assert raised.value.error.code == "InternalServerError"


def test_failed_operation_raises_and_rolls_back(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """An injected LRO failure: the poller raises with the operation's error; the scale set keeps
    its old identities and capacity and reports provisioningState Failed."""
    arm_emulator.faults.fail_operation("VirtualMachineScaleSets.update", code="InternalExecutionError")
    update = models.VirtualMachineScaleSetUpdate(
        sku=models.Sku(capacity=4),
        identity=models.VirtualMachineScaleSetIdentity(
            type="UserAssigned",
            user_assigned_identities={estate.identity_ids[1]: models.UserAssignedIdentitiesValue()},
        ),
    )
    poller = clients.compute.virtual_machine_scale_sets.begin_update(estate.group, "vmss-a", update)
    with pytest.raises(HttpResponseError) as raised:
        poller.result()
    assert "InternalExecutionError" in str(raised.value)
    scale_set = clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a")
    assert scale_set.sku.capacity == 2  # type: ignore[union-attr]
    assert list(scale_set.identity.user_assigned_identities or {}) == estate.identity_ids[:1]  # type: ignore[union-attr]
    assert scale_set.properties.provisioning_state == "Failed"  # type: ignore[union-attr]
    assert len(list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-a"))) == 2


def test_slow_operation_is_polled_until_done(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A 0.5 s operation: the poller reports InProgress, polls the Azure-AsyncOperation URL, then
    GETs the resource; the VM is Updating meanwhile."""
    arm_emulator.state.operation_duration = 0.5
    # Not a test of Retry-After (test_retry_after.py is): without it the poller keeps its 0.1 s
    # interval, where the default 10 s would stretch a 0.5 s operation to 10 s.
    arm_emulator.state.operation_retry_after = None
    update = models.VirtualMachineUpdate(tags={"stage": "blue"})
    poller = clients.compute.virtual_machines.begin_update(estate.group, "vm-0", update, polling_interval=0.1)
    assert poller.status() == "InProgress"
    assert arm_emulator.state.render(estate.vm_id)["properties"]["provisioningState"] == "Updating"  # type: ignore[index]
    machine = poller.result()
    assert machine.tags == {"stage": "blue"}
    assert machine.properties.provisioning_state == "Succeeded"  # type: ignore[union-attr]
    operations = [entry.operation for entry in arm_emulator.requests.entries()]
    assert operations[0] == "VirtualMachines.update"
    assert operations.count("Operations.status") >= 2
    assert operations[-1] == "VirtualMachines.get"


def test_latency_per_operation_and_global(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """Added latency delays only matching calls; global latency delays every call."""
    arm_emulator.faults.add_latency(0.3, "VirtualMachines.get")
    started = time.monotonic()
    clients.compute.virtual_machines.get(estate.group, "vm-0")
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a")
    assert time.monotonic() - started < 0.3
    arm_emulator.faults.clear()
    arm_emulator.faults.add_latency(0.2)
    started = time.monotonic()
    clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a")
    returned = time.monotonic()
    assert returned - started >= 0.2
    # The log says when each answer left: after the latency, before the client had it.
    (slow,) = arm_emulator.requests.entries("VirtualMachines.get")
    (last,) = arm_emulator.requests.entries("VirtualMachineScaleSets.get")[-1:]
    assert slow.answered - slow.monotonic >= 0.3
    assert started <= last.monotonic
    assert last.monotonic + 0.2 <= last.answered <= returned


def test_compute_etag_mismatch_is_precondition_failed(estate: Estate, clients: Clients) -> None:
    """Compute PATCH with a stale etag and IfNotModified: ResourceModifiedError, status 412."""
    stale = clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a").etag
    clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-a", models.VirtualMachineScaleSetUpdate(tags={"a": "1"})
    ).result()
    with pytest.raises(ResourceModifiedError) as raised:
        clients.compute.virtual_machine_scale_sets.begin_update(
            estate.group,
            "vmss-a",
            models.VirtualMachineScaleSetUpdate(tags={"a": "2"}),
            etag=stale,
            match_condition=MatchConditions.IfNotModified,
        )
    assert raised.value.status_code == 412


def test_requests_without_bearer_token_are_unauthorized(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """No Authorization header: 401 AuthenticationFailed; any bearer token is accepted."""
    path = estate.vm_id
    answer = call(arm_emulator, "GET", path + "?api-version=2026-04-01")
    assert (answer.status, answer.body["error"]["code"]) == (401, "AuthenticationFailed")
    assert call(arm_emulator, "GET", path + "?api-version=2026-04-01", token="anything").status == 200
    answer = call(arm_emulator, "GET", path, token="anything")
    assert (answer.status, answer.body["error"]["code"]) == (400, "MissingApiVersionParameter")


def test_scale_set_nic_view_is_read_only(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """Writes to a Uniform instance's NIC are refused."""
    path = estate.scale_set_id + "/virtualMachines/0/networkInterfaces/vmss-a-nic?api-version=2018-10-01"
    answer = call(arm_emulator, "PUT", path, body={"properties": {}}, token="t")
    assert (answer.status, answer.body["error"]["code"]) == (405, "OperationNotAllowed")


def test_throttled_patch_is_retried_after_deadline_or_raised_without_retries(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """azure-core retries any method when Retry-After is present, PATCH included, no earlier than
    the deadline; with retries off the SDK raises 429 carrying the Retry-After header."""
    arm_emulator.faults.throttle("VirtualMachineScaleSets.update", times=1, retry_after=1)
    clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-a", models.VirtualMachineScaleSetUpdate(tags={"a": "1"})
    ).result()
    throttled, retried = arm_emulator.requests.entries("VirtualMachineScaleSets.update")
    assert (throttled.status, retried.status) == (429, 200)
    assert retried.monotonic >= throttled.monotonic + 1.0
    arm_emulator.faults.throttle("VirtualMachineScaleSets.update", times=1, retry_after=7)
    with pytest.raises(HttpResponseError) as raised:
        sdk_clients(arm_emulator, retry_total=0).compute.virtual_machine_scale_sets.begin_update(
            estate.group, "vmss-a", models.VirtualMachineScaleSetUpdate(tags={"a": "2"})
        )
    assert raised.value.status_code == 429
    assert raised.value.response is not None
    assert raised.value.response.headers["Retry-After"] == "7"  # type: ignore[attr-defined]
    assert raised.value.error is not None
    assert raised.value.error.code == "TooManyRequests"
