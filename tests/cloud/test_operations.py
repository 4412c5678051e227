"""The operation tracker (``cloud/operations.py``) and the ``begin_`` NIC writes, through the real
SDK clients against the ARM emulator: a begun write returns while its operation runs, one tracker
follows many at once, polls come no sooner than ARM's ``Retry-After``, a failed operation reaches
the callback as a classified ``CloudError``, a poll that fails is tried again."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.errors import SubnetFullError
from nodewright.cloud.factory import Cloud
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import parse_scale_set_id
from tests.cloud.helpers import cloud_for

GROUP = "rg-operations"
NIC_PUT = "NetworkInterfaces.create_or_update"
INSTANCE_PUT = "VirtualMachineScaleSetVMs.update"
STATUS = "Operations.status"


@dataclass
class Estate:
    emulator: ArmEmulator
    cloud: Cloud
    subnet_id: str

    def machine_nic(self, name: str) -> str:
        """A standalone VM ``name`` and the ARM ID of its NIC."""
        self.emulator.estate.add_virtual_machine(GROUP, name, subnet_id=self.subnet_id)
        return (
            f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}"
            f"/providers/Microsoft.Network/networkInterfaces/{name}-nic"
        )


@dataclass
class Outcomes:
    """Collects ``on_done`` calls; ``wait`` blocks until ``count`` arrived."""

    received: list[OperationOutcome] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, outcome: OperationOutcome) -> None:
        with self.arrived:
            self.received.append(outcome)
            self.arrived.notify_all()

    def wait(self, count: int, timeout: float = 30.0) -> list[OperationOutcome]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.received) >= count, timeout), self.received
            return list(self.received)


@pytest.fixture
def estate(arm_emulator: ArmEmulator) -> Iterator[Estate]:
    # ARM's in-progress Retry-After (10 s by default in the emulator) would make each slow
    # operation here take 10 s; 1 s keeps the header on every answer, so the tracker still
    # follows it, and the tests about its pacing set their own value.
    arm_emulator.state.operation_retry_after = 1
    arm_emulator.estate.add_resource_group(GROUP)
    vnet = arm_emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.240.0.0/16"})
    cloud = cloud_for(arm_emulator)
    yield Estate(arm_emulator, cloud, vnet + "/subnets/nodes")
    cloud.close()


def test_a_begun_write_returns_while_its_operation_runs(estate: Estate) -> None:
    """The PUT is accepted and the call returns with the operation still InProgress in ARM; the
    tracker sees it end and calls back once; the NIC then holds the names, Succeeded."""
    nic_id = estate.machine_nic("vm-0")
    estate.emulator.faults.slow_operations(2.0, NIC_PUT)
    outcomes = Outcomes()

    started = estate.cloud.network.begin_add_secondary_ip_configurations(nic_id, ["a", "b"], on_done=outcomes)

    assert started
    with estate.emulator.state.locked():
        assert len(estate.emulator.state.operations.in_progress()) == 1
    assert outcomes.received == []
    [outcome] = outcomes.wait(1)
    assert outcome.succeeded
    assert outcome.finished - outcome.started >= 1.5
    nic = estate.cloud.network.get_network_interface(nic_id)
    assert [c.name for c in nic.secondary_ip_configurations] == ["a", "b"]
    assert estate.emulator.requests.count(NIC_PUT) == 1


def test_nothing_to_change_starts_nothing(estate: Estate) -> None:
    nic_id = estate.machine_nic("vm-0")
    estate.cloud.network.add_secondary_ip_configurations(nic_id, ["a"])
    outcomes = Outcomes()
    assert not estate.cloud.network.begin_add_secondary_ip_configurations(nic_id, ["a"], on_done=outcomes)
    assert estate.emulator.requests.count(NIC_PUT) == 1
    assert estate.cloud.operations.pending() == 0


def test_one_tracker_follows_many_operations_at_once(estate: Estate) -> None:
    """Ten writes on ten NICs, each operation 3 s: all ten are in flight together (the callers
    were never held), so they end within one operation time of each other, not one after another."""
    nics = [estate.machine_nic(f"vm-{index}") for index in range(10)]
    estate.emulator.faults.slow_operations(3.0, NIC_PUT)
    outcomes = Outcomes()
    for nic_id in nics:
        assert estate.cloud.network.begin_add_secondary_ip_configurations(nic_id, ["pod"], on_done=outcomes)
    with estate.emulator.state.locked():
        in_flight = len(estate.emulator.state.operations.in_progress())
    assert in_flight == 10
    done = outcomes.wait(10)
    assert all(outcome.succeeded for outcome in done)
    assert {outcome.target.lower() for outcome in done} == {nic_id.lower() for nic_id in nics}


def test_polls_come_no_sooner_than_retry_after(estate: Estate) -> None:
    """ARM answers ``Retry-After: 2`` while the operation runs (4 s): the first poll comes 2 s
    after the PUT at the earliest, and each next one 2 s after the one before, although the
    tracker's own interval (0) would poll at once."""
    nic_id = estate.machine_nic("vm-0")
    estate.emulator.state.operation_retry_after = 2
    estate.emulator.faults.slow_operations(4.0, NIC_PUT)
    outcomes = Outcomes()

    estate.cloud.network.begin_add_secondary_ip_configurations(nic_id, ["a"], on_done=outcomes)
    [outcome] = outcomes.wait(1)

    assert outcome.succeeded
    [put] = estate.emulator.requests.entries(NIC_PUT)
    polls = [entry.monotonic for entry in estate.emulator.requests.entries(STATUS)]
    assert 2 <= len(polls) <= 3, polls
    gaps = [later - earlier for earlier, later in itertools.pairwise([put.monotonic, *polls])]
    assert min(gaps) >= 1.95, gaps


def test_the_emulator_sends_retry_after_on_operations_in_progress(estate: Estate) -> None:
    """azure-core's own poller (a write waited for) polls at ARM's ``Retry-After`` too, once
    the emulator sends it on each InProgress status answer (azure-core polls once at once after
    the write's answer, whatever that says)."""
    nic_id = estate.machine_nic("vm-0")
    estate.emulator.state.operation_retry_after = 1
    estate.emulator.faults.slow_operations(2.5, NIC_PUT)

    estate.cloud.network.add_secondary_ip_configurations(nic_id, ["a"])

    [put] = estate.emulator.requests.entries(NIC_PUT)
    polls = [entry.monotonic for entry in estate.emulator.requests.entries(STATUS)]
    gaps = [later - earlier for earlier, later in itertools.pairwise(polls)]
    assert put.monotonic < polls[0]
    assert 2 <= len(polls) <= 4, polls
    assert min(gaps) >= 0.95, gaps


def test_a_failed_operation_reaches_the_callback_classified(estate: Estate) -> None:
    """An operation that ends Failed with ``SubnetIsFull`` calls back with a ``SubnetFullError``
    naming the NIC; the emulator rolled the NIC back."""
    nic_id = estate.machine_nic("vm-0")
    estate.emulator.faults.fail_operation(NIC_PUT, code="SubnetIsFull", message="Subnet nodes is full.")
    outcomes = Outcomes()

    estate.cloud.network.begin_add_secondary_ip_configurations(nic_id, ["a"], on_done=outcomes)
    [outcome] = outcomes.wait(1)

    assert isinstance(outcome.error, SubnetFullError)
    assert outcome.error.code == "SubnetIsFull"
    assert outcome.target.lower() == nic_id.lower()
    assert estate.cloud.network.get_network_interface(nic_id).secondary_ip_configurations == ()


def test_a_failed_poll_is_tried_again(estate: Estate) -> None:
    """Two status polls answered 503: the tracker polls again (after a backoff) and the
    operation still ends Succeeded."""
    nic_id = estate.machine_nic("vm-0")
    estate.emulator.faults.slow_operations(0.5, NIC_PUT)
    estate.emulator.faults.server_error(STATUS, status=503, times=2)
    outcomes = Outcomes()

    estate.cloud.network.begin_add_secondary_ip_configurations(nic_id, ["a"], on_done=outcomes)
    [outcome] = outcomes.wait(1)

    assert outcome.succeeded
    statuses = [entry.status for entry in estate.emulator.requests.entries(STATUS)]
    assert statuses[:2] == [503, 503]
    assert statuses[-1] == 200


def test_scale_set_instance_write_is_followed_too(estate: Estate) -> None:
    """A uniform instance's IP configurations change through the instance PUT; begun, it
    returns before its operation ends, and the NIC view holds the names once it has."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1
    )
    nic_id = f"{parse_scale_set_id(scale_set_id).instance('0')}/networkInterfaces/vmss-a-nic"
    estate.emulator.faults.slow_operations(1.5, INSTANCE_PUT)
    outcomes = Outcomes()
    before = time.monotonic()

    assert estate.cloud.network.begin_add_secondary_ip_configurations(nic_id, ["a", "b"], on_done=outcomes)

    assert outcomes.received == []
    [outcome] = outcomes.wait(1)
    assert outcome.succeeded
    assert outcome.finished - before >= 1.2
    nic = estate.cloud.network.get_network_interface(nic_id)
    assert [c.name for c in nic.secondary_ip_configurations] == ["a", "b"]
    assert estate.emulator.requests.count(INSTANCE_PUT) == 1
