"""Contract: Microsoft.Compute virtualMachineScaleSets and their instances through
ComputeManagementClient: model GET/PATCH/PUT, capacity changes, instance list/get/view/update/delete,
Uniform and Flexible orchestration."""

from __future__ import annotations

from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.mgmt.compute import models

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients, assert_round_trips, error_message

GALLERY_IMAGE = (
    "/subscriptions/00000000-0000-4000-8000-000000000001/resourceGroups/rg-images/providers/"
    "Microsoft.Compute/galleries/nodes/images/ubuntu/versions/2.0.0"
)


def test_get_scale_set_round_trips(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """GET keeps sku.capacity, orchestration mode, model image and NIC configurations, identity."""
    scale_set = clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a")
    assert_round_trips(scale_set, arm_emulator.state.render(estate.scale_set_id))
    assert scale_set.sku is not None
    assert scale_set.sku.capacity == 2
    assert scale_set.properties is not None
    assert scale_set.properties.orchestration_mode == "Uniform"
    profile = scale_set.properties.virtual_machine_profile
    assert profile is not None
    assert profile.storage_profile is not None
    assert profile.storage_profile.image_reference is not None
    assert profile.storage_profile.image_reference.offer == "ubuntu-24_04-lts"
    assert profile.network_profile is not None
    configurations = profile.network_profile.network_interface_configurations or []
    assert configurations[0].name == "vmss-a-nic"
    assert scale_set.identity is not None
    assert list(scale_set.identity.user_assigned_identities or {}) == estate.identity_ids[:1]


def test_patch_scale_set_identity_delta(estate: Estate, clients: Clients) -> None:
    """PATCH identity on the scale set adds and removes with the delta map."""
    operations = clients.compute.virtual_machine_scale_sets
    delta: dict[str, object] = {
        estate.identity_ids[0]: None,
        estate.identity_ids[1]: {},
        estate.identity_ids[2]: {},
    }
    update: Any = {"identity": {"type": "UserAssigned", "userAssignedIdentities": delta}}
    scale_set = operations.begin_update(estate.group, "vmss-a", update).result()
    assert scale_set.identity is not None
    assert sorted(scale_set.identity.user_assigned_identities or {}) == sorted(estate.identity_ids[1:])


def test_patch_scale_set_unknown_identity_fails(estate: Estate, clients: Clients) -> None:
    """Unknown identity on a scale set: 400 FailedIdentityOperation naming it."""
    missing = estate.identity_ids[0] + "-missing"
    update = models.VirtualMachineScaleSetUpdate(
        identity=models.VirtualMachineScaleSetIdentity(
            type="UserAssigned", user_assigned_identities={missing: models.UserAssignedIdentitiesValue()}
        )
    )
    with pytest.raises(HttpResponseError) as raised:
        clients.compute.virtual_machine_scale_sets.begin_update(estate.group, "vmss-a", update)
    assert raised.value.error is not None
    assert raised.value.error.code == "FailedIdentityOperation"
    assert missing.lower() in error_message(raised.value)


def test_capacity_plus_one_creates_a_new_instance(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """Capacity +1 creates instance 2 with computer name <prefix>000002, an address and a fresh vmId."""
    before = {
        vm.instance_id for vm in clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-a")
    }
    clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-a", models.VirtualMachineScaleSetUpdate(sku=models.Sku(capacity=3))
    ).result()
    instances = list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-a"))
    new = [vm for vm in instances if vm.instance_id not in before]
    assert [vm.instance_id for vm in new] == ["2"]
    assert new[0].name == "vmss-a_2"
    assert new[0].properties is not None
    assert new[0].properties.os_profile is not None
    assert new[0].properties.os_profile.computer_name == "aks-a-vmss000002"
    assert new[0].properties.provisioning_state == "Succeeded"
    assert new[0].properties.vm_id
    nic = clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
        estate.group, "vmss-a", "2", "vmss-a-nic"
    )
    assert nic.properties is not None
    addresses = [
        c.properties.private_ip_address for c in nic.properties.ip_configurations or [] if c.properties
    ]
    assert addresses == ["10.240.0.8"]  # .4 vm-0, .5 .6 vmss-a, .7 vmss-flex


def test_scale_in_removes_highest_instances(estate: Estate, clients: Clients) -> None:
    """Capacity 2 -> 1 removes instance 1."""
    clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-a", models.VirtualMachineScaleSetUpdate(sku=models.Sku(capacity=1))
    ).result()
    instances = list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-a"))
    assert [vm.instance_id for vm in instances] == ["0"]


def test_slow_scale_out_shows_creating_then_ready(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """While the scale-out operation runs, the new instance's view says ProvisioningState/creating."""
    arm_emulator.faults.slow_operations(0.6, "VirtualMachineScaleSets.update")
    # Not a test of Retry-After (test_retry_after.py is): without it the poller keeps its 0.1 s
    # interval, where the default 10 s would stretch a 0.6 s operation to 10 s.
    arm_emulator.state.operation_retry_after = None
    poller = clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group,
        "vmss-a",
        models.VirtualMachineScaleSetUpdate(sku=models.Sku(capacity=3)),
        polling_interval=0.1,
    )
    view = clients.compute.virtual_machine_scale_set_vms.get_instance_view(estate.group, "vmss-a", "2")
    assert [status.code for status in view.statuses or []] == [
        "ProvisioningState/creating",
        "PowerState/starting",
    ]
    assert poller.result().properties is not None
    view = clients.compute.virtual_machine_scale_set_vms.get_instance_view(estate.group, "vmss-a", "2")
    assert [status.code for status in view.statuses or []] == [
        "ProvisioningState/succeeded",
        "PowerState/running",
    ]
    assert arm_emulator.requests.count("Operations.status") >= 2


def test_list_instances_with_instance_view(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """``expand=instanceView`` includes the statuses; the query reached the emulator."""
    arm_emulator.state.set_power_state(estate.scale_set_id + "/virtualMachines/1", "stopped")
    instances = list(
        clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-a", expand="instanceView")
    )
    power = {
        vm.instance_id: [s.code for s in (vm.properties.instance_view.statuses or [])][-1]  # type: ignore[union-attr]
        for vm in instances
    }
    assert power == {"0": "PowerState/running", "1": "PowerState/stopped"}
    assert "instanceView" in arm_emulator.requests.entries("VirtualMachineScaleSetVMs.list")[0].query


def test_get_instance_round_trips(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """GET one instance keeps instanceId, networkProfileConfiguration, image and NIC references."""
    instance = clients.compute.virtual_machine_scale_set_vms.get(estate.group, "vmss-a", "0")
    assert_round_trips(instance, arm_emulator.state.render(estate.scale_set_id + "/virtualMachines/0"))
    assert instance.instance_id == "0"
    assert instance.properties is not None
    assert instance.properties.latest_model_applied is True
    configuration = instance.properties.network_profile_configuration
    assert configuration is not None
    assert (configuration.network_interface_configurations or [])[0].name == "vmss-a-nic"
    assert instance.properties.network_profile is not None
    references = instance.properties.network_profile.network_interfaces or []
    assert references[0].id == estate.scale_set_id + "/virtualMachines/0/networkInterfaces/vmss-a-nic"


def test_model_image_change_marks_instances_outdated(estate: Estate, clients: Clients) -> None:
    """Setting a new model image (replacing the marketplace reference as a whole) leaves existing
    instances on the old image with latestModelApplied false; new instances get the new image."""
    update = models.VirtualMachineScaleSetUpdate(
        properties=models.VirtualMachineScaleSetUpdateProperties(
            virtual_machine_profile=models.VirtualMachineScaleSetUpdateVMProfile(
                storage_profile=models.VirtualMachineScaleSetUpdateStorageProfile(
                    image_reference=models.ImageReference(id=GALLERY_IMAGE)
                )
            )
        ),
        sku=models.Sku(capacity=3),
    )
    scale_set = clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-a", update
    ).result()
    profile = scale_set.properties.virtual_machine_profile  # type: ignore[union-attr]
    assert profile.storage_profile.image_reference.id == GALLERY_IMAGE  # type: ignore[union-attr]
    assert profile.storage_profile.image_reference.offer is None  # type: ignore[union-attr]
    old = clients.compute.virtual_machine_scale_set_vms.get(estate.group, "vmss-a", "0")
    new = clients.compute.virtual_machine_scale_set_vms.get(estate.group, "vmss-a", "2")
    assert old.properties.latest_model_applied is False  # type: ignore[union-attr]
    assert old.properties.storage_profile.image_reference.id is None  # type: ignore[union-attr]
    assert new.properties.storage_profile.image_reference.id == GALLERY_IMAGE  # type: ignore[union-attr]


def test_instance_update_adds_ip_configurations(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """PUT of a scale-set VM with two more IP configurations: the NIC view shows them with addresses."""
    operations = clients.compute.virtual_machine_scale_set_vms
    instance = operations.get(estate.group, "vmss-a", "1")
    configuration = instance.properties.network_profile_configuration.network_interface_configurations[0]  # type: ignore[union-attr,index]
    for name in ("pods-1", "pods-2"):
        configuration.properties.ip_configurations.append(  # type: ignore[union-attr]
            models.VirtualMachineScaleSetIPConfiguration(
                name=name,
                properties=models.VirtualMachineScaleSetIPConfigurationProperties(
                    subnet=models.ApiEntityReference(id=estate.subnet_id),
                    private_ip_address_version="IPv4",
                    primary=False,
                ),
            )
        )
    instance.properties.storage_profile.image_reference = None  # type: ignore[union-attr]
    updated = operations.begin_update(estate.group, "vmss-a", "1", instance).result()
    assert updated.properties.provisioning_state == "Succeeded"  # type: ignore[union-attr]
    nic = clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
        estate.group, "vmss-a", "1", "vmss-a-nic"
    )
    by_name = {c.name: c.properties.private_ip_address for c in nic.properties.ip_configurations or []}  # type: ignore[union-attr]
    assert set(by_name) == {"ipconfig1", "pods-1", "pods-2"}
    assert len(set(by_name.values())) == 3
    # Removing one: send the array without it (arrays are replaced whole).
    instance = operations.get(estate.group, "vmss-a", "1")
    configuration = instance.properties.network_profile_configuration.network_interface_configurations[0]  # type: ignore[union-attr,index]
    assert configuration.properties is not None
    assert configuration.properties.ip_configurations is not None
    configuration.properties.ip_configurations = [
        c for c in configuration.properties.ip_configurations if c.name != "pods-2"
    ]
    operations.begin_update(estate.group, "vmss-a", "1", instance).result()
    nic = clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
        estate.group, "vmss-a", "1", "vmss-a-nic"
    )
    assert {c.name for c in nic.properties.ip_configurations or []} == {"ipconfig1", "pods-1"}  # type: ignore[union-attr]


def test_instance_update_with_denied_gallery_image_is_linked_authorization_failed(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A scale-set VM PUT that still carries a gallery image the caller may not read: 403."""
    arm_emulator.state.deny_linked_access(GALLERY_IMAGE)
    operations = clients.compute.virtual_machine_scale_set_vms
    instance = operations.get(estate.group, "vmss-a", "0")
    instance.properties.storage_profile.image_reference = models.ImageReference(id=GALLERY_IMAGE)  # type: ignore[union-attr]
    with pytest.raises(HttpResponseError) as raised:
        operations.begin_update(estate.group, "vmss-a", "0", instance)
    assert raised.value.status_code == 403
    assert raised.value.error is not None
    assert raised.value.error.code == "LinkedAuthorizationFailed"


def test_delete_one_instance(estate: Estate, clients: Clients) -> None:
    """DELETE of one scale-set VM (LRO) removes it and lowers capacity."""
    clients.compute.virtual_machine_scale_set_vms.begin_delete(estate.group, "vmss-a", "0").result()
    with pytest.raises(ResourceNotFoundError):
        clients.compute.virtual_machine_scale_set_vms.get(estate.group, "vmss-a", "0")
    scale_set = clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a")
    assert scale_set.sku.capacity == 1  # type: ignore[union-attr]


def test_delete_instances_action(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """POST .../delete with instanceIds removes them and frees their addresses."""
    subnet = clients.network.subnets.get(estate.group, estate.vnet_name, "nodes")
    used_before = len(subnet.properties.ip_configurations or [])  # type: ignore[union-attr]
    clients.compute.virtual_machine_scale_sets.begin_delete_instances(
        estate.group, "vmss-a", models.VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=["0", "1"])
    ).result()
    assert list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-a")) == []
    subnet = clients.network.subnets.get(estate.group, estate.vnet_name, "nodes")
    assert len(subnet.properties.ip_configurations or []) == used_before - 2  # type: ignore[union-attr]
    assert arm_emulator.requests.entries("VirtualMachineScaleSets.delete_instances")[0].body == {
        "instanceIds": ["0", "1"]
    }


def test_scale_set_instance_view_summarises(estate: Estate, clients: Clients) -> None:
    """The scale-set instance view counts instances by provisioning state."""
    view = clients.compute.virtual_machine_scale_sets.get_instance_view(estate.group, "vmss-a")
    summary = view.virtual_machine.statuses_summary  # type: ignore[union-attr]
    assert [(s.code, s.count) for s in summary or []] == [("ProvisioningState/succeeded", 2)]


def test_create_scale_set_with_put(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """PUT creates a Uniform scale set with its instances (201 + LRO)."""
    body = models.VirtualMachineScaleSet(
        location="eastus",
        sku=models.Sku(name="Standard_D2s_v5", capacity=2),
        properties=models.VirtualMachineScaleSetProperties(
            orchestration_mode="Uniform",
            virtual_machine_profile=models.VirtualMachineScaleSetVMProfile(
                os_profile=models.VirtualMachineScaleSetOSProfile(computer_name_prefix="new-vmss"),
                network_profile=models.VirtualMachineScaleSetNetworkProfile(
                    network_interface_configurations=[
                        models.VirtualMachineScaleSetNetworkConfiguration(
                            name="nic",
                            properties=models.VirtualMachineScaleSetNetworkConfigurationProperties(
                                primary=True,
                                ip_configurations=[
                                    models.VirtualMachineScaleSetIPConfiguration(
                                        name="ipconfig1",
                                        properties=models.VirtualMachineScaleSetIPConfigurationProperties(
                                            subnet=models.ApiEntityReference(id=estate.subnet_id)
                                        ),
                                    )
                                ],
                            ),
                        )
                    ]
                ),
            ),
        ),
    )
    created = clients.compute.virtual_machine_scale_sets.begin_create_or_update(
        estate.group, "vmss-new", body
    ).result()
    assert created.properties.provisioning_state == "Succeeded"  # type: ignore[union-attr]
    names = [
        vm.as_dict()["properties"]["osProfile"]["computerName"]
        for vm in clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-new")
    ]
    assert names == ["new-vmss000000", "new-vmss000001"]


def test_flexible_scale_out_creates_standalone_vm_and_nic(estate: Estate, clients: Clients) -> None:
    """Flexible orchestration: scaling out creates a VM <vmss>_<hex> that references the scale set
    and has its own NIC with an address; the scale set's VM list shows it by name."""
    clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-flex", models.VirtualMachineScaleSetUpdate(sku=models.Sku(capacity=2))
    ).result()
    members = list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-flex"))
    assert len(members) == 2
    name = members[-1].instance_id
    assert name is not None
    assert name.startswith("vmss-flex_")
    machine = clients.compute.virtual_machines.get(estate.group, name)
    assert machine.properties.virtual_machine_scale_set.id == estate.flexible_scale_set_id  # type: ignore[union-attr]
    nic_id = machine.properties.network_profile.network_interfaces[0].id  # type: ignore[union-attr,index]
    nic = clients.network.network_interfaces.get(estate.group, nic_id.rsplit("/", 1)[-1])  # type: ignore[union-attr]
    assert nic.properties.ip_configurations[0].properties.private_ip_address  # type: ignore[union-attr,index]
    clients.compute.virtual_machine_scale_sets.begin_delete_instances(
        estate.group, "vmss-flex", models.VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=[name])
    ).result()
    with pytest.raises(ResourceNotFoundError):
        clients.compute.virtual_machines.get(estate.group, name)


def test_deleting_a_flexible_member_vm_lowers_the_capacity(estate: Estate, clients: Clients) -> None:
    """A Flexible member deleted through the VM API leaves the scale set one smaller, as Azure does,
    so a later scale-out by one creates exactly one member."""
    clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-flex", models.VirtualMachineScaleSetUpdate(sku=models.Sku(capacity=2))
    ).result()
    name = list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-flex"))[-1].instance_id
    assert name is not None
    clients.compute.virtual_machines.begin_delete(estate.group, name).result()
    scale_set = clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-flex")
    assert scale_set.sku is not None
    assert scale_set.sku.capacity == 1
    assert len(list(clients.compute.virtual_machine_scale_set_vms.list(estate.group, "vmss-flex"))) == 1


def test_list_and_delete_scale_sets_and_vms(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """List endpoints return the seeded resources; deleting a scale set removes its instances and
    frees their addresses."""
    assert sorted(s.name for s in clients.compute.virtual_machine_scale_sets.list(estate.group)) == [  # type: ignore[type-var]
        "vmss-a",
        "vmss-flex",
    ]
    assert len(list(clients.compute.virtual_machines.list(estate.group))) == 2  # vm-0 and the Flexible member
    assert [
        i.name for i in clients.identity.user_assigned_identities.list_by_resource_group(estate.group)
    ] == [
        "id-0",
        "id-1",
        "id-2",
    ]
    clients.compute.virtual_machine_scale_sets.begin_delete(estate.group, "vmss-a").result()
    with pytest.raises(ResourceNotFoundError):
        clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a")
    usage = next(iter(clients.network.virtual_networks.list_usage(estate.group, estate.vnet_name)))
    assert usage.current_value == 2  # vm-0 and the Flexible member remain
