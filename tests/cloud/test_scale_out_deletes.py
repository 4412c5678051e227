"""A scale-out and an instance delete of the same scale set, racing: ARM lowers the capacity when
it accepts the delete, so a delete accepted between the scale-out's read of the capacity and its
PATCH would make that PATCH add one machine too many (a rollout's surge overshot by one). Real
SDK clients against the ARM emulator over HTTPS; the PATCH is held in flight by added latency."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import ScaleSetId, VirtualMachineId, parse_scale_set_id
from tests.cloud.test_compute import GROUP, Estate, estate

__all__ = ["estate"]  # the fixture, imported for this module


def _delete_during_a_scale_out(
    estate: Estate, scale_set: ScaleSetId, delete: Callable[[], None]
) -> list[str]:
    """Scale out by one with the PATCH held in the emulator for a second, call ``delete`` while
    it is held (its list and GET are answered by then), wait for the operation's end; the
    instance IDs after."""
    estate.emulator.faults.add_latency(1.0, "VirtualMachineScaleSets.update", times=1)
    ended = threading.Event()

    def on_done(_outcome: OperationOutcome) -> None:
        ended.set()

    scale_out = threading.Thread(
        target=estate.cloud.compute.scale_out, args=(scale_set, 1, lambda _before: None, on_done)
    )
    scale_out.start()
    time.sleep(0.5)
    delete()
    scale_out.join(30)
    assert ended.wait(30), "the scale-out's operation never ended"
    return estate.cloud.compute.list_instance_ids(scale_set)


def test_a_delete_never_lands_between_a_scale_outs_read_and_its_patch(estate: Estate) -> None:
    """Capacity 3, one instance deleted while a scale-out by one is in flight: 3 instances at the
    end (2 kept and 1 new), not 4."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=3
    )
    scale_set = parse_scale_set_id(scale_set_id)

    instances = _delete_during_a_scale_out(
        estate, scale_set, lambda: estate.cloud.compute.delete_instance(scale_set.instance("0"))
    )

    assert "0" not in instances
    assert len(instances) == 3, f"one machine too many: {instances}"


def test_a_flexible_members_delete_never_lands_between_a_scale_outs_read_and_its_patch(
    estate: Estate,
) -> None:
    """The same race on a Flexible scale set, whose member is deleted through the VM API (ARM
    lowers the set's capacity then too): 3 members at the end, not 4."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-f", subnet_id=estate.subnet_id, capacity=3, orchestration_mode="Flexible"
    )
    scale_set = parse_scale_set_id(scale_set_id)
    members = estate.cloud.compute.list_instance_ids(scale_set)
    member = VirtualMachineId(scale_set.subscription_id, scale_set.resource_group, members[0])

    after = _delete_during_a_scale_out(
        estate, scale_set, lambda: estate.cloud.compute.delete_instance(member, member_of=scale_set)
    )

    assert members[0] not in after
    assert len(after) == 3, f"one machine too many: {after}"
