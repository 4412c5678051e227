"""The NIC watcher (issue 32): at rest, ARM reads per scale set and no pass per node; drift made
behind the manager's back still restored within a sweep; a failing list backs off and logs once.
Real API server and ARM emulator; the periods are scaled down for the test."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.request_log import RecordedRequest
from nodewright.controllers.node_network_config import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.nic_watch import NicWatch, list_pace
from nodewright.runtime.control.reconcile import Request
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.harness import RESOURCE_GROUP, IpamHarness
from tests.waiting import wait_for

SCALE = 0.01
"""Every period of the shipped defaults times this: 60 s becomes 0.6 s."""
NODE_READS = "NetworkInterfaces.get_virtual_machine_scale_set_network_interface"
SCALE_SET_LISTS = "NetworkInterfaces.list_virtual_machine_scale_set_network_interfaces"


def scaled_defaults() -> dict[str, Any]:
    """The shipped defaults' periods (whichever the settings have) scaled by ``SCALE``."""
    defaults = NodeNetworkConfigSettings()
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(defaults):
        value = getattr(defaults, field.name)
        if field.name in ("resync_period_seconds", "nic_refresh_seconds", "nic_list_period_seconds"):
            changes[field.name] = value * SCALE
        elif field.name == "nic_list_reads_per_second":
            changes[field.name] = value / SCALE
    return changes


def reconciles(harness: IpamHarness) -> float:
    """Every pass the manager's controller has run so far, whatever its result."""
    assert harness._manager is not None
    text = harness._manager.manager.metrics.render().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for series in family.samples:
            if (
                series.name == "controller_runtime_reconcile_total"
                and series.labels.get("controller") == "nodenetworkconfig"
            ):
                total += float(series.value)
    return total


def _settled(harness: IpamHarness, nodes: int) -> bool:
    configs = harness.configs()
    return len(configs) == nodes and all(
        harness.assignments(config) and config.status.status == "Updated" for config in configs
    )


def _scale_set_of(path: str) -> str:
    match = re.search(r"/virtualMachineScaleSets/([^/]+)/", path, flags=re.IGNORECASE)
    return match.group(1).lower() if match else ""


def _lists_fell_behind(read: RecordedRequest, lists: list[RecordedRequest], refresh: float) -> bool:
    """Whether a NIC GET is the refresh rule at work: the last list of its scale set answered
    before it is older than ``nicRefreshSeconds``, so the watcher's snapshot had aged out (at a
    hundredth of the shipped periods a scheduling delay of a second does that on a busy machine)."""
    earlier = [
        entry.answered or entry.monotonic
        for entry in lists
        if _scale_set_of(entry.path) == _scale_set_of(read.path) and entry.monotonic < read.monotonic
    ]
    return bool(earlier) and read.monotonic - max(earlier) > refresh


def test_at_rest_reads_are_per_scale_set_not_per_node(ipam: IpamHarness, arm_emulator: ArmEmulator) -> None:
    """24 nodes in 3 scale sets, nothing changing, the shipped defaults' periods scaled down: over
    one resync period (ten list periods), no NIC is read on its own, the lists are one per scale
    set per period, and the passes are the periodic ones (at most one per node), not one per node
    per list. (A shorter window could hold all or none of the periodic passes: pools filled
    together resync together.)"""
    ipam.configure(**scaled_defaults())
    for _ in range(3):
        ipam.add_scale_set(capacity=8)
    ipam.start()
    wait_for(lambda: _settled(ipam, 24), timeout=90, interval=0.5)
    time.sleep(2 * 0.6)  # the passes that filled the pools have written their status

    started, passes_before = time.monotonic(), reconciles(ipam)
    window = ipam.settings.resync_period_seconds
    time.sleep(window)  # the clock: reads per resync period are the figure
    passes = reconciles(ipam) - passes_before
    reads = arm_emulator.requests.entries(method="GET", since=started)

    node_reads = [entry for entry in reads if entry.operation == NODE_READS]
    lists = [entry for entry in reads if entry.operation == SCALE_SET_LISTS]
    refresh = ipam.settings.nic_refresh_seconds
    every_list = [
        entry for entry in arm_emulator.requests.entries(method="GET") if entry.operation == SCALE_SET_LISTS
    ]
    unexplained = [read for read in node_reads if not _lists_fell_behind(read, every_list, refresh)]
    assert unexplained == [], f"{len(unexplained)} NIC GETs at rest while the lists kept up"
    assert len(node_reads) <= 3, f"{len(node_reads)} NIC GETs at rest"
    assert len(lists) >= 3 * 2, "the watcher did not sweep in the window"
    sweeps = window / (0.6 * 0.9) + 1
    assert len(reads) <= 3 * sweeps + 3, {entry.operation for entry in reads}
    assert passes <= 24 * 1.25, f"{passes} passes for 24 nodes in {window} s"


def test_drift_restored_within_a_sweep(ipam: IpamHarness) -> None:
    """An IP configuration removed behind the manager's back (a reimage, another tool) is added
    back within about one list period, with passes otherwise ten minutes apart."""
    ipam.configure(resync_period_seconds=600.0)
    if hasattr(ipam.settings, "nic_list_period_seconds"):
        ipam.configure(nic_list_period_seconds=0.5)
    ipam.add_scale_set(capacity=2)
    ipam.start()
    wait_for(lambda: _settled(ipam, 2), timeout=60, interval=0.5)
    node = ipam.node_names()[0]
    before = ipam.secondary(node)
    victim = sorted(before)[0]

    ipam.cloud.network.remove_secondary_ip_configurations(ipam.nic_of(node), [victim])
    removed_at = time.monotonic()

    def restored() -> bool:
        names = {name for name, _ in ipam.assignments(ipam.config(node))}
        return len(ipam.secondary(node)) == len(before) and victim not in names

    wait_for(restored, timeout=10, interval=0.2)
    assert time.monotonic() - removed_at < 0.5 * 1.1 + 5.0


def test_failing_list_backs_off_and_logs_once(
    arm_emulator: ArmEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """Lists that fail: the scope is retried 2 s, 4 s, 8 s ... later (not at every poll), one
    warning for the whole run of failures, nothing enqueued; the first success says so once."""
    arm_emulator.estate.add_resource_group(RESOURCE_GROUP)
    vnet = arm_emulator.estate.add_virtual_network(RESOURCE_GROUP, "vnet", subnets={"pods": "10.240.0.0/22"})
    scale_set = arm_emulator.estate.add_scale_set(
        RESOURCE_GROUP, "vmss-a", subnet_id=vnet + "/subnets/pods", capacity=1
    )
    cloud = cloud_for(arm_emulator, backoff_initial_seconds=0.0)
    settings = NodeNetworkConfigSettings(nic_list_period_seconds=1.0, backoff_base_seconds=2.0)
    book = NicBook(backoff_base_seconds=2.0, backoff_cap_seconds=60.0, leak_grace_seconds=600)
    nic_id = f"{scale_set}/virtualMachines/0/networkInterfaces/vmss-a-nic"
    book.remember(nic_id, cloud.network.get_network_interface(nic_id), 0.0)
    book.track(nic_id, "node-0")
    clock = [1.0]
    watch = NicWatch(book, cloud.network, settings, clock=lambda: clock[0], jitter=lambda: 1.0)
    enqueued: list[Request] = []
    arm_emulator.faults.server_error(SCALE_SET_LISTS, times=1000)
    caplog.set_level(logging.INFO, logger="nodewright.controllers.node_network_config.nic_watch")

    for _ in range(30):  # 30 simulated seconds, a poll a second
        clock[0] += watch.poll(enqueued.append)

    attempts = arm_emulator.requests.count(SCALE_SET_LISTS)
    assert 4 <= attempts <= 6, attempts  # t = 1, 3, 7, 15, 31: not one a second
    assert enqueued == []
    failed = [r for r in caplog.records if r.getMessage().startswith("Listing NICs failed")]
    assert len(failed) == 1
    arm_emulator.faults.clear()
    for _ in range(40):
        clock[0] += watch.poll(enqueued.append)
    again = [r for r in caplog.records if r.getMessage().startswith("Listed NICs again")]
    assert len(again) == 1
    assert enqueued == []  # the NIC did not change: nothing to do
    cloud.close()


@pytest.mark.parametrize(
    ("pages", "scopes", "expected"),
    [
        pytest.param(1, 10, 6.0, id="ten-scale-sets-share-the-period"),
        pytest.param(100, 1, 100.0, id="many-pages-stretch-the-period-to-the-read-rate"),
        pytest.param(0, 4, 15.0, id="backed-off-scope-keeps-its-share"),
    ],
)
def test_list_pace(pages: int, scopes: int, expected: float) -> None:
    """Lists spread over the period, never faster than the read rate (1 page/s here)."""
    assert list_pace(pages, scopes, 60.0, 1.0, 1.0) == expected
