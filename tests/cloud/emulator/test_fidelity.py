"""The emulator answers as Azure does where it used to be friendlier: secrets never returned,
userData only on request, Azure's current NIC address error codes, NIC DELETE as a long-running
operation, NIC-level primary, SubnetSpace usage, server defaults, a secondary IP configuration
that inherits the primary's subnet."""

from __future__ import annotations

from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.network import models

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients


def _raw(pipeline_response: Any, deserialized: Any, headers: Any) -> Any:
    return pipeline_response.http_response.json()


def _configuration(
    name: str, subnet_id: str | None, *, method: str = "Dynamic", address: str | None = None
) -> models.NetworkInterfaceIPConfiguration:
    return models.NetworkInterfaceIPConfiguration(
        name=name,
        properties=models.NetworkInterfaceIPConfigurationPropertiesFormat(
            private_ip_allocation_method=method,
            private_ip_address=address,
            subnet=models.Subnet(id=subnet_id) if subnet_id else None,
        ),
    )


def _nic(location: str, *configurations: models.NetworkInterfaceIPConfiguration) -> models.NetworkInterface:
    return models.NetworkInterface(
        location=location,
        properties=models.NetworkInterfacePropertiesFormat(ip_configurations=list(configurations)),
    )


def test_vm_never_returns_admin_password_or_custom_data(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A VM PUT with adminPassword, customData and userData: neither the PUT's answer nor a GET
    carries the first two; userData comes back only with $expand=userData."""
    group = estate.group
    nic = clients.network.network_interfaces.begin_create_or_update(
        group, "secret-nic", _nic("westeurope", _configuration("ipconfig1", estate.subnet_id))
    ).result()
    body: dict[str, Any] = {
        "location": "westeurope",
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
            "storageProfile": {
                "imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server"}
            },
            "osProfile": {
                "computerName": "secret",
                "adminUsername": "azureuser",
                "adminPassword": "Pa55-word!",
                "customData": "Y3VzdG9t",
            },
            "networkProfile": {"networkInterfaces": [{"id": nic.id}]},
            "userData": "dXNlcmRhdGE=",
        },
    }
    poller = clients.compute.virtual_machines.begin_create_or_update(group, "secret-vm", body)  # type: ignore[call-overload]
    poller.result()
    plain = clients.compute.virtual_machines.get(group, "secret-vm", cls=_raw)
    expanded = clients.compute.virtual_machines.get(group, "secret-vm", expand="userData", cls=_raw)
    listed = clients.compute.virtual_machines.list(group)
    for document in (plain, expanded, *[vm.as_dict() for vm in listed]):
        os_profile = document["properties"]["osProfile"]
        assert "adminPassword" not in os_profile
        assert "customData" not in os_profile
    assert "userData" not in plain["properties"]
    assert expanded["properties"]["userData"] == "dXNlcmRhdGE="
    assert plain["properties"]["storageProfile"]["osDisk"]["osType"] == "Linux"


@pytest.mark.parametrize(
    ("method", "address", "code"),
    [
        pytest.param("Static", None, "PrivateIPAddressMissing", id="static-without-address"),
        pytest.param("Static", "10.240.0.2", "PrivateIPAddressInReservedRange", id="reserved"),
        pytest.param("Static", "10.9.9.9", "PrivateIPAddressNotInSubnet", id="outside"),
        pytest.param("Static", "10.240.0.4", "PrivateIPAddressIsAllocated", id="held-by-vm-0-nic"),
    ],
)
def test_static_address_errors_use_azures_codes(
    estate: Estate, clients: Clients, method: str, address: str | None, code: str
) -> None:
    """Each bad static address is refused with 400 and the code Azure uses today."""
    with pytest.raises(HttpResponseError) as caught:
        clients.network.network_interfaces.begin_create_or_update(
            estate.group,
            "bad-nic",
            _nic("westeurope", _configuration("ipconfig1", estate.subnet_id, method=method, address=address)),
        ).result()
    assert caught.value.status_code == 400
    assert caught.value.error is not None
    assert caught.value.error.code == code


def test_secondary_without_subnet_takes_the_primarys(estate: Estate, clients: Clients) -> None:
    """As in Azure's NetworkInterfaceCreate example: the secondary names no subnet and is accepted;
    defaults are filled in (address version, NIC-level primary)."""
    nic = clients.network.network_interfaces.begin_create_or_update(
        estate.group,
        "two-nic",
        _nic(
            "westeurope",
            _configuration("ipconfig1", estate.subnet_id),
            _configuration("ipconfig2", None),
        ),
    ).result()
    assert nic.properties is not None
    configurations = nic.properties.ip_configurations or []
    assert [c.properties.subnet.id for c in configurations] == [estate.subnet_id] * 2  # type: ignore[union-attr]
    assert {c.properties.private_ip_address_version for c in configurations} == {"IPv4"}  # type: ignore[union-attr]
    assert nic.properties.primary is True


def test_nic_delete_is_a_long_running_operation(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """DELETE answers 202 with Azure-AsyncOperation and Location; once polled, the NIC is gone
    and its addresses are free again."""
    clients.network.network_interfaces.begin_create_or_update(
        estate.group, "short-nic", _nic("westeurope", _configuration("ipconfig1", estate.subnet_id))
    ).result()
    clients.network.network_interfaces.begin_delete(estate.group, "short-nic").result()
    delete = arm_emulator.requests.entries("NetworkInterfaces.delete")
    assert [entry.status for entry in delete] == [202]
    with pytest.raises(HttpResponseError) as caught:
        clients.network.network_interfaces.get(estate.group, "short-nic")
    assert caught.value.status_code == 404


def test_subnet_usage_is_named_subnet_space(estate: Estate, clients: Clients) -> None:
    usages = list(clients.network.virtual_networks.list_usage(estate.group, estate.vnet_name))
    assert {usage.name.value for usage in usages} == {"SubnetSpace"}  # type: ignore[union-attr]
