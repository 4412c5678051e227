"""StandaloneMachineService through the real SDK clients against the ARM emulator: the standalone
VMs of a resource group (Flexible members left out), a subnet's region, a VM created with its
own NIC from a model (both deleted with it), and a VM created by someone else released with its
NIC (delete options PATCHed first)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.errors import NotFoundError
from nodewright.cloud.factory import Cloud
from nodewright.cloud.models import ImageReference, NodeState
from nodewright.cloud.resource_ids import ResourceGroupId
from nodewright.cloud.standalone_machines import MachineModel, missing_delete_options
from tests.cloud.helpers import cloud_for, publish_test_images

GROUP = "rg-standalone"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ3yTIf7kMEvQqRnGp1o8B0f0dQe7qOL3k1n4C7cR0xY nodewright@test"
IMAGE = ImageReference(
    community_gallery_image_id="/CommunityGalleries/nodewright-test/images/node/versions/2.0.0"
)


@dataclass
class Estate:
    emulator: ArmEmulator
    cloud: Cloud
    subnet_id: str
    group: ResourceGroupId


@pytest.fixture
def estate(arm_emulator: ArmEmulator) -> Iterator[Estate]:
    builder = arm_emulator.estate
    builder.add_resource_group(GROUP)
    publish_test_images(arm_emulator)
    subnet_id = (
        builder.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.240.0.0/16"}) + "/subnets/nodes"
    )
    builder.add_virtual_machine(GROUP, "old-0", subnet_id=subnet_id)
    builder.add_scale_set(GROUP, "flex", subnet_id=subnet_id, capacity=1, orchestration_mode="Flexible")
    cloud = cloud_for(arm_emulator)
    yield Estate(arm_emulator, cloud, subnet_id, ResourceGroupId(DEFAULT_SUBSCRIPTION, GROUP))
    cloud.close()


def _nic_id(name: str) -> str:
    group = f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}"
    return f"{group}/providers/Microsoft.Network/networkInterfaces/{name}"


def _writes(emulator: ArmEmulator, since: float) -> list[str]:
    """The ARM writes the emulator answered since ``since`` (monotonic), by operation name."""
    return [
        entry.operation
        for entry in emulator.requests.entries(since=since)
        if entry.method in ("PUT", "PATCH", "DELETE", "POST")
    ]


def test_lists_the_standalone_vms_of_a_resource_group(estate: Estate) -> None:
    """The Flexible scale set's member VM is not one of the group's."""
    assert estate.cloud.standalone.list_machine_names(estate.group) == ["old-0"]
    with pytest.raises(NotFoundError):
        estate.cloud.standalone.list_machine_names(ResourceGroupId(DEFAULT_SUBSCRIPTION, "rg-missing"))


def test_subnet_location_needs_the_subnet(estate: Estate) -> None:
    assert estate.cloud.standalone.subnet_location(estate.subnet_id) == "eastus"
    with pytest.raises(NotFoundError):
        estate.cloud.standalone.subnet_location(estate.subnet_id.replace("/nodes", "/missing"))


def test_a_created_vm_goes_with_its_nic_in_one_delete(estate: Estate) -> None:
    """Two writes to create (NIC, VM), one to release (the delete options are already set)."""
    started = time.monotonic()
    model = MachineModel(
        vm_size="Standard_D4s_v5",
        subnet_id=estate.subnet_id,
        image=IMAGE,
        ssh_public_key=KEY,
        tags={"pool": "a"},
    )
    instance = estate.cloud.standalone.create_machine(estate.group, "new-0", model)
    assert instance.name == "new-0"
    assert instance.state is NodeState.READY
    assert instance.image is not None
    assert instance.image.same_image(IMAGE)
    assert _writes(estate.emulator, started) == [
        "NetworkInterfaces.create_or_update",
        "VirtualMachines.create_or_update",
    ]
    nic_id = _nic_id("new-0-nic")
    document = estate.emulator.state.render(nic_id)
    assert document is not None
    assert (
        document["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"].lower()
        == estate.subnet_id.lower()
    )
    machine = estate.emulator.state.render(instance.id)
    assert machine is not None
    linux = machine["properties"]["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert [key["keyData"] for key in linux["ssh"]["publicKeys"]] == [KEY]
    assert machine["tags"] == {"pool": "a"}
    started = time.monotonic()
    estate.cloud.standalone.release_machine(estate.group.virtual_machine("new-0"))
    assert _writes(estate.emulator, started) == ["VirtualMachines.delete"]
    assert estate.emulator.state.render(nic_id) is None
    assert estate.emulator.state.render(instance.id) is None


def test_a_foreign_vm_is_released_with_its_nic(estate: Estate) -> None:
    """A VM whose NIC would only be detached gets its delete options PATCHed, then is deleted;
    releasing it again is a no-op."""
    started = time.monotonic()
    estate.cloud.standalone.release_machine(estate.group.virtual_machine("old-0"))
    assert _writes(estate.emulator, started) == ["VirtualMachines.update", "VirtualMachines.delete"]
    nic_id = _nic_id("old-0-nic")
    assert estate.emulator.state.render(nic_id) is None
    started = time.monotonic()
    estate.cloud.standalone.release_machine(estate.group.virtual_machine("old-0"))
    assert _writes(estate.emulator, started) == []


@pytest.mark.parametrize(
    ("nic_option", "disk_option", "patched"),
    [
        pytest.param("Delete", "Delete", False, id="both-delete"),
        pytest.param("Detach", "Delete", True, id="nic-detach"),
        pytest.param("Delete", None, True, id="disk-unset"),
    ],
)
def test_missing_delete_options(nic_option: str, disk_option: str | None, patched: bool) -> None:
    os_disk = {"deleteOption": disk_option} if disk_option else {}
    machine = {
        "properties": {
            "networkProfile": {
                "networkInterfaces": [{"id": "nic", "properties": {"deleteOption": nic_option}}]
            },
            "storageProfile": {"osDisk": os_disk},
        }
    }
    patch = missing_delete_options(machine)
    assert (patch is not None) == patched
    if patch is not None:
        assert patch["properties"]["networkProfile"]["networkInterfaces"] == [
            {"id": "nic", "properties": {"deleteOption": "Delete"}}
        ]
        assert patch["properties"]["storageProfile"]["osDisk"] == {"deleteOption": "Delete"}
