"""Contract: Microsoft.Network through NetworkManagementClient: NIC GET and full PUT with etags,
IP configuration limits, subnet exhaustion and usage, the scale-set NIC view, subnets."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import threading

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.network import models

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients, assert_round_trips, sdk_clients


def _secondary(name: str, subnet_id: str) -> models.NetworkInterfaceIPConfiguration:
    return models.NetworkInterfaceIPConfiguration(
        name=name,
        properties=models.NetworkInterfaceIPConfigurationPropertiesFormat(
            private_ip_allocation_method="Dynamic", subnet=models.Subnet(id=subnet_id), primary=False
        ),
    )


def _nic_id(estate: Estate, name: str) -> str:
    return estate.vm_id.replace(
        "Microsoft.Compute/virtualMachines/vm-0", f"Microsoft.Network/networkInterfaces/{name}"
    )


def test_get_nic_round_trips(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """GET keeps the etag, the primary IP configuration with its address and subnet, the VM link."""
    nic = clients.network.network_interfaces.get(estate.group, "vm-0-nic")
    assert_round_trips(nic, arm_emulator.state.render(_nic_id(estate, "vm-0-nic")))
    assert nic.etag is not None
    assert nic.etag.startswith('W/"')
    configuration = (nic.properties.ip_configurations or [])[0]  # type: ignore[union-attr]
    assert configuration.name == "ipconfig1"
    assert configuration.properties.primary is True  # type: ignore[union-attr]
    assert configuration.properties.private_ip_address == "10.240.0.4"  # type: ignore[union-attr]
    assert configuration.properties.subnet.id == estate.subnet_id  # type: ignore[union-attr]
    assert nic.properties.virtual_machine.id == estate.vm_id  # type: ignore[union-attr]


def test_put_nic_adds_secondary_addresses(estate: Estate, clients: Clients) -> None:
    """Full PUT with two more IP configurations: each gets a unique address from the subnet CIDR
    (not one of the five reserved), the etag changes, the LRO completes."""
    operations = clients.network.network_interfaces
    nic = operations.get(estate.group, "vm-0-nic")
    assert nic.properties is not None
    assert nic.properties.ip_configurations is not None
    nic.properties.ip_configurations += [
        _secondary("s1", estate.subnet_id),
        _secondary("s2", estate.subnet_id),
    ]
    updated = operations.begin_create_or_update(
        estate.group, "vm-0-nic", nic, headers={"If-Match": nic.etag}
    ).result()
    addresses = [str(c.properties.private_ip_address) for c in updated.properties.ip_configurations or []]  # type: ignore[union-attr]
    assert len(set(addresses)) == 3
    network = ipaddress.ip_network("10.240.0.0/24")
    reserved = {network.network_address + offset for offset in range(4)} | {network.broadcast_address}
    assert all(
        ipaddress.ip_address(a) in network and ipaddress.ip_address(a) not in reserved for a in addresses
    )
    assert updated.etag != nic.etag
    assert updated.properties.provisioning_state == "Succeeded"  # type: ignore[union-attr]


def test_put_nic_with_stale_etag_is_precondition_failed(estate: Estate, clients: Clients) -> None:
    """If-Match with an etag that no longer matches: 412 PreconditionFailed, nothing changes.
    (azure-mgmt-network's NIC PUT has no etag keyword: the header goes in through ``headers=``.)"""
    operations = clients.network.network_interfaces
    stale = operations.get(estate.group, "vm-0-nic")
    fresh = operations.get(estate.group, "vm-0-nic")
    fresh.properties.ip_configurations.append(_secondary("s1", estate.subnet_id))  # type: ignore[union-attr]
    operations.begin_create_or_update(
        estate.group, "vm-0-nic", fresh, headers={"If-Match": fresh.etag}
    ).result()
    stale.properties.ip_configurations.append(_secondary("s2", estate.subnet_id))  # type: ignore[union-attr]
    with pytest.raises(HttpResponseError) as raised:
        operations.begin_create_or_update(estate.group, "vm-0-nic", stale, headers={"If-Match": stale.etag})
    assert raised.value.status_code == 412
    assert raised.value.error is not None
    assert raised.value.error.code == "PreconditionFailed"
    names = [c.name for c in operations.get(estate.group, "vm-0-nic").properties.ip_configurations or []]  # type: ignore[union-attr]
    assert names == ["ipconfig1", "s1"]


def test_nic_ip_configuration_limit_is_256(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """256 IP configurations are accepted; 257 are rejected with 400 and the limit code."""
    arm_emulator.estate.add_subnet(estate.subnet_id.rsplit("/subnets/", 1)[0], "big", "10.250.0.0/22")
    big_subnet = estate.subnet_id.replace("/subnets/nodes", "/subnets/big")
    operations = clients.network.network_interfaces
    nic = operations.get(estate.group, "vm-0-nic")
    nic.properties.ip_configurations += [_secondary(f"s{index}", big_subnet) for index in range(255)]  # type: ignore[union-attr,operator]
    updated = operations.begin_create_or_update(estate.group, "vm-0-nic", nic).result()
    assert len(updated.properties.ip_configurations or []) == 256  # type: ignore[union-attr]
    updated.properties.ip_configurations.append(_secondary("one-too-many", big_subnet))  # type: ignore[union-attr]
    with pytest.raises(HttpResponseError) as raised:
        operations.begin_create_or_update(estate.group, "vm-0-nic", updated)
    assert raised.value.status_code == 400
    assert raised.value.error is not None
    assert raised.value.error.code == "NetworkInterfaceIpConfigurationCountExceedsLimit"


def test_removing_primary_ip_configuration_is_not_supported(estate: Estate, clients: Clients) -> None:
    """A PUT without (or renaming) the primary IP configuration: 400 IpConfigDeleteNotSupported."""
    operations = clients.network.network_interfaces
    nic = operations.get(estate.group, "vm-0-nic")
    nic.properties.ip_configurations[0].name = "renamed"  # type: ignore[union-attr,index]
    with pytest.raises(HttpResponseError) as raised:
        operations.begin_create_or_update(estate.group, "vm-0-nic", nic)
    assert raised.value.error is not None
    assert raised.value.error.code == "IpConfigDeleteNotSupported"


def test_secondary_removal_frees_the_address(estate: Estate, clients: Clients) -> None:
    """Dropping a secondary IP configuration from the PUT frees its address for the next one."""
    operations = clients.network.network_interfaces
    nic = operations.get(estate.group, "vm-0-nic")
    nic.properties.ip_configurations.append(_secondary("s1", estate.subnet_id))  # type: ignore[union-attr]
    nic = operations.begin_create_or_update(estate.group, "vm-0-nic", nic).result()
    freed = nic.properties.ip_configurations[1].properties.private_ip_address  # type: ignore[union-attr,index]
    nic.properties.ip_configurations = nic.properties.ip_configurations[:1]  # type: ignore[union-attr,index]
    operations.begin_create_or_update(estate.group, "vm-0-nic", nic).result()
    usage = next(iter(clients.network.virtual_networks.list_usage(estate.group, estate.vnet_name)))
    assert usage.current_value == 4
    nic.properties.ip_configurations.append(_secondary("s2", estate.subnet_id))  # type: ignore[union-attr]
    nic = operations.begin_create_or_update(estate.group, "vm-0-nic", nic).result()
    assert nic.properties.ip_configurations[1].properties.private_ip_address == freed  # type: ignore[union-attr,index]


def test_subnet_exhaustion_is_subnet_is_full(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A /29 has 3 usable addresses: the fourth IP configuration fails with 400 SubnetIsFull and
    the NIC keeps its previous state."""
    operations = clients.network.network_interfaces
    nic = operations.get(estate.group, "vm-0-nic")
    nic.properties.ip_configurations += [_secondary(f"s{i}", estate.small_subnet_id) for i in range(3)]  # type: ignore[union-attr,operator]
    nic = operations.begin_create_or_update(estate.group, "vm-0-nic", nic).result()
    nic.properties.ip_configurations.append(_secondary("s3", estate.small_subnet_id))  # type: ignore[union-attr]
    with pytest.raises(HttpResponseError) as raised:
        operations.begin_create_or_update(estate.group, "vm-0-nic", nic)
    assert raised.value.status_code == 400
    assert raised.value.error is not None
    assert raised.value.error.code == "SubnetIsFull"
    assert len(operations.get(estate.group, "vm-0-nic").properties.ip_configurations or []) == 4  # type: ignore[union-attr]


def test_scale_out_into_full_subnet_fails(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A scale set whose subnet is full cannot scale out: SubnetIsFull, capacity unchanged."""
    arm_emulator.estate.add_scale_set(
        estate.group, "vmss-small", subnet_id=estate.small_subnet_id, capacity=3
    )
    from azure.mgmt.compute import models as compute_models  # noqa: PLC0415 - only this test needs it

    with pytest.raises(HttpResponseError) as raised:
        clients.compute.virtual_machine_scale_sets.begin_update(
            estate.group,
            "vmss-small",
            compute_models.VirtualMachineScaleSetUpdate(sku=compute_models.Sku(capacity=4)),
        )
    assert raised.value.error is not None
    assert raised.value.error.code == "SubnetIsFull"
    assert clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-small").sku.capacity == 3  # type: ignore[union-attr]


def test_virtual_network_usage(estate: Estate, clients: Clients) -> None:
    """Usage per subnet: current value = allocated addresses, limit = CIDR size minus 5 reserved."""
    usages = {u.id: u for u in clients.network.virtual_networks.list_usage(estate.group, estate.vnet_name)}
    nodes = usages[estate.subnet_id]
    assert (nodes.current_value, nodes.limit, nodes.unit) == (4, 251, "Count")
    assert nodes.name.value == "SubnetSpace"  # type: ignore[union-attr]
    assert nodes.name.localized_value == "Subnet size and usage"  # type: ignore[union-attr]
    assert (usages[estate.small_subnet_id].current_value, usages[estate.small_subnet_id].limit) == (0, 3)


def test_get_subnet(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """Subnet GET: CIDR and the IP configurations that hold its addresses."""
    subnet = clients.network.subnets.get(estate.group, estate.vnet_name, "nodes")
    assert_round_trips(subnet, arm_emulator.state.render(estate.subnet_id))
    assert subnet.properties is not None
    assert subnet.properties.address_prefix == "10.240.0.0/24"
    owners = [c.id for c in subnet.properties.ip_configurations or []]
    assert (
        estate.scale_set_id + "/virtualMachines/0/networkInterfaces/vmss-a-nic/ipConfigurations/ipconfig1"
        in owners
    )


def test_scale_set_nic_view_get_and_list(estate: Estate, clients: Clients) -> None:
    """The read-only NIC of a Uniform instance: GET by name and list for the instance."""
    operations = clients.network.network_interfaces
    nic = operations.get_virtual_machine_scale_set_network_interface(
        estate.group, "vmss-a", "1", "vmss-a-nic"
    )
    assert nic.id == estate.scale_set_id + "/virtualMachines/1/networkInterfaces/vmss-a-nic"
    assert nic.properties.virtual_machine.id == estate.scale_set_id + "/virtualMachines/1"  # type: ignore[union-attr]
    listed = list(
        operations.list_virtual_machine_scale_set_vm_network_interfaces(estate.group, "vmss-a", "1")
    )
    assert [item.name for item in listed] == ["vmss-a-nic"]
    assert listed[0].properties.ip_configurations[0].properties.private_ip_address == "10.240.0.6"  # type: ignore[union-attr,index]


def test_concurrent_writers_with_the_same_etag_one_wins(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """Eight clients PUT the NIC concurrently with the etag they all read: exactly one succeeds,
    the others get 412, and the emulator logged every If-Match."""
    readers = [sdk_clients(arm_emulator, retry_total=0) for _ in range(8)]
    snapshots = [client.network.network_interfaces.get(estate.group, "vm-0-nic") for client in readers]
    assert len({nic.etag for nic in snapshots}) == 1
    barrier = threading.Barrier(len(readers))

    def write(index: int) -> int:
        nic = snapshots[index]
        assert nic.properties is not None
        assert nic.properties.ip_configurations is not None
        nic.properties.ip_configurations.append(_secondary(f"writer-{index}", estate.subnet_id))
        barrier.wait()
        try:
            readers[index].network.network_interfaces.begin_create_or_update(
                estate.group, "vm-0-nic", nic, headers={"If-Match": str(nic.etag)}
            ).result()
        except HttpResponseError as error:
            return int(error.status_code or 0)
        return 200

    with concurrent.futures.ThreadPoolExecutor(len(readers)) as pool:
        statuses = sorted(pool.map(write, range(len(readers))))
    assert statuses == [200] + [412] * 7
    puts = arm_emulator.requests.entries("NetworkInterfaces.create_or_update")
    assert {entry.if_match for entry in puts} == {snapshots[0].etag}


def test_nat_gateways_show_on_their_subnets_and_source_network(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A Standard NAT gateway associated with a subnet is named in that subnet's ``natGateway``; a
    StandardV2 one whose source network is the vnet is the vnet's ``defaultPublicNatGateway``.
    Without either, neither field appears."""
    plain_vnet = clients.network.virtual_networks.get(estate.group, estate.vnet_name)
    assert plain_vnet.default_public_nat_gateway is None
    assert all(subnet.nat_gateway is None for subnet in plain_vnet.subnets)
    vnet_id = estate.subnet_id.rsplit("/subnets/", 1)[0]
    subnet_gateway = arm_emulator.estate.add_nat_gateway(
        estate.group, "ngw-nodes", subnets=(estate.subnet_id,)
    )
    default_gateway = arm_emulator.estate.add_nat_gateway(
        estate.group, "ngw-v2", source_virtual_network=vnet_id
    )
    vnet = clients.network.virtual_networks.get(estate.group, estate.vnet_name)
    assert vnet.default_public_nat_gateway is not None
    assert vnet.default_public_nat_gateway.id == default_gateway
    subnets = {subnet.name: subnet for subnet in vnet.subnets}
    assert subnets["nodes"].nat_gateway is not None
    assert subnets["nodes"].nat_gateway.id == subnet_gateway
    assert subnets["small"].nat_gateway is None
    subnet = clients.network.subnets.get(estate.group, estate.vnet_name, "nodes")
    assert subnet.nat_gateway is not None
    assert subnet.nat_gateway.id == subnet_gateway
