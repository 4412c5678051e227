"""Cold start reads a scale set at a time (issue 32): a node's primary NIC ID and its NIC snapshot
come from one list of its Uniform scale set's NICs, not two GETs per node; a machine the listing
does not show, and a failed list, fall back to the GETs. Real API server, real SDK to the ARM
emulator, whose request log is what is counted."""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter

import pytest
from azure.mgmt.compute import models as compute_models

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.factory import Cloud
from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_network_config import reconciler as reconciler_module
from nodewright.controllers.node_network_config.scope_listings import MachineNicLocator, ScaleSetListings
from tests.cloud.emulator.sdk_clients import sdk_clients
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.harness import RESOURCE_GROUP, IpamHarness, event_reasons
from tests.waiting import wait_for

INSTANCE_GET = "VirtualMachineScaleSetVMs.get"
INSTANCE_PUT = "VirtualMachineScaleSetVMs.update"
INSTANCE_LIST = "VirtualMachineScaleSetVMs.list"
NIC_GET = "NetworkInterfaces.get_virtual_machine_scale_set_network_interface"
SCALE_SET_LIST = "NetworkInterfaces.list_virtual_machine_scale_set_network_interfaces"


def _instance_of(path: str) -> str:
    match = re.search(r"/virtualMachines/([^/?]+)", path, flags=re.IGNORECASE)
    return match.group(1) if match else ""


def _cold_reads_per_instance(emulator: ArmEmulator) -> Counter[str]:
    """Per instance, the model and NIC GETs sent before its first write, less the write's own
    read of the model (the PUT needs it; a GET, or the scale set's listing during a burst): the
    reads a node's first pass cost on its own."""
    first_put: dict[str, float] = {}
    for entry in emulator.requests.entries(INSTANCE_PUT):
        first_put.setdefault(_instance_of(entry.path), entry.monotonic)
    reads: Counter[str] = Counter()
    model_gets: Counter[str] = Counter()
    for operation, counter in ((INSTANCE_GET, model_gets), (NIC_GET, reads)):
        for entry in emulator.requests.entries(operation):
            instance = _instance_of(entry.path)
            if entry.monotonic < first_put.get(instance, float("inf")):
                counter[instance] += 1
    for instance, gets in model_gets.items():
        reads[instance] += max(0, gets - 1)  # beyond the write's own
    return reads


def _wait_until_every_pool_updated(ipam: IpamHarness, nodes: int) -> None:
    """Until each of the ``nodes`` NodeNetworkConfigs has assignments and status Updated."""

    def settled() -> bool:
        configs = ipam.configs()
        return len(configs) == nodes and all(
            ipam.assignments(config) and config.status.status == "Updated" for config in configs
        )

    wait_for(settled, timeout=90, interval=0.5)


def _listed_scale_set(
    arm_emulator: ArmEmulator, name: str, *, capacity: int
) -> tuple[str, Cloud, list[float], ScaleSetListings]:
    """A Uniform scale set of ``capacity`` instances, our services, a settable clock at 100 s and
    listings of 10 s on it."""
    arm_emulator.estate.add_resource_group(RESOURCE_GROUP)
    vnet = arm_emulator.estate.add_virtual_network(RESOURCE_GROUP, "vnet", subnets={"pods": "10.240.0.0/22"})
    scale_set = arm_emulator.estate.add_scale_set(
        RESOURCE_GROUP, name, subnet_id=vnet + "/subnets/pods", capacity=capacity
    )
    cloud = cloud_for(arm_emulator)
    clock = [100.0]
    listings = ScaleSetListings(cloud.network, max_age=10.0, backoff=(2.0, 60.0), clock=lambda: clock[0])
    return scale_set, cloud, clock, listings


def test_cold_start_lists_the_scale_set_instead_of_two_gets_per_node(ipam: IpamHarness) -> None:
    """12 cold nodes in one Uniform scale set: their NIC IDs and first NIC snapshots come from
    about one list, not a model GET and a NIC GET per node (24 reads before), and so do the
    instance models their writes edit; every pool fills."""
    nodes = 12
    ipam.add_scale_set(capacity=nodes)
    ipam.start()

    _wait_until_every_pool_updated(ipam, nodes)
    emulator = ipam.emulator
    writes = {_instance_of(entry.path) for entry in emulator.requests.entries(INSTANCE_PUT)}
    assert len(writes) == nodes, "every node's pool was written"
    cold = _cold_reads_per_instance(emulator)
    lists = emulator.requests.count(SCALE_SET_LIST)
    assert lists >= 1
    assert sum(cold.values()) + lists <= 3, (dict(cold), lists)
    # The models the 12 writes rest on: the first write's GET and about one list of the scale
    # set's instances, not a GET per write (12 before).
    model_reads = emulator.requests.count(INSTANCE_GET) + emulator.requests.count(INSTANCE_LIST)
    assert model_reads <= 4, model_reads


def test_machine_missing_from_listing_is_read_with_gets(arm_emulator: ArmEmulator) -> None:
    """An instance added after the scale set was listed: its NIC ID and NIC come from GETs (the
    young listing is not listed again for it); the listed instance costs no GET at all."""
    scale_set, cloud, _clock, listings = _listed_scale_set(arm_emulator, "vmss-late", capacity=1)
    locator = MachineNicLocator(cloud.compute, listings)
    listed = parse_provider_id(f"azure://{scale_set}/virtualMachines/0")
    nic_id = locator.primary_network_interface(listed)
    assert nic_id.lower() == f"{scale_set}/virtualMachines/0/networkInterfaces/vmss-late-nic".lower()
    shown = listings.nic(nic_id)
    assert shown is not None
    assert shown[0] == cloud.network.get_network_interface(nic_id)
    assert arm_emulator.requests.count(INSTANCE_GET) == 0

    clients = sdk_clients(arm_emulator)
    clients.compute.virtual_machine_scale_sets.begin_update(
        RESOURCE_GROUP,
        "vmss-late",
        compute_models.VirtualMachineScaleSetUpdate(sku=compute_models.Sku(capacity=2)),
    ).result()
    late = parse_provider_id(f"azure://{scale_set}/virtualMachines/1")
    late_nic = locator.primary_network_interface(late)
    assert late_nic == cloud.compute.get_primary_network_interface(late)
    assert listings.nic(late_nic) is None  # not in the listing: the pass GETs it
    assert arm_emulator.requests.count(SCALE_SET_LIST) == 1
    assert arm_emulator.requests.count(INSTANCE_GET) == 2  # the locator's fallback, and ours
    cloud.close()


def test_concurrent_askers_share_one_list_and_a_failed_list_falls_back(
    arm_emulator: ArmEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """Eight threads asking at once cost one list; after the listing aged out, failing lists
    answer None (the callers GET), back off (not one list per asker) and log once."""
    arm_emulator.estate.add_resource_group(RESOURCE_GROUP)
    vnet = arm_emulator.estate.add_virtual_network(RESOURCE_GROUP, "vnet", subnets={"pods": "10.240.0.0/22"})
    arm_emulator.estate.add_scale_set(RESOURCE_GROUP, "vmss-b", subnet_id=vnet + "/subnets/pods", capacity=4)
    cloud = cloud_for(arm_emulator, backoff_initial_seconds=0.0)
    clock = [0.0]
    listings = ScaleSetListings(cloud.network, max_age=10.0, backoff=(2.0, 60.0), clock=lambda: clock[0])
    answers: list[int] = []

    def ask() -> None:
        listing = listings.current(RESOURCE_GROUP, "vmss-b")
        answers.append(len(listing.nics) if listing is not None else 0)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [4] * 8
    assert arm_emulator.requests.count(SCALE_SET_LIST) == 1

    arm_emulator.faults.server_error(SCALE_SET_LIST, times=1000)
    caplog.set_level(logging.INFO, logger="nodewright.controllers.node_network_config.scope_listings")
    clock[0] = 11.0
    assert [listings.current(RESOURCE_GROUP, "vmss-b") for _ in range(5)] == [None] * 5
    assert arm_emulator.requests.count(SCALE_SET_LIST) == 2  # one failed list, then backed off
    clock[0] = 14.0  # past the first backoff (2 s)
    assert listings.current(RESOURCE_GROUP, "vmss-b") is None
    assert arm_emulator.requests.count(SCALE_SET_LIST) == 3
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1
    arm_emulator.faults.clear()
    clock[0] = 100.0
    listing = listings.current(RESOURCE_GROUP, "vmss-b")
    assert listing is not None
    assert len(listing.primaries) == 4
    cloud.close()


def test_writes_kept_back_by_our_budget_are_not_failures(ipam: IpamHarness) -> None:
    """A mutation budget of one write a second and burst 1 against 8 cold nodes: most first
    writes are kept back by our own budget (never sent). Each is retried when the budget says,
    without backing the NIC off, re-reading it, marking its container Failed or saying a write
    failed; every pool fills, and a kept-back write costs no read at all."""
    nodes = 8
    ipam.cloud = cloud_for(ipam.emulator, observer=ipam.calls, mutation_qps=1.0, mutation_burst=1)
    ipam.add_scale_set(capacity=nodes)
    ipam.start(workers=nodes)

    _wait_until_every_pool_updated(ipam, nodes)
    emulator = ipam.emulator
    assert {_instance_of(entry.path) for entry in emulator.requests.entries(INSTANCE_PUT)} == {
        str(i) for i in range(nodes)
    }
    reasons = [reason for config in ipam.configs() for reason in event_reasons(ipam, config.metadata["name"])]
    assert "CloudError" not in reasons, reasons
    # Model reads beyond the one each PUT needs (a GET, or the burst's one list): none. A
    # kept-back write is refused before the edit reads the model (its token is taken first), and
    # a pass whose write the budget would keep back does not re-read the NIC for it.
    model_reads = emulator.requests.count(INSTANCE_GET) + emulator.requests.count(INSTANCE_LIST)
    extra_model_reads = model_reads - emulator.requests.count(INSTANCE_PUT)
    nic_reads = emulator.requests.count(NIC_GET)
    assert nic_reads <= nodes, nic_reads  # the one read after each node's write ended
    assert extra_model_reads <= 0, extra_model_reads


def test_a_write_the_budget_would_keep_back_is_not_read_for(
    ipam: IpamHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same cold start, with a planned write's snapshot young for 0.5 s only (10 s in
    production; a kept-back write comes back after more than 1 s): before writing, a pass reads
    an older NIC again. It first asks the budget whether the write could go now; while it could
    not, the NIC is not read for it. So a node's NIC is read at most once before its first write
    (the read the write rests on), however often that write was kept back."""
    monkeypatch.setattr(reconciler_module, "LISTING_MAX_AGE_SECONDS", 0.5)
    nodes = 8
    ipam.cloud = cloud_for(ipam.emulator, observer=ipam.calls, mutation_qps=1.0, mutation_burst=1)
    ipam.add_scale_set(capacity=nodes)
    ipam.start(workers=nodes)

    _wait_until_every_pool_updated(ipam, nodes)
    kept_back = ipam.calls.count(kind="call", operation="compute.put_scale_set_instance", outcome="throttled")
    assert kept_back > 0, "no write was kept back: the test did not make the case"
    first_put: dict[str, float] = {}
    for entry in ipam.emulator.requests.entries(INSTANCE_PUT):
        first_put.setdefault(_instance_of(entry.path), entry.monotonic)
    before_write = Counter(
        _instance_of(entry.path)
        for entry in ipam.emulator.requests.entries(NIC_GET)
        if entry.monotonic < first_put.get(_instance_of(entry.path), float("inf"))
    )
    assert max(before_write.values(), default=0) <= 1, (before_write, kept_back)


def test_nics_read_again_in_a_burst_share_one_list(arm_emulator: ArmEmulator) -> None:
    """NICs read again before their writes (snapshots too old to write from): one alone is left to
    a GET (None here, no list); a second in the same scale set within the reuse age lists it once,
    and that listing serves the burst's next reads while young and newer than their snapshots."""
    scale_set, cloud, clock, listings = _listed_scale_set(arm_emulator, "vmss-burst", capacity=4)
    nics = [f"{scale_set}/virtualMachines/{i}/networkInterfaces/vmss-burst-nic" for i in range(4)]

    assert listings.newer_nic(nics[0], newer_than=90.0) is None  # alone: the caller GETs
    assert arm_emulator.requests.count(SCALE_SET_LIST) == 0
    clock[0] = 103.0
    second = listings.newer_nic(nics[1], newer_than=90.0)
    assert second is not None
    assert second[0] == cloud.network.get_network_interface(nics[1])
    assert second[1] == 103.0
    clock[0] = 108.0
    third = listings.newer_nic(nics[2], newer_than=95.0)
    assert third is not None
    assert third[1] == 103.0
    assert listings.newer_nic(nics[3], newer_than=104.0) is None  # its snapshot is newer
    assert arm_emulator.requests.count(SCALE_SET_LIST) == 1
    clock[0] = 114.0  # the listing aged out; the burst goes on: listed again
    fourth = listings.newer_nic(nics[3], newer_than=104.0)
    assert fourth is not None
    assert fourth[1] == 114.0
    assert arm_emulator.requests.count(SCALE_SET_LIST) == 2
    cloud.close()
