"""/28 prefix mode (experimental): a NIC IP configuration with ``privateIPAddressPrefixLength: 28``
gets an aligned block of 16 addresses in one ARM write, as in Azure's published
NetworkInterfaceCreate example (counted 16 against the subnet, freed whole), and the reconciler's
``prefixBlocks`` mode sizes a node in such blocks and records them as a vnetblock container."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from nodewright.cloud.emulator import ArmEmulator
from nodewright.ipam import PoolScaler, pool_target
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.harness import IpamHarness
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)


def _writes(ipam: IpamHarness) -> int:
    return len(
        [r for r in ipam.emulator.requests.entries() if r.method in {"PUT", "PATCH", "DELETE", "POST"}]
    )


EXAMPLE = (
    Path(__file__).resolve().parents[3].parent
    / "shared/reference/azure-rest-api-examples/network/NetworkInterfaceCreate.json"
)


def test_a_prefix_configuration_gets_an_aligned_block_of_16(arm_emulator: ArmEmulator) -> None:
    """The example's body (its subnet replaced by the emulator's): ipconfig2, without a subnet of
    its own, gets the primary's subnet and the first free aligned /28 (172.20.2.16/28 after the
    primary's 172.20.2.4, as in the example's response); re-sent with the NIC it stays; removing
    it frees all 16."""
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

        again = interfaces.begin_create_or_update("rg1", "test-nic", created).result()
        assert again.ip_configurations[1].private_ip_address == "172.20.2.16/28", "a re-sent block moved"
        assert cloud.network.get_subnet(vnet + "/subnets/default").used == 1 + 16
        created.ip_configurations = created.ip_configurations[:1]
        interfaces.begin_create_or_update("rg1", "test-nic", created).result()
        assert cloud.network.get_subnet(vnet + "/subnets/default").used == 1
    finally:
        cloud.close()


def test_prefix_mode_allocates_blocks_and_records_a_vnetblock_container(ipam: IpamHarness) -> None:
    """prefixBlocks with consumer nodesubnet on a standalone VM: 20 pods ask for 24 IPs, which two
    /28 blocks cover, added in one ARM write; the NNC carries a static vnetblock container whose
    ipAssignments are the blocks and assignedIPCount counts addresses; the simulated CNS hands
    the pods addresses from the blocks."""
    ipam.configure(consumer="nodesubnet", prefix_blocks=True, scaler=SCALER)
    ipam.add_virtual_machine()
    ipam.start(agent=False)
    node = eventually(ipam.node_names, message="the VM's node")[0]
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 1, message="first block")
    writes_before = _writes(ipam)
    consumer = ipam.start_nodesubnet_consumer()
    ipam.create_pods(node, 20)
    eventually(lambda: len(ipam.pod_addresses(node)) == 20, timeout=60, message="pods addressed")
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 2, timeout=30, message="two blocks")
    config = ipam.config(node)
    assert config is not None
    container = config.status.network_containers[0]
    assert (container.type, container.assignment_mode) == ("vnetblock", "static")
    assert all(a.ip.endswith("/28") for a in container.ip_assignments)
    assert config.status.assigned_ip_count == 32
    assert config.spec.requested_ip_count == pool_target(20, SCALER)
    assert _writes(ipam) - writes_before == 1, "the second block took more than one write"
    blocks = [ipaddress.ip_network(a.ip) for a in container.ip_assignments]
    for address in ipam.pod_addresses(node).values():
        assert any(ipaddress.ip_address(address) in block for block in blocks)
    assert consumer.stale_handouts == 0
    ipam.check_invariants()
