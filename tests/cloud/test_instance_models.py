"""A burst of NIC writes on a Uniform scale set's instances reads their models from one listing of
the scale set, not a GET per instance (issue 32), and no write is built on a model another writer
changed: real SDK clients against the ARM emulator, whose request log is what is counted."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from azure.mgmt.compute import models as compute_models

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.factory import Cloud
from nodewright.cloud.instance_models import InstanceModels
from nodewright.cloud.models import NicInfo
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import ScaleSetId, parse_scale_set_id
from tests.cloud.emulator.sdk_clients import sdk_clients
from tests.cloud.helpers import cloud_for

GROUP = "rg-models"
INSTANCE_GET = "VirtualMachineScaleSetVMs.get"
INSTANCE_LIST = "VirtualMachineScaleSetVMs.list"
INSTANCE_PUT = "VirtualMachineScaleSetVMs.update"
MAX_AGE = 60.0


@pytest.fixture
def estate(arm_emulator: ArmEmulator) -> Iterator[tuple[ArmEmulator, Cloud, ScaleSetId]]:
    arm_emulator.state.operation_retry_after = 1  # ARM's 10 s would make each write here 10 s
    arm_emulator.estate.add_resource_group(GROUP)
    vnet = arm_emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"pods": "10.240.0.0/16"})
    subnet = vnet + "/subnets/pods"
    scale_set = arm_emulator.estate.add_scale_set(GROUP, "vmss-m", subnet_id=subnet, capacity=12)
    cloud = cloud_for(arm_emulator)
    # Listings reused for a minute, not 10 s: the counts below must not hang on how fast a loaded
    # machine runs 12 writes (the age rule has its own test, on a clock of its own).
    cloud.compute.instance_models = InstanceModels(cloud.compute.list_instance_documents, max_age=MAX_AGE)
    yield arm_emulator, cloud, parse_scale_set_id(scale_set)
    cloud.close()


def _nic(scale_set: ScaleSetId, instance: int) -> str:
    return f"{scale_set.instance(str(instance))}/networkInterfaces/vmss-m-nic"


def _add(cloud: Cloud, nic: str, names: list[str]) -> NicInfo:
    """Add ``names`` as the reconciler does (the operation left to the tracker, whose end is
    waited for here), then read the NIC."""
    ended: list[OperationOutcome] = []
    done = threading.Event()

    def on_done(outcome: OperationOutcome) -> None:
        ended.append(outcome)
        done.set()

    assert cloud.network.begin_add_secondary_ip_configurations(nic, names, on_done=on_done)
    assert done.wait(30)
    assert ended[0].succeeded, ended
    return cloud.network.get_network_interface(nic)


def _statuses(emulator: ArmEmulator, operation: str) -> list[int]:
    return [entry.status for entry in emulator.requests.entries(operation)]


def test_a_burst_of_writes_reads_one_listing_and_a_lone_write_one_get(
    estate: tuple[ArmEmulator, Cloud, ScaleSetId],
) -> None:
    """12 instances written one after another: the first alone is read with a GET, the burst's
    other 11 from one list of the scale set (taken at the second, after the first was written).
    Written again within the burst, instance 0's listed model is still its model (listed after
    its write), instance 3's is not (it was written since): that one is read with a GET. No PUT
    meets a changed etag."""
    emulator, cloud, scale_set = estate
    for instance in range(12):
        nic = _add(cloud, _nic(scale_set, instance), [f"pod-{instance}"])
        assert [c.name for c in nic.secondary_ip_configurations] == [f"pod-{instance}"]
    assert emulator.requests.count(INSTANCE_GET) == 1
    assert emulator.requests.count(INSTANCE_LIST) == 1
    assert _statuses(emulator, INSTANCE_PUT) == [200] * 12

    for instance, gets in ((0, 1), (3, 2)):
        nic = _add(cloud, _nic(scale_set, instance), [f"pod-{instance}b"])
        assert [c.name for c in nic.secondary_ip_configurations] == [f"pod-{instance}", f"pod-{instance}b"]
        assert emulator.requests.count(INSTANCE_GET) == gets
    assert emulator.requests.count(INSTANCE_LIST) == 1
    assert _statuses(emulator, INSTANCE_PUT) == [200] * 14


def test_an_instance_changed_after_the_listing_is_read_again_and_nothing_is_lost(
    estate: tuple[ArmEmulator, Cloud, ScaleSetId],
) -> None:
    """Another writer tags instance 5 after the burst listed it: our PUT with the listed etag is
    refused (412), the instance is read with a GET and written again, once; it keeps both the
    other writer's tag and our IP configuration."""
    emulator, cloud, scale_set = estate
    _add(cloud, _nic(scale_set, 0), ["pod-0"])
    _add(cloud, _nic(scale_set, 1), ["pod-1"])  # lists the scale set
    assert emulator.requests.count(INSTANCE_LIST) == 1

    other = sdk_clients(emulator).compute.virtual_machine_scale_set_vms
    model = other.get(GROUP, scale_set.name, "5")
    model.tags = {"owner": "someone-else"}
    tagged = compute_models.VirtualMachineScaleSetVM(model.as_dict())
    other.begin_update(GROUP, scale_set.name, "5", tagged).result()

    nic = _add(cloud, _nic(scale_set, 5), ["pod-5"])

    assert [c.name for c in nic.secondary_ip_configurations] == ["pod-5"]
    assert other.get(GROUP, scale_set.name, "5").tags == {"owner": "someone-else"}
    ours = [e.status for e in emulator.requests.entries(INSTANCE_PUT) if e.path.rstrip("/").endswith("/5")]
    assert ours == [200, 412, 200]  # the other writer's, our listed try, our try after the GET
    assert emulator.requests.count(INSTANCE_LIST) == 1


def test_a_failed_listing_falls_back_to_gets_and_logs_once(
    estate: tuple[ArmEmulator, Cloud, ScaleSetId], caplog: pytest.LogCaptureFixture
) -> None:
    """While listing the scale set's instances fails, each write reads its instance with a GET
    and lands; the failure is logged once, and listed at most once per reuse age, not once a
    write."""
    emulator, cloud, scale_set = estate
    emulator.faults.server_error(INSTANCE_LIST, times=1000)
    caplog.set_level(logging.INFO, logger="nodewright.cloud.instance_models")
    started = time.monotonic()
    for instance in range(6):
        _add(cloud, _nic(scale_set, instance), [f"pod-{instance}"])
    elapsed = time.monotonic() - started
    assert _statuses(emulator, INSTANCE_PUT) == [200] * 6
    assert emulator.requests.count(INSTANCE_GET) == 6
    assert 1 <= cloud.compute.instance_models.lists <= 1 + elapsed // MAX_AGE
    assert set(_statuses(emulator, INSTANCE_LIST)) == {500}
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in failed]


def test_a_listing_that_saved_no_read_is_not_repeated_for_a_minute(
    estate: tuple[ArmEmulator, Cloud, ScaleSetId],
) -> None:
    """A rollout's case: new machines are written soon after they appear, so the burst's listing
    was sent before they existed and answers none of them. Having saved no read, the scale set is
    not listed again for a minute (each write GETs meanwhile); then it is, and shows them."""
    emulator, cloud, scale_set = estate
    clock = [100.0]
    models = InstanceModels(cloud.compute.list_instance_documents, clock=lambda: clock[0])
    assert models.model(scale_set.instance("0")) is None  # alone: the caller GETs
    assert models.lists == 0
    clock[0] = 103.0
    assert models.model(scale_set.instance("12")) is None  # not there yet: listed, not shown
    assert models.lists == 1
    wider = compute_models.VirtualMachineScaleSetUpdate(sku=compute_models.Sku(capacity=14))
    scale_sets = sdk_clients(emulator).compute.virtual_machine_scale_sets
    scale_sets.begin_update(GROUP, scale_set.name, wider).result()
    for moment in range(111, 163, 8):  # a burst: an ask every 8 s, for the new machines
        clock[0] = float(moment)
        assert models.model(scale_set.instance(str(12 + moment % 2))) is None
    assert models.lists == 1
    clock[0] = 164.0  # a minute after the unpaid listing
    listed = models.model(scale_set.instance("13"))
    assert listed is not None
    assert listed[0]["instanceId"] == "13"
    assert models.lists == 2
    assert emulator.requests.count(INSTANCE_LIST) == 2
