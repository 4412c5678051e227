"""The read-only NICs of Uniform scale-set instances through NetworkManagementClient: what the
scale set's model references (security group, load balancer pools, inbound NAT pools, public IP
configuration) appears on each instance's NIC as Azure shows it, with a stable MAC address and the
virtual network's internal DNS suffix; the NICs of a whole scale set listed in pages, at the
api-versions Azure serves that route at."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.raw_https import call
from tests.cloud.emulator.sdk_clients import Clients


def _raw(pipeline_response: Any, deserialized: Any, headers: Any) -> Any:
    return pipeline_response.http_response.json()


def _scale_set(estate: Estate, network: str) -> dict[str, Any]:
    ip_configuration = {
        "name": "ipconfig1",
        "properties": {
            "subnet": {"id": estate.subnet_id},
            "loadBalancerBackendAddressPools": [
                {"id": f"{network}/loadBalancers/lb/backendAddressPools/nodes"}
            ],
            "loadBalancerInboundNatPools": [{"id": f"{network}/loadBalancers/lb/inboundNatPools/ssh"}],
            "publicIPAddressConfiguration": {"name": "public", "properties": {}},
        },
    }
    return {
        "location": "eastus",
        "sku": {"name": "Standard_D2s_v5", "capacity": 2},
        "properties": {
            "virtualMachineProfile": {
                "storageProfile": {
                    "imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server"}
                },
                "osProfile": {"computerNamePrefix": "lb", "adminUsername": "azureuser"},
                "networkProfile": {
                    "networkInterfaceConfigurations": [
                        {
                            "name": "nic",
                            "properties": {
                                "primary": True,
                                "networkSecurityGroup": {"id": f"{network}/networkSecurityGroups/nodes"},
                                "dnsSettings": {"dnsServers": ["10.0.0.10"]},
                                "ipConfigurations": [ip_configuration],
                            },
                        }
                    ]
                },
            }
        },
    }


def test_instance_nics_show_what_the_model_references(estate: Estate, clients: Clients) -> None:
    """Each instance's NIC carries the model's NSG and backend pool, its own NAT rule
    ``<pool>.<instance id>`` and public address, the model's DNS servers and a stable MAC."""
    network = estate.subnet_id.split("/virtualNetworks/")[0]
    clients.compute.virtual_machine_scale_sets.begin_create_or_update(  # type: ignore[call-overload]
        estate.group, "behind-lb", _scale_set(estate, network)
    ).result()
    nics: dict[str, Any] = {
        index: clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
            estate.group, "behind-lb", index, "nic", cls=_raw
        )
        for index in ("0", "1")
    }
    for index, nic in nics.items():
        properties = nic["properties"]
        configuration = properties["ipConfigurations"][0]
        references = configuration["properties"]
        assert properties["networkSecurityGroup"]["id"].endswith("/networkSecurityGroups/nodes")
        assert references["loadBalancerBackendAddressPools"][0]["id"].endswith("/backendAddressPools/nodes")
        assert [rule["id"].rsplit("/", 1)[-1] for rule in references["loadBalancerInboundNatRules"]] == [
            f"ssh.{index}"
        ]
        assert references["publicIPAddress"]["id"] == f"{configuration['id']}/publicIPAddresses/public"
        assert properties["dnsSettings"]["dnsServers"] == ["10.0.0.10"]
        assert properties["dnsSettings"]["internalDomainNameSuffix"].endswith(".internal.cloudapp.net")
    assert nics["0"]["properties"]["macAddress"] != nics["1"]["properties"]["macAddress"]
    again = clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
        estate.group, "behind-lb", "0", "nic"
    )
    assert again.mac_address == nics["0"]["properties"]["macAddress"]


@pytest.mark.parametrize("api_version", ["2017-03-30", "2018-10-01", "2024-05-01"])
def test_scale_set_nics_listed_in_pages(arm_emulator: ArmEmulator, estate: Estate, api_version: str) -> None:
    """GET .../virtualMachineScaleSets/{vmss}/networkInterfaces answers at the old api-versions
    too (Cilium sends 2017-03-30): each instance's NIC as the per-instance list shows it, with its
    virtualMachine reference, a page at a time with a nextLink on all but the last page."""
    arm_emulator.state.list_page_size = 1
    scale_set = estate.scale_set_id.split("/providers/", 1)[1]
    path = f"{estate.scale_set_id}/networkInterfaces?api-version={api_version}"
    pages = []
    while path:
        answer = call(arm_emulator, "GET", path, token="t")
        assert answer.status == 200, answer.body
        pages.append(answer.body)
        next_link = answer.body.get("nextLink")
        path = next_link.removeprefix(arm_emulator.endpoint) if next_link else ""
    assert [len(page["value"]) for page in pages] == [1, 1]
    listed = [page["value"][0] for page in pages]
    for index, nic in enumerate(listed):
        instance = f"{estate.scale_set_id}/virtualMachines/{index}"
        assert nic["properties"]["virtualMachine"]["id"] == instance
        assert nic["id"].startswith(f"{instance}/networkInterfaces/")
        alone = call(
            arm_emulator, "GET", f"{instance}/networkInterfaces?api-version={api_version}", token="t"
        )
        assert alone.body["value"] == [nic], scale_set


def test_flexible_scale_set_lists_no_instance_nics(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """A Flexible scale set's members have standalone NICs (the resource group's list): none here."""
    answer = call(
        arm_emulator,
        "GET",
        f"{estate.flexible_scale_set_id}/networkInterfaces?api-version=2018-10-01",
        token="t",
    )
    assert answer.status == 200
    assert answer.body == {"value": []}
