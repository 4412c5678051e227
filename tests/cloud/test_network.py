"""NetworkService through the real azure-mgmt-network (and -compute) clients against the ARM
emulator: NIC reads, secondary IP configurations with etags and one writer per NIC, the uniform
scale-set instance path, 256 per NIC, a full subnet, subnet usage."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.errors import (
    CloudError,
    LimitExceededError,
    NotFoundError,
    PreconditionFailedError,
    SubnetFullError,
    ThrottledError,
)
from nodewright.cloud.factory import Cloud
from nodewright.cloud.network import NetworkService
from nodewright.cloud.nic_pages import NicPageMemo
from nodewright.cloud.resource_ids import parse_scale_set_id
from nodewright.controllers.node_network_config.subnets import SubnetBook
from tests.cloud.helpers import cloud_for

GROUP = "rg-network"
CIDR = "10.240.0.0/16"


@dataclass
class Estate:
    emulator: ArmEmulator
    cloud: Cloud
    virtual_network_id: str
    subnet_id: str

    def nic_id(self, name: str) -> str:
        return (
            f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}"
            f"/providers/Microsoft.Network/networkInterfaces/{name}"
        )


@pytest.fixture
def estate(arm_emulator: ArmEmulator) -> Iterator[Estate]:
    arm_emulator.estate.add_resource_group(GROUP)
    vnet = arm_emulator.estate.add_virtual_network(
        GROUP, "vnet", address_prefixes=["10.240.0.0/12"], subnets={"nodes": CIDR, "tiny": "10.250.0.0/29"}
    )
    cloud = cloud_for(arm_emulator)
    yield Estate(arm_emulator, cloud, vnet, vnet + "/subnets/nodes")
    cloud.close()


def test_read_nic(estate: Estate) -> None:
    """A VM's NIC: etag, one primary configuration with an address in the subnet."""
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    nic = estate.cloud.network.get_network_interface(estate.nic_id("vm-0-nic"))
    assert nic.etag
    assert len(nic.ip_configurations) == 1
    assert nic.primary_ip is not None
    assert ipaddress.ip_address(nic.primary_ip) in ipaddress.ip_network(CIDR)
    assert nic.ip_configurations[0].subnet_id is not None
    assert nic.ip_configurations[0].subnet_id.lower() == estate.subnet_id.lower()


def test_add_and_remove_secondary_ip_configurations(estate: Estate) -> None:
    """Added configurations get distinct addresses from the subnet; removal frees them; the etag
    changes with every write."""
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    nic_id = estate.nic_id("vm-0-nic")
    before = estate.cloud.network.get_network_interface(nic_id)

    added = estate.cloud.network.add_secondary_ip_configurations(nic_id, ["pod-1", "pod-2", "pod-3"])

    secondaries = added.secondary_ip_configurations
    assert [configuration.name for configuration in secondaries] == ["pod-1", "pod-2", "pod-3"]
    addresses = {configuration.address for configuration in added.ip_configurations}
    assert len(addresses) == 4
    assert all(
        address and ipaddress.ip_address(address) in ipaddress.ip_network(CIDR) for address in addresses
    )
    assert added.etag != before.etag
    assert all(configuration.provisioning_state == "Succeeded" for configuration in secondaries)

    removed = estate.cloud.network.remove_secondary_ip_configurations(nic_id, ["pod-2"])
    assert [configuration.name for configuration in removed.secondary_ip_configurations] == ["pod-1", "pod-3"]
    assert estate.cloud.network.get_network_interface(nic_id) == removed


def test_existing_names_make_no_request(estate: Estate) -> None:
    """Adding names already present is a read only."""
    estate.emulator.estate.add_virtual_machine(
        GROUP, "vm-0", subnet_id=estate.subnet_id, secondary_ip_configurations=1
    )
    nic = estate.cloud.network.add_secondary_ip_configurations(estate.nic_id("vm-0-nic"), ["ipconfig2"])
    assert len(nic.ip_configurations) == 2
    assert estate.emulator.requests.count("NetworkInterfaces.create_or_update") == 0


def test_primary_configuration_cannot_be_removed(estate: Estate) -> None:
    """Removing the primary configuration is refused before any write."""
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    with pytest.raises(CloudError, match="primary"):
        estate.cloud.network.remove_secondary_ip_configurations(estate.nic_id("vm-0-nic"), ["ipconfig1"])
    assert estate.emulator.requests.count("NetworkInterfaces.create_or_update") == 0


def _concurrent_writer(estate: Estate, nic_id: str) -> None:
    """Another process's writer: its own client, so our per-NIC lock does not serialise it."""
    other = cloud_for(estate.emulator)
    try:
        other.network.add_secondary_ip_configurations(nic_id, ["other-writer"])
    finally:
        other.close()


@pytest.mark.parametrize(
    ("conflict_retries", "lands"),
    [pytest.param(0, False, id="no-retry-raises"), pytest.param(2, True, id="retry-from-fresh-read")],
)
def test_etag_conflict(estate: Estate, conflict_retries: int, lands: bool) -> None:
    """Another writer changes the NIC between our GET and PUT: If-Match fails with 412; with
    retries we re-read and both changes survive, without we raise PreconditionFailedError."""
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    nic_id = estate.nic_id("vm-0-nic")
    service = NetworkService(estate.cloud.clients.network, conflict_retries=conflict_retries)
    # Hold our first PUT for a moment; the other writer's read and write land meanwhile.
    estate.emulator.faults.add_latency(1.0, "NetworkInterfaces.create_or_update", times=1)

    def write_meanwhile() -> None:
        time.sleep(0.4)
        _concurrent_writer(estate, nic_id)

    writer = threading.Thread(target=write_meanwhile)
    writer.start()
    try:
        if lands:
            nic = service.add_secondary_ip_configurations(nic_id, ["ours"])
        else:
            with pytest.raises(PreconditionFailedError):
                service.add_secondary_ip_configurations(nic_id, ["ours"])
    finally:
        writer.join(timeout=30)
    statuses = [
        entry.status for entry in estate.emulator.requests.entries("NetworkInterfaces.create_or_update")
    ]
    assert 412 in statuses
    names = {c.name for c in estate.cloud.network.get_network_interface(nic_id).ip_configurations}
    assert "other-writer" in names
    assert ("ours" in names) is lands
    if lands:
        assert {"ours", "other-writer"} <= {c.name for c in nic.ip_configurations}


def test_one_writer_per_nic_in_process(estate: Estate) -> None:
    """Eight threads add to the same NIC through one service: the lock serialises them, no 412."""
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    nic_id = estate.nic_id("vm-0-nic")
    service = NetworkService(estate.cloud.clients.network, conflict_retries=0)
    errors: list[BaseException] = []

    def add(index: int) -> None:
        try:
            service.add_secondary_ip_configurations(nic_id, [f"pod-{index}"])
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=add, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len(estate.cloud.network.get_network_interface(nic_id).ip_configurations) == 9
    assert 412 not in {entry.status for entry in estate.emulator.requests.entries()}


def test_256_limit_checked_before_writing(estate: Estate) -> None:
    """A NIC with 256 configurations: one more is refused locally, with no PUT sent."""
    estate.emulator.estate.add_virtual_machine(
        GROUP, "vm-0", subnet_id=estate.subnet_id, secondary_ip_configurations=255
    )
    with pytest.raises(LimitExceededError):
        estate.cloud.network.add_secondary_ip_configurations(estate.nic_id("vm-0-nic"), ["one-too-many"])
    assert estate.emulator.requests.count("NetworkInterfaces.create_or_update") == 0


def test_256_limit_from_arm_is_translated(estate: Estate) -> None:
    """With our local check loosened, ARM's NetworkInterfaceIpConfigurationCountExceedsLimit
    surfaces as LimitExceededError and nothing changes."""
    estate.emulator.estate.add_virtual_machine(
        GROUP, "vm-0", subnet_id=estate.subnet_id, secondary_ip_configurations=250
    )
    service = NetworkService(estate.cloud.clients.network, max_ip_configurations_per_nic=1000)
    with pytest.raises(LimitExceededError) as caught:
        service.add_secondary_ip_configurations(estate.nic_id("vm-0-nic"), [f"extra-{n}" for n in range(10)])
    assert caught.value.code == "NetworkInterfaceIpConfigurationCountExceedsLimit"
    assert len(estate.cloud.network.get_network_interface(estate.nic_id("vm-0-nic")).ip_configurations) == 251


def test_full_subnet(estate: Estate) -> None:
    """A /29 has 3 usable addresses: the VM takes one, two more fit, the next add is SubnetFullError."""
    tiny = estate.virtual_network_id + "/subnets/tiny"
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=tiny)
    nic_id = estate.nic_id("vm-0-nic")
    estate.cloud.network.add_secondary_ip_configurations(nic_id, ["a", "b"])
    with pytest.raises(SubnetFullError):
        estate.cloud.network.add_secondary_ip_configurations(nic_id, ["c"])
    subnet = estate.cloud.network.get_subnet(tiny)
    assert (subnet.used, subnet.limit, subnet.available) == (3, 3, 0)


def test_subnet_cidr_and_usage(estate: Estate) -> None:
    """CIDR from the subnet, used/limit from the virtual network usage API (limit excludes 5)."""
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    subnet = estate.cloud.network.get_subnet(estate.subnet_id)
    assert subnet.cidr == CIDR
    assert subnet.limit == 65536 - 5
    assert subnet.used == 1
    estate.cloud.network.add_secondary_ip_configurations(estate.nic_id("vm-0-nic"), ["a", "b"])
    assert estate.cloud.network.get_subnet(estate.subnet_id).used == 3
    assert estate.emulator.requests.count("VirtualNetworks.list_usage") == 2
    # The subnet's document (every IP configuration in it) is read once, for its prefix.
    assert estate.emulator.requests.count("Subnets.get") == 1
    assert estate.cloud.network.get_subnet(estate.subnet_id).cidr == CIDR


def test_subnet_usage_read_by_one_pass_at_a_time(estate: Estate) -> None:
    """Eight passes asking for a subnet's usage at once, before any read: one read is sent, and
    each pass gets its answer; once due again, one more read."""
    estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    estate.emulator.faults.add_latency(0.3, "VirtualNetworks.list_usage")  # in flight while others ask
    book = SubnetBook(
        client=None,  # type: ignore[arg-type]  # usage() publishes nothing
        network=estate.cloud.network,
        namespace="kube-system",
        check_interval_seconds=30.0,
        batch_size=16,
        wall_clock=lambda: "",
    )
    answers: list[int | None] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        info = book.usage(estate.subnet_id, now=100.0)
        answers.append(info.used if info else None)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == [1] * 8
    assert estate.emulator.requests.count("VirtualNetworks.list_usage") == 1
    assert book.usage(estate.subnet_id, now=110.0) is not None  # within the check interval
    assert estate.emulator.requests.count("VirtualNetworks.list_usage") == 1
    book.usage(estate.subnet_id, now=131.0)
    assert estate.emulator.requests.count("VirtualNetworks.list_usage") == 2


def test_scale_set_instance_path(estate: Estate) -> None:
    """A uniform instance's NIC is changed through the scale set VM PUT (never a NIC write), with
    the image reference cleared so a gallery image under a denied scope does not fail it, and the
    addresses are read back from the scale-set NIC view."""
    gallery_image = (
        f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Compute/galleries/g"
        "/images/node/versions/1.0.0"
    )
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=2, image={"id": gallery_image}
    )
    estate.emulator.state.deny_linked_access(gallery_image)
    instance = parse_scale_set_id(scale_set_id).instance("1")
    nic_id = f"{instance}/networkInterfaces/vmss-a-nic"

    nic = estate.cloud.network.add_secondary_ip_configurations(nic_id, ["pod-1", "pod-2"])

    assert [c.name for c in nic.secondary_ip_configurations] == ["pod-1", "pod-2"]
    assert all(
        c.address and ipaddress.ip_address(c.address) in ipaddress.ip_network(CIDR)
        for c in nic.ip_configurations
    )
    assert estate.emulator.requests.count("VirtualMachineScaleSetVMs.update") == 1
    assert estate.emulator.requests.count("NetworkInterfaces.scale_set_write") == 0
    assert estate.emulator.requests.count("NetworkInterfaces.create_or_update") == 0
    other = estate.cloud.network.get_network_interface(
        f"{parse_scale_set_id(scale_set_id).instance('0')}/networkInterfaces/vmss-a-nic"
    )
    assert len(other.ip_configurations) == 1

    after = estate.cloud.network.remove_secondary_ip_configurations(nic_id, ["pod-1"])
    assert [c.name for c in after.secondary_ip_configurations] == ["pod-2"]


def test_scale_set_instance_256_limit(estate: Estate) -> None:
    """The 256 limit also holds on the scale-set instance path, checked before the PUT."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1, secondary_ip_configurations=255
    )
    nic_id = f"{parse_scale_set_id(scale_set_id).instance('0')}/networkInterfaces/vmss-a-nic"
    with pytest.raises(LimitExceededError):
        estate.cloud.network.add_secondary_ip_configurations(nic_id, ["one-too-many"])
    assert estate.emulator.requests.count("VirtualMachineScaleSetVMs.update") == 0


def test_list_scale_set_nics_in_pages(estate: Estate) -> None:
    """One list call returns every instance's NIC, following nextLink over several pages: each
    NIC as a GET of it shows it (etag, configurations), under the scale set's instance IDs."""
    estate.emulator.state.list_page_size = 4
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=10, secondary_ip_configurations=2
    )

    listing = estate.cloud.network.list_scale_set_network_interfaces(GROUP, "vmss-a")

    assert listing.pages == 3
    assert (
        estate.emulator.requests.count("NetworkInterfaces.list_virtual_machine_scale_set_network_interfaces")
        == 3
    )
    scale_set = parse_scale_set_id(scale_set_id)
    expected = [f"{scale_set.instance(str(i))}/networkInterfaces/vmss-a-nic".lower() for i in range(10)]
    assert sorted(nic.id.lower() for nic in listing.nics) == sorted(expected)
    for nic in listing.nics:
        assert nic == estate.cloud.network.get_network_interface(nic.id)
        assert len(nic.secondary_ip_configurations) == 2
        assert nic.primary is True  # each instance's only NIC is its primary one


def test_unchanged_list_pages_are_not_decoded_again(estate: Estate) -> None:
    """A scale set listed again page for page: pages whose bytes did not change give the same NICs
    without being decoded; a NIC written in between shows on its page, the only one decoded; a
    page not read for an hour is forgotten and decoded again."""
    now = [0.0]
    memo = estate.cloud.network.nic_pages = NicPageMemo(clock=lambda: now[0])
    estate.emulator.state.list_page_size = 4
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=10, secondary_ip_configurations=2
    )
    network = estate.cloud.network

    first = network.list_scale_set_network_interfaces(GROUP, "vmss-a")
    assert (first.pages, memo.decoded) == (3, 3)
    again = network.list_scale_set_network_interfaces(GROUP, "vmss-a")
    assert (again.pages, memo.decoded, again.nics) == (3, 3, first.nics)

    nic_id = f"{parse_scale_set_id(scale_set_id).instance('9')}/networkInterfaces/vmss-a-nic"
    written = network.add_secondary_ip_configurations(nic_id, ["pod-new"])
    changed = network.list_scale_set_network_interfaces(GROUP, "vmss-a")
    assert memo.decoded == 4  # one page held the written NIC
    assert [nic for nic in changed.nics if nic.id.lower() == nic_id.lower()] == [written]
    assert [nic for nic in changed.nics if nic.id.lower() != nic_id.lower()] == [
        nic for nic in first.nics if nic.id.lower() != nic_id.lower()
    ]

    estate.emulator.estate.add_scale_set(GROUP, "vmss-b", subnet_id=estate.subnet_id, capacity=2)
    now[0] += 3601.0
    network.list_scale_set_network_interfaces(GROUP, "vmss-b")  # then forgets vmss-a's idle pages
    network.list_scale_set_network_interfaces(GROUP, "vmss-a")
    assert memo.decoded == 4 + 1 + 3
    lists = "NetworkInterfaces.list_virtual_machine_scale_set_network_interfaces"
    assert estate.emulator.requests.count(lists) == 4 * 3 + 1


def test_list_resource_group_nics_in_pages(estate: Estate) -> None:
    """A resource group's standalone NICs (VMs, Flexible members), all pages, as a GET shows each."""
    estate.emulator.state.list_page_size = 2
    for index in range(5):
        estate.emulator.estate.add_virtual_machine(GROUP, f"vm-{index}", subnet_id=estate.subnet_id)

    listing = estate.cloud.network.list_network_interfaces(GROUP)

    assert listing.pages == 3
    assert sorted(nic.id.lower() for nic in listing.nics) == sorted(
        estate.nic_id(f"vm-{index}-nic").lower() for index in range(5)
    )
    for nic in listing.nics:
        assert nic == estate.cloud.network.get_network_interface(nic.id)


def test_list_of_a_missing_scale_set_is_not_found(estate: Estate) -> None:
    """A scale set that is gone: NotFoundError, no empty listing."""
    with pytest.raises(NotFoundError):
        estate.cloud.network.list_scale_set_network_interfaces(GROUP, "vmss-gone")


def test_a_refused_list_page_is_the_error_arm_sent(estate: Estate) -> None:
    """Pages are read as streams (decoded once, by us): a page ARM refuses still becomes the
    error its body names, a 429 a ``ThrottledError`` and a 500 a ``CloudError`` with ARM's
    message, never an unread-body error."""
    for name in ("vmss-a", "vmss-b"):  # one each: a failed call backs its target off
        estate.emulator.estate.add_scale_set(GROUP, name, subnet_id=estate.subnet_id, capacity=2)
    operation = "NetworkInterfaces.list_virtual_machine_scale_set_network_interfaces"
    estate.emulator.faults.server_error(operation, times=1)
    with pytest.raises(CloudError, match="An injected server error occurred"):
        estate.cloud.network.list_scale_set_network_interfaces(GROUP, "vmss-a")
    estate.emulator.faults.throttle(operation, retry_after=0.5, times=1)
    with pytest.raises(ThrottledError, match="throttled"):
        estate.cloud.network.list_scale_set_network_interfaces(GROUP, "vmss-b")
