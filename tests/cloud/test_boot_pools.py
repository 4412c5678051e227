"""A scale set's boot pool through the real azure-mgmt-compute client against the ARM emulator:
the model's PATCH (ours only, the user's secondaries kept, If-Match), new instances booting with
the addresses, old instances untouched, and no write to a scale set whose model reaches its
instances."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from nodewright.cloud.boot_configurations import (
    BOOT_CONFIGURATION_PREFIX,
    boot_configuration_count,
    with_boot_configurations,
)
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.errors import CloudError, PreconditionFailedError
from nodewright.cloud.factory import Cloud
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import ScaleSetId, parse_scale_set_id
from tests.cloud.helpers import cloud_for

GROUP = "rg-boot"


@dataclass
class Estate:
    emulator: ArmEmulator
    cloud: Cloud
    subnet_id: str

    def scale_set(self, name: str, *, capacity: int = 1, secondaries: int = 0) -> ScaleSetId:
        arm_id = self.emulator.estate.add_scale_set(
            GROUP, name, subnet_id=self.subnet_id, capacity=capacity, secondary_ip_configurations=secondaries
        )
        return parse_scale_set_id(arm_id)


@pytest.fixture
def estate(arm_emulator: ArmEmulator) -> Iterator[Estate]:
    arm_emulator.state.operation_retry_after = 1
    arm_emulator.estate.add_resource_group(GROUP)
    vnet = arm_emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.241.0.0/16"})
    cloud = cloud_for(arm_emulator)
    yield Estate(arm_emulator, cloud, vnet + "/subnets/nodes")
    cloud.close()


def _set_and_wait(estate: Estate, scale_set: ScaleSetId, count: int) -> OperationOutcome:
    pool = estate.cloud.compute.get_scale_set_boot_pool(scale_set)
    outcomes: list[OperationOutcome] = []
    ended = threading.Event()

    def on_done(outcome: OperationOutcome) -> None:
        outcomes.append(outcome)
        ended.set()

    estate.cloud.compute.begin_set_scale_set_boot_pool(pool, count, on_done)
    assert ended.wait(30), "the model's operation never ended"
    return outcomes[0]


def _scale_out(estate: Estate, scale_set: ScaleSetId) -> str:
    ended = threading.Event()
    before: list[str] = []
    estate.cloud.compute.scale_out(scale_set, 1, before.extend, lambda _outcome: ended.set())
    assert ended.wait(30)
    return next(i for i in estate.cloud.compute.list_instance_ids(scale_set) if i not in before)


def _nic_configurations(estate: Estate, scale_set: ScaleSetId, instance_id: str) -> list[dict[str, Any]]:
    nic = estate.cloud.network.get_network_interface(
        f"{scale_set.instance(instance_id)}/networkInterfaces/{scale_set.name}-nic"
    )
    return [{"name": c.name, "address": c.address} for c in nic.ip_configurations if not c.primary]


def test_new_instances_boot_with_the_model_pool_and_old_ones_keep_theirs(estate: Estate) -> None:
    """The model gets 32 of ours beside the user's 2; an instance created afterwards has all 34
    with addresses; the instance created before keeps its 2 (and shows an older model); setting
    16 keeps boot-1..16 and drops the rest."""
    scale_set = estate.scale_set("vmss-a", secondaries=2)
    pool = estate.cloud.compute.get_scale_set_boot_pool(scale_set)
    assert (pool.count, pool.foreign, pool.upgrade_mode, pool.writable) == (0, 2, "Manual", True)

    assert _set_and_wait(estate, scale_set, 32).succeeded

    assert estate.cloud.compute.get_scale_set_boot_pool(scale_set).count == 32
    new = _scale_out(estate, scale_set)
    configurations = _nic_configurations(estate, scale_set, new)
    ours = [c for c in configurations if c["name"].startswith(BOOT_CONFIGURATION_PREFIX)]
    assert len(ours) == 32
    assert len(configurations) == 34
    assert all(c["address"] for c in configurations)
    assert len({c["address"] for c in configurations}) == 34
    assert len(_nic_configurations(estate, scale_set, "0")) == 2
    vms = estate.cloud.clients.compute.virtual_machine_scale_set_vms
    assert vms.get(GROUP, scale_set.name, "0").latest_model_applied is False
    assert vms.get(GROUP, scale_set.name, new).latest_model_applied is True

    assert _set_and_wait(estate, scale_set, 16).succeeded
    pool = estate.cloud.compute.get_scale_set_boot_pool(scale_set)
    assert (pool.count, pool.foreign) == (16, 2)
    names = {c["name"] for c in pool.nic_configurations[0]["properties"]["ipConfigurations"]}
    assert f"{BOOT_CONFIGURATION_PREFIX}16" in names
    assert f"{BOOT_CONFIGURATION_PREFIX}17" not in names


def test_a_model_changed_since_it_was_read_is_not_overwritten(estate: Estate) -> None:
    """The PATCH carries the etag it was planned from: a model changed in between answers 412
    and keeps the other writer's change."""
    scale_set = estate.scale_set("vmss-b")
    stale = estate.cloud.compute.get_scale_set_boot_pool(scale_set)
    assert _set_and_wait(estate, scale_set, 8).succeeded

    with pytest.raises(PreconditionFailedError):
        estate.cloud.compute.begin_set_scale_set_boot_pool(stale, 4, lambda _outcome: None)

    assert estate.cloud.compute.get_scale_set_boot_pool(scale_set).count == 8


@pytest.mark.parametrize("mode", ["Automatic", "Rolling"])
def test_a_model_that_reaches_its_instances_is_not_written(estate: Estate, mode: str) -> None:
    """Under an upgrade policy that applies the model to running instances, nothing is sent."""
    scale_set = estate.scale_set("vmss-c")
    document = estate.emulator.state.scale_sets[str(scale_set).lower()].resource.properties
    document["upgradePolicy"] = {"mode": mode}
    pool = estate.cloud.compute.get_scale_set_boot_pool(scale_set)
    assert not pool.writable
    since = time.monotonic()

    with pytest.raises(CloudError, match=mode):
        estate.cloud.compute.begin_set_scale_set_boot_pool(pool, 16, lambda _outcome: None)

    assert estate.emulator.requests.count("VirtualMachineScaleSets.update", since=since) == 0


def test_the_edit_counts_only_its_own_names_and_refuses_past_the_nic_limit() -> None:
    subnet = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/subnets/n"
    nic: dict[str, Any] = {
        "name": "nic",
        "properties": {
            "primary": True,
            "ipConfigurations": [
                {"name": "ipconfig1", "properties": {"primary": True, "subnet": {"id": subnet}}},
                {"name": "mine", "properties": {"subnet": {"id": subnet}}},
            ],
        },
    }
    edited = with_boot_configurations([nic], 3)
    assert boot_configuration_count(edited) == (3, 1)
    assert boot_configuration_count(with_boot_configurations(edited, 0)) == (0, 1)
    assert nic["properties"]["ipConfigurations"][1]["name"] == "mine"  # the input is not changed
    assert len(nic["properties"]["ipConfigurations"]) == 2
    with pytest.raises(CloudError, match="at most 256"):
        with_boot_configurations([nic], 255)
