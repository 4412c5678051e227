"""What a machine inherits from its image, through the real SDK: OS type and Windows or Linux
configuration, Trusted Launch for a Generation 2 image and Standard for a Generation 1 image, the
OS disk's size and name, and the exact version ``latest`` resolved to; and images that do not
exist refused as Azure refuses them (404 PlatformImageNotFound, GalleryImageNotFound)."""

from __future__ import annotations

from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.images import MarketplaceImage
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients

WINDOWS_2019 = {"publisher": "MicrosoftWindowsServer", "offer": "WindowsServer", "sku": "2019-Datacenter"}
UBUNTU_2404 = {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server"}


def _raw(pipeline_response: Any, deserialized: Any, headers: Any) -> Any:
    return pipeline_response.http_response.json()


def _create_vm(clients: Clients, estate: Estate, name: str, image: dict[str, str]) -> dict[str, Any]:
    nic_body: dict[str, Any] = {
        "location": "eastus",
        "properties": {
            "ipConfigurations": [{"name": "ipconfig1", "properties": {"subnet": {"id": estate.subnet_id}}}]
        },
    }
    nic = clients.network.network_interfaces.begin_create_or_update(
        estate.group, f"{name}-nic", nic_body
    ).result()  # type: ignore[call-overload]
    body = {
        "location": "eastus",
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
            "storageProfile": {"imageReference": image},
            "osProfile": {"computerName": name, "adminUsername": "azureuser"},
            "networkProfile": {"networkInterfaces": [{"id": nic.id}]},
        },
    }
    clients.compute.virtual_machines.begin_create_or_update(estate.group, name, body).result()  # type: ignore[call-overload]
    document: dict[str, Any] = clients.compute.virtual_machines.get(estate.group, name, cls=_raw)  # type: ignore[assignment]
    return document


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        pytest.param(
            {**WINDOWS_2019, "version": "latest"},
            ("Windows", "windowsConfiguration", "Standard", 127),
            id="windows-generation-1",
        ),
        pytest.param(
            {**UBUNTU_2404, "version": "latest"},
            ("Linux", "linuxConfiguration", "TrustedLaunch", 30),
            id="linux-generation-2",
        ),
    ],
)
def test_vm_inherits_from_its_image(
    estate: Estate,
    clients: Clients,
    image: dict[str, str],
    expected: tuple[str, str, str, int],
) -> None:
    """The VM's OS settings, security type and OS disk follow the catalogued image."""
    os_type, configuration, security_type, disk_size = expected
    document = _create_vm(clients, estate, "imaged", image)
    properties = document["properties"]
    os_disk = properties["storageProfile"]["osDisk"]
    assert os_disk["osType"] == os_type
    assert os_disk["diskSizeGB"] == disk_size
    assert os_disk["name"].startswith("imaged_OsDisk_1_")
    assert (
        os_disk["managedDisk"]["id"]
        .lower()
        .endswith("/providers/microsoft.compute/disks/" + os_disk["name"].lower())
    )
    assert os_disk["managedDisk"]["storageAccountType"] == "Premium_LRS"
    assert configuration in properties["osProfile"]
    assert properties["osProfile"][configuration]["provisionVMAgent"] is True
    assert properties["securityProfile"]["securityType"] == security_type
    assert ("uefiSettings" in properties["securityProfile"]) == (security_type == "TrustedLaunch")


def test_latest_resolves_to_the_newest_published_version(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """``exactVersion`` is the newest version the catalog holds for the SKU, compared as numbers."""
    with arm_emulator.state.locked() as state:
        state.images.add_marketplace_image(MarketplaceImage("Contoso", "node", "gen2", ("1.9.0", "1.10.0")))
    document = _create_vm(clients, estate, "newest", {"publisher": "contoso", "offer": "NODE", "sku": "gen2"})
    reference = document["properties"]["storageProfile"]["imageReference"]
    assert reference["exactVersion"] == "1.10.0"


def test_scale_set_instances_inherit_the_model_and_the_image(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A Uniform instance carries the model's boot diagnostics and user data, a Windows image's
    configuration, and its own OS disk named after the scale set and the instance."""
    arm_emulator.estate.add_scale_set(
        estate.group,
        "win",
        subnet_id=estate.subnet_id,
        capacity=1,
        image={**WINDOWS_2019, "version": "latest"},
    )
    instance = clients.compute.virtual_machine_scale_set_vms.get(estate.group, "win", "0", cls=_raw)
    properties = instance["properties"]
    assert properties["modelDefinitionApplied"] == "VirtualMachineScaleSet"
    assert properties["osProfile"]["windowsConfiguration"]["enableAutomaticUpdates"] is True
    assert properties["storageProfile"]["osDisk"]["name"].startswith("win_win_0_OsDisk_1_")
    assert properties["storageProfile"]["imageReference"]["exactVersion"]
    model = clients.compute.virtual_machine_scale_sets.get(estate.group, "win", cls=_raw)
    assert model["properties"]["virtualMachineProfile"]["securityProfile"] == {"securityType": "Standard"}


def _error(caught: pytest.ExceptionInfo[HttpResponseError]) -> tuple[int | None, str, str]:
    error = caught.value.error
    assert error is not None
    return caught.value.status_code, str(error.code), str(error.target)


@pytest.mark.parametrize(
    "image",
    [
        pytest.param(
            {"publisher": "Contoso", "offer": "nothing", "sku": "here", "version": "1.0.0"}, id="unknown-sku"
        ),
        pytest.param({**UBUNTU_2404, "version": "24.04.100"}, id="unknown-version"),
    ],
)
def test_vm_with_an_unpublished_marketplace_image_is_not_found(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients, image: dict[str, str]
) -> None:
    """404 PlatformImageNotFound on imageReference, as Azure answers; no VM is left behind."""
    with pytest.raises(HttpResponseError) as caught:
        _create_vm(clients, estate, "unpublished", image)
    assert _error(caught) == (404, "PlatformImageNotFound", "imageReference")
    urn = ":".join(image[key] for key in ("publisher", "offer", "sku", "version"))
    assert f"The platform image '{urn}' is not available" in caught.value.message
    vm_id = estate.vm_id.rsplit("/", 1)[0] + "/unpublished"
    assert arm_emulator.state.render(vm_id) is None


def test_scale_set_model_image_is_checked_against_marketplace_and_known_galleries(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """PATCHing the model to an unpublished marketplace version or to a missing version of a gallery
    the emulator knows is refused (404) and leaves the model as it was; a published version, and an
    image of a gallery the emulator knows nothing of, are accepted."""
    gallery = (
        estate.subnet_id.split("/providers/")[0] + "/providers/Microsoft.Compute/galleries/nodes/images/node"
    )
    arm_emulator.estate.add_gallery_image(gallery, ["1.0.0"])
    operations = clients.compute.virtual_machine_scale_sets
    refused = [
        (
            {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "1.2.3"},
            "PlatformImageNotFound",
        ),
        ({"id": gallery + "/versions/9.9.9"}, "GalleryImageNotFound"),
    ]
    for image, code in refused:
        patch = {"properties": {"virtualMachineProfile": {"storageProfile": {"imageReference": image}}}}
        with pytest.raises(HttpResponseError) as caught:
            operations.begin_update(estate.group, "vmss-a", patch).result()  # type: ignore[call-overload]
        assert _error(caught) == (404, code, "imageReference")
    model = operations.get(estate.group, "vmss-a").virtual_machine_profile
    assert model is not None
    assert model.storage_profile is not None
    assert model.storage_profile.image_reference is not None
    assert model.storage_profile.image_reference.sku == "server"
    for image in (
        {"id": gallery + "/versions/1.0.0"},
        {"communityGalleryImageId": "/CommunityGalleries/other/images/i/versions/7.0.0"},
    ):
        patch = {"properties": {"virtualMachineProfile": {"storageProfile": {"imageReference": image}}}}
        operations.begin_update(estate.group, "vmss-a", patch).result()  # type: ignore[call-overload]
