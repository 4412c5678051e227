"""/28 prefix mode, emulator side (experimental): a NIC IP configuration with
``privateIPAddressPrefixLength: 28`` gets an aligned block of 16 addresses in one ARM write, as in
Azure's published NetworkInterfaceCreate example; the block counts 16 against the subnet and is
freed whole when the configuration is removed. Driven through the real Azure SDK."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.helpers import cloud_for

EXAMPLE = (
    Path(__file__).resolve().parents[3].parent
    / "shared/reference/azure-rest-api-examples/network/NetworkInterfaceCreate.json"
)


def test_a_prefix_configuration_gets_an_aligned_block_of_16(arm_emulator: ArmEmulator) -> None:
    """The example's body (its subnet replaced by the emulator's): ipconfig2, without a subnet of
    its own, gets the primary's subnet and the first free aligned /28 (172.20.2.16/28 after the
    primary's 172.20.2.4, as in the example's response); removing it frees all 16."""
    example = json.loads(EXAMPLE.read_text())
    expected = example["responses"]["200"]["body"]["properties"]["ipConfigurations"][1]["properties"]
    estate = arm_emulator.estate
    estate.add_resource_group("rg1")
    vnet = estate.add_virtual_network("rg1", "rg1-vnet", subnets={"default": "172.20.2.0/24"})
    body = example["parameters"]["parameters"]
    body["properties"]["ipConfigurations"][0]["properties"] = {"subnet": {"id": vnet + "/subnets/default"}}
    cloud = cloud_for(arm_emulator)
    try:
        interfaces = cloud.clients.network.network_interfaces
        created = interfaces.begin_create_or_update("rg1", "test-nic", body).result()
        block = created.ip_configurations[1]
        assert block.private_ip_address == expected["privateIPAddress"] == "172.20.2.16/28"
        assert block.private_ip_address_prefix_length == expected["privateIPAddressPrefixLength"] == 28
        assert block.subnet.id.lower() == (vnet + "/subnets/default").lower()
        network = ipaddress.ip_network(block.private_ip_address)
        assert network.num_addresses == 16
        assert cloud.network.get_subnet(vnet + "/subnets/default").used == 1 + 16

        created.ip_configurations = created.ip_configurations[:1]
        interfaces.begin_create_or_update("rg1", "test-nic", created).result()
        assert cloud.network.get_subnet(vnet + "/subnets/default").used == 1
    finally:
        cloud.close()
