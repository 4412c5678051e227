"""No IPAM worker waits on a long-running operation (issue 32), on a real API server, ARM emulator
and node simulator: with one worker and slow operations, the writes of many nodes are in flight
together; a failed operation is reported and backed off while other nodes go on; a restart with
an operation in flight adds nothing twice. Overlap is counted from the emulator's request log
(each instance PUT starts an operation of a known duration), never from a wall-clock bound."""

from __future__ import annotations

import pytest

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.request_log import RecordedRequest
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.operations import (
    STALE_OPERATION_SECONDS,
    NicOperation,
    NicWrites,
)
from nodewright.ipam import PoolScaler
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.harness import IpamHarness, event_reasons
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
INSTANCE_PUT = "VirtualMachineScaleSetVMs.update"
OPERATION_SECONDS = 3.0


@pytest.fixture(autouse=True)
def short_retry_after(arm_emulator: ArmEmulator) -> None:
    """ARM's in-progress Retry-After is 1 s here instead of the emulator's 10 s: the overlap is
    counted from the PUTs' arrival and each operation lasts 3 to 4 s, so a 10 s pause before
    the tracker sees an end only slowed the tests, it was never what they check."""
    arm_emulator.state.operation_retry_after = 1


def _filled(ipam: IpamHarness, node: str, count: int = 16) -> bool:
    return len(ipam.assignments(ipam.config(node))) == count


def _most_in_flight(puts: list[RecordedRequest], seconds: float) -> int:
    """The most operations running at once, each lasting ``seconds`` from its PUT's arrival."""
    starts = sorted(put.monotonic for put in puts)
    return max(sum(1 for other in starts if other <= start < other + seconds) for start in starts)


def test_one_worker_keeps_many_operations_in_flight(ipam: IpamHarness) -> None:
    """Ten nodes, one worker, every instance PUT's operation takes 3 s: the ten first batches are
    written while earlier operations still run (most of them in flight together), where a worker
    waiting on each would have had one at a time."""
    ipam.configure(scaler=SCALER)
    ipam.emulator.faults.slow_operations(OPERATION_SECONDS, INSTANCE_PUT)
    ipam.add_scale_set(capacity=10)
    ipam.start(workers=1)
    nodes = eventually(lambda: len(names := ipam.node_names()) == 10 and names, message="ten nodes")
    eventually(lambda: all(_filled(ipam, node) for node in nodes), timeout=90, message="ten first batches")

    puts = ipam.emulator.requests.entries(INSTANCE_PUT)
    assert len(puts) == 10, "one write per node"
    assert _most_in_flight(puts, OPERATION_SECONDS) >= 5
    for node in nodes:
        assert len(ipam.secondary(node)) == 16


def test_a_failed_operation_is_reported_and_backed_off_while_others_go_on(ipam: IpamHarness) -> None:
    """Two nodes, one worker: the first write's operation fails after 3 s. The other node's write
    starts while it runs; the failed node gets the CloudError Event, waits out its backoff, and
    fills on a new write; no configuration from the failed write is left behind."""
    ipam.configure(scaler=SCALER, backoff_base_seconds=2.0)
    ipam.emulator.faults.slow_operations(OPERATION_SECONDS, INSTANCE_PUT)
    ipam.emulator.faults.fail_operation(INSTANCE_PUT, times=1)
    ipam.add_scale_set(capacity=2)
    ipam.start(workers=1)
    nodes = eventually(lambda: len(names := ipam.node_names()) == 2 and names, message="two nodes")
    eventually(lambda: all(_filled(ipam, node) for node in nodes), timeout=60, message="both first batches")

    first, second, *retries = ipam.emulator.requests.entries(INSTANCE_PUT)
    assert second.monotonic < first.monotonic + OPERATION_SECONDS, "the second write waited for the first"
    assert len(retries) == 1
    assert retries[0].monotonic >= first.monotonic + OPERATION_SECONDS + 1.5, "retried before its backoff"
    failed = [node for node in nodes if "CloudError" in event_reasons(ipam, node)]
    assert len(failed) == 1
    ipam.check_invariants()


def test_a_restart_with_an_operation_in_flight_adds_nothing_twice(ipam: IpamHarness) -> None:
    """The manager stops while its first write's operation runs (4 s) and a new one starts with
    nothing in memory: it reads the NIC, finds the lost write's names, adopts them and writes no
    second batch; the pool holds exactly one batch."""
    ipam.configure(scaler=SCALER)
    ipam.emulator.faults.slow_operations(4.0, INSTANCE_PUT)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = eventually(ipam.node_names, message="a node")[0]
    eventually(lambda: ipam.emulator.requests.count(INSTANCE_PUT) == 1, message="the first write")
    with ipam.emulator.state.locked():
        assert ipam.emulator.state.operations.in_progress(), "the operation ended before the restart"

    ipam.restart_manager()

    eventually(lambda: _filled(ipam, node), timeout=60, message="the pool after the restart")
    assert ipam.emulator.requests.count(INSTANCE_PUT) == 1
    assert len(ipam.secondary(node)) == 16
    ipam.check_invariants()


def test_a_write_whose_end_never_came_is_forgotten(arm_emulator: ArmEmulator) -> None:
    """A write recorded in flight holds its NIC, but not for ever: one older than twice the
    tracker's deadline (its tracker was closed, its end will not come) is forgotten, and the
    NIC may be written again (level-based: the pass reads it afresh)."""
    book = NicBook(backoff_base_seconds=2, backoff_cap_seconds=60, leak_grace_seconds=600)
    cloud = cloud_for(arm_emulator)
    try:
        writes = NicWrites(cloud.network, book, "ns", lambda _: None, lambda: "name", None)
        book.begin_operation("nic", NicOperation(owner="node", started_at=100.0, added=("a",)))
        assert writes.in_flight("nic", 100.0 + STALE_OPERATION_SECONDS - 1)
        assert not writes.in_flight("nic", 100.0 + STALE_OPERATION_SECONDS)
        assert book.operation("nic") is None
    finally:
        cloud.close()
