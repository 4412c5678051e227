"""Contract: Microsoft.Compute virtualMachines through ComputeManagementClient (GET, PATCH with
identity deltas, PUT, DELETE, instance view), including the identity errors ARM returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.mgmt.compute import models

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients, assert_round_trips, error_message


def _identity_update(identity_type: str, delta: Mapping[str, object]) -> Any:
    """A VM PATCH body with only ``identity``: ``{id: {}}`` adds, ``{id: None}`` removes. (The SDK's
    typed model does not admit ``None`` values, so the body is a plain mapping, as the SDK allows.)"""
    return {"identity": {"type": identity_type, "userAssignedIdentities": dict(delta)}}


def test_get_vm_round_trips(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """GET deserializes without loss: identity with clientId/principalId, NIC reference, image, vmId."""
    machine = clients.compute.virtual_machines.get(estate.group, "vm-0")
    assert_round_trips(machine, arm_emulator.state.render(estate.vm_id))
    assert machine.identity is not None
    assert machine.identity.type == "UserAssigned"
    assigned = machine.identity.user_assigned_identities or {}
    assert list(assigned) == estate.identity_ids[:1]
    assert assigned[estate.identity_ids[0]].client_id
    assert machine.properties is not None
    assert machine.properties.vm_id
    assert machine.properties.os_profile is not None
    assert machine.properties.os_profile.computer_name == "vm-0"
    assert machine.properties.storage_profile is not None
    assert machine.properties.storage_profile.image_reference is not None
    assert machine.properties.storage_profile.image_reference.publisher == "Canonical"
    assert machine.etag


def test_get_vm_with_instance_view_expand(estate: Estate, clients: Clients) -> None:
    """``expand=instanceView`` adds the instance view to the VM."""
    machine = clients.compute.virtual_machines.get(estate.group, "vm-0", expand="instanceView")
    assert machine.properties is not None
    assert machine.properties.instance_view is not None
    codes = [status.code for status in machine.properties.instance_view.statuses or []]
    assert codes == ["ProvisioningState/succeeded", "PowerState/running"]


def test_vm_instance_view_follows_power_state(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """The instance view reports the power state the test set."""
    arm_emulator.state.set_power_state(estate.vm_id, "deallocated")
    view = clients.compute.virtual_machines.instance_view(estate.group, "vm-0")
    assert view.computer_name == "vm-0"
    assert [status.code for status in view.statuses or []][-1] == "PowerState/deallocated"


def test_patch_adds_identity_with_delta(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """PATCH {id: {}} adds to the existing identities; the LRO completes with Succeeded."""
    poller = clients.compute.virtual_machines.begin_update(
        estate.group,
        "vm-0",
        _identity_update("UserAssigned", {estate.identity_ids[1]: models.UserAssignedIdentitiesValue()}),
    )
    machine = poller.result()
    assert poller.status() == "Succeeded"
    assert machine.identity is not None
    assert sorted(machine.identity.user_assigned_identities or {}) == sorted(estate.identity_ids[:2])
    assert machine.properties is not None
    assert machine.properties.provisioning_state == "Succeeded"
    assert arm_emulator.requests.count("Operations.status") >= 1


def test_patch_removes_identity_with_null_and_keeps_system_assigned(estate: Estate, clients: Clients) -> None:
    """PATCH {id: null} removes one identity; with SystemAssigned kept the type becomes SystemAssigned."""
    operations = clients.compute.virtual_machines
    operations.begin_update(
        estate.group,
        "vm-0",
        _identity_update(
            "SystemAssigned, UserAssigned", {estate.identity_ids[1]: models.UserAssignedIdentitiesValue()}
        ),
    ).result()
    operations.begin_update(
        estate.group, "vm-0", _identity_update("SystemAssigned, UserAssigned", {estate.identity_ids[0]: None})
    ).result()
    machine = operations.begin_update(
        estate.group, "vm-0", _identity_update("SystemAssigned", {estate.identity_ids[1]: None})
    ).result()
    assert machine.identity is not None
    assert machine.identity.type == "SystemAssigned"
    assert machine.identity.principal_id
    assert not machine.identity.user_assigned_identities


def test_patch_type_none_removes_identity_block(estate: Estate, clients: Clients) -> None:
    """Removing the last identity with type None leaves the VM without identity."""
    machine = clients.compute.virtual_machines.begin_update(
        estate.group, "vm-0", _identity_update("None", {estate.identity_ids[0]: None})
    ).result()
    assert machine.identity is None


def test_patch_user_assigned_without_identities_is_invalid(estate: Estate, clients: Clients) -> None:
    """Type UserAssigned with the last identity removed is rejected (InvalidParameter, 400)."""
    with pytest.raises(HttpResponseError) as raised:
        clients.compute.virtual_machines.begin_update(
            estate.group, "vm-0", _identity_update("UserAssigned", {estate.identity_ids[0]: None})
        )
    assert raised.value.status_code == 400
    assert raised.value.error is not None
    assert raised.value.error.code == "InvalidParameter"


def test_patch_unknown_identity_fails_naming_it(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """An unknown identity ID: 400 FailedIdentityOperation whose message names it; nothing changes."""
    missing = estate.identity_ids[0].replace("id-0", "id-missing")
    with pytest.raises(HttpResponseError) as raised:
        clients.compute.virtual_machines.begin_update(
            estate.group,
            "vm-0",
            _identity_update("UserAssigned", {missing: models.UserAssignedIdentitiesValue()}),
        )
    assert raised.value.status_code == 400
    assert raised.value.error is not None
    assert raised.value.error.code == "FailedIdentityOperation"
    assert missing.lower() in error_message(raised.value)
    rendered = arm_emulator.state.render(estate.vm_id)
    assert rendered is not None
    assert list(rendered["identity"]["userAssignedIdentities"]) == estate.identity_ids[:1]


def test_patch_denied_identity_is_linked_authorization_failed(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """An identity the caller may not assign: 403 LinkedAuthorizationFailed naming the identity."""
    arm_emulator.state.deny_linked_access(estate.identity_ids[2])
    with pytest.raises(HttpResponseError) as raised:
        clients.compute.virtual_machines.begin_update(
            estate.group,
            "vm-0",
            _identity_update("UserAssigned", {estate.identity_ids[2]: models.UserAssignedIdentitiesValue()}),
        )
    assert raised.value.status_code == 403
    assert raised.value.error is not None
    assert raised.value.error.code == "LinkedAuthorizationFailed"
    assert estate.identity_ids[2] in error_message(raised.value)


def test_more_than_150_identities_in_one_request_fail(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """151 identities in one PATCH: 400 FailedIdentityOperation, ARM's 'exceed limit 150'; 150 pass."""
    identity_ids = [arm_emulator.estate.add_identity(estate.group, f"bulk-{index}") for index in range(151)]
    delta = {identity_id: models.UserAssignedIdentitiesValue() for identity_id in identity_ids}
    with pytest.raises(HttpResponseError) as raised:
        clients.compute.virtual_machines.begin_update(
            estate.group, "vm-0", _identity_update("UserAssigned", delta)
        )
    assert raised.value.status_code == 400
    assert raised.value.error is not None
    assert raised.value.error.code == "FailedIdentityOperation"
    assert "Number '151' Assign exceed limit '150'" in error_message(raised.value)
    del delta[identity_ids[-1]]
    machine = clients.compute.virtual_machines.begin_update(
        estate.group, "vm-0", _identity_update("UserAssigned", delta)
    ).result()
    assert machine.identity is not None
    assert len(machine.identity.user_assigned_identities or {}) == 151  # 150 added + the seeded one


def test_get_missing_vm_is_resource_not_found(estate: Estate, clients: Clients) -> None:
    """404 ResourceNotFound for a VM that does not exist."""
    with pytest.raises(ResourceNotFoundError) as raised:
        clients.compute.virtual_machines.get(estate.group, "vm-missing")
    assert raised.value.error is not None
    assert raised.value.error.code == "ResourceNotFound"


def test_put_creates_vm_and_delete_removes_it(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """PUT creates a VM on an existing NIC (201 + LRO); DELETE (LRO) removes it."""
    nic_id = estate.vm_id.replace(
        "Microsoft.Compute/virtualMachines/vm-0", "Microsoft.Network/networkInterfaces/vm-0-nic"
    )
    clients.compute.virtual_machines.begin_delete(estate.group, "vm-0").result()
    body = models.VirtualMachine(
        location="eastus",
        tags={"role": "gateway"},
        properties=models.VirtualMachineProperties(
            hardware_profile=models.HardwareProfile(vm_size="Standard_D2s_v5"),
            network_profile=models.NetworkProfile(
                network_interfaces=[models.NetworkInterfaceReference(id=nic_id)]
            ),
        ),
    )
    created = clients.compute.virtual_machines.begin_create_or_update(estate.group, "vm-1", body).result()
    assert created.tags == {"role": "gateway"}
    assert created.properties is not None
    assert created.properties.provisioning_state == "Succeeded"
    assert created.properties.hardware_profile is not None
    assert created.properties.hardware_profile.vm_size == "Standard_D2s_v5"
    clients.compute.virtual_machines.begin_delete(estate.group, "vm-1").result()
    with pytest.raises(ResourceNotFoundError):
        clients.compute.virtual_machines.get(estate.group, "vm-1")


@pytest.mark.parametrize(
    ("delete_option", "nic_kept"),
    [
        pytest.param("Delete", False, id="delete-option-delete-removes-the-nic"),
        pytest.param("Detach", True, id="delete-option-detach-keeps-the-nic-detached"),
        pytest.param(None, True, id="no-delete-option-keeps-the-nic-detached"),
    ],
)
def test_delete_vm_takes_its_nic_only_when_marked_delete(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients, delete_option: str | None, nic_kept: bool
) -> None:
    """As Azure: a NIC whose reference says ``deleteOption: Delete`` goes with the VM (its address
    freed); otherwise it stays, no longer attached."""
    nic_id = estate.vm_id.replace(
        "Microsoft.Compute/virtualMachines/vm-0", "Microsoft.Network/networkInterfaces/vm-0-nic"
    )
    address = clients.network.network_interfaces.get(estate.group, "vm-0-nic").ip_configurations[0]
    reference: dict[str, Any] = {"id": nic_id, "properties": {"primary": True}}
    if delete_option is not None:
        reference["properties"]["deleteOption"] = delete_option
    patch = {"properties": {"networkProfile": {"networkInterfaces": [reference]}}}
    clients.compute.virtual_machines.begin_update(
        estate.group, "vm-0", models.VirtualMachineUpdate(patch)
    ).result()
    clients.compute.virtual_machines.begin_delete(estate.group, "vm-0").result()
    if nic_kept:
        nic = clients.network.network_interfaces.get(estate.group, "vm-0-nic")
        assert nic.virtual_machine is None
    else:
        with pytest.raises(ResourceNotFoundError):
            clients.network.network_interfaces.get(estate.group, "vm-0-nic")
        with arm_emulator.state.locked():
            owners = [
                owner for subnet in arm_emulator.state.subnets.values() for owner in subnet.pool.owners()
            ]
        assert address.private_ip_address
        assert not [owner for owner in owners if owner.lower().startswith(nic_id.lower())]
