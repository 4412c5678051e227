"""Boot pools (issue 32): a Uniform scale set's model carries the pool its nodes hold, so a new
instance boots with its IPs and its node's pool is filled with no write to the instance. Real API
server, ARM emulator, node simulator and pod address agent; the NIC list period is scaled down."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from nodewright.cloud.boot_configurations import BOOT_CONFIGURATION_PREFIX
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.models import IpConfigurationInfo, NicInfo
from nodewright.cloud.resource_ids import ScaleSetId, parse_scale_set_id
from nodewright.cloud.throttle import InMemoryCallCounter
from nodewright.controllers.node_network_config.boot_pools import BootPools, boot_pool_size, within_room
from nodewright.ipam import PoolScaler, pool_target
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.harness import IpamHarness
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
LIST_PERIOD = 0.3
"""The NIC watcher's period: a scale set's boot pool is decided every 1.5 s."""
INSTANCE_PUTS = "VirtualMachineScaleSetVMs.update"
MODEL_WRITES = "VirtualMachineScaleSets.update"


def _settled(ipam: IpamHarness, node: str, demand: int) -> bool:
    config = ipam.config(node)
    target = pool_target(demand, SCALER)
    return (
        config is not None
        and config.spec.requested_ip_count == target
        and len(ipam.assignments(config)) == target
        and len(ipam.pod_addresses(node)) == demand
    )


def _settled_at(ipam: IpamHarness, node: str, demand: int) -> Callable[[], bool]:
    return lambda: _settled(ipam, node, demand)


def _pooled_scale_set(ipam: IpamHarness, capacity: int, pods: int) -> tuple[ScaleSetId, list[str]]:
    """A scale set whose nodes hold ``pods`` pods before the manager starts: each node's first
    pool is already sized for them, so the model is decided once, not at one batch and again."""
    ipam.configure(scaler=SCALER, nic_list_period_seconds=LIST_PERIOD)
    scale_set = parse_scale_set_id(ipam.add_scale_set(capacity=capacity))
    ipam.start(manager=False)
    nodes: list[str] = eventually(
        lambda: len(ipam.node_names()) == capacity and ipam.node_names(), message="the nodes"
    )
    for node in nodes:
        ipam.create_pods(node, pods)
    ipam.start_manager()
    for node in nodes:
        eventually(_settled_at(ipam, node, pods), message=f"{node}'s pool for its pods")
    return scale_set, nodes


def _model_writes_of(emulator: ArmEmulator) -> int:
    """PATCHes of a scale set's model (capacity PATCHes apart)."""
    return sum(
        1 for entry in emulator.requests.entries(MODEL_WRITES) if "virtualMachineProfile" in str(entry.body)
    )


def _model_writes(ipam: IpamHarness) -> int:
    return _model_writes_of(ipam.emulator)


def _instance_puts(ipam: IpamHarness, node: str, since: float) -> int:
    machine = ipam.nic_of(node).split("/networkInterfaces/")[0]
    return sum(
        1
        for entry in ipam.emulator.requests.entries(INSTANCE_PUTS, since=since)
        if entry.path.lower().startswith(machine.lower())
    )


def test_a_new_instance_boots_with_its_pool_and_its_node_gets_no_write(ipam: IpamHarness) -> None:
    """Two nodes of 10 pods hold 32 IPs each; the scale set's model comes to carry 32 of ours. A
    scale-out's node is filled from them: 16 at first, all 32 once 10 pods land, with no PUT of its
    instance and no pod waiting for an address. 25 pods on it need 48: one PUT adds the 16 the
    model did not carry."""
    scale_set, nodes = _pooled_scale_set(ipam, capacity=2, pods=10)
    compute = ipam.cloud.compute
    eventually(lambda: compute.get_scale_set_boot_pool(scale_set).count == 32, message="the model's pool")
    assert _model_writes(ipam) == 1
    since = time.monotonic()

    compute.scale_out(scale_set, 1, lambda _before: None, lambda _outcome: None)
    new = eventually(lambda: [n for n in ipam.node_names() if n not in nodes], message="the new node")[0]
    eventually(lambda: _settled(ipam, new, 0), message="the new node's first batch")
    config = ipam.config(new)
    assert config is not None
    assert {name for name, _ in ipam.assignments(config)} <= set(ipam.secondary(new))
    assert all(name.startswith(BOOT_CONFIGURATION_PREFIX) for name in ipam.secondary(new))
    assert ipam.agent is not None
    starved = ipam.agent.starved_passes  # the first nodes' pods came before their first batch
    ipam.create_pods(new, 10)
    eventually(lambda: _settled(ipam, new, 10), message="the new node's pool for 10 pods")
    assert _instance_puts(ipam, new, since) == 0, "the new instance was written"
    assert ipam.agent.starved_passes == starved, "a pod waited for an address"

    ipam.create_pods(new, 15)
    eventually(lambda: _settled(ipam, new, 25), message="the new node's pool for 25 pods")
    assert _instance_puts(ipam, new, since) == 1
    assert _model_writes(ipam) == 1, "the model was written again"


def test_under_nodesubnet_a_new_node_adopts_its_whole_boot_pool_at_once(ipam: IpamHarness) -> None:
    """CNS NodeSubnet hands out whatever the NIC carries from boot, and nothing may leave it: a
    new node with no pods (which asks for one batch) takes all 32 boot configurations into its
    pool at once, with no write to its instance, and leaves none unaccounted for the leak
    collector."""
    ipam.configure(consumer="nodesubnet", resync_period_seconds=0.5)
    scale_set, nodes = _pooled_scale_set(ipam, capacity=2, pods=10)
    compute = ipam.cloud.compute
    eventually(lambda: compute.get_scale_set_boot_pool(scale_set).count == 32, message="the model's pool")
    since = time.monotonic()

    compute.scale_out(scale_set, 1, lambda _before: None, lambda _outcome: None)
    new = eventually(lambda: [n for n in ipam.node_names() if n not in nodes], message="the new node")[0]

    eventually(lambda: len(ipam.assignments(ipam.config(new))) == 32, message="the whole boot pool")
    with ipam.watched(passes=3):
        pass
    assert len(ipam.assignments(ipam.config(new))) == 32
    assert len(ipam.secondary(new)) == 32
    assert _instance_puts(ipam, new, since) == 0


@pytest.mark.parametrize("mode", ["Automatic", "Rolling"])
def test_a_model_that_reaches_running_instances_is_left_alone(
    ipam: IpamHarness, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Under an upgrade policy that applies the model to running instances (it would replace the
    IPs their pods use), the model is read, never written, and one line says why."""
    caplog.set_level(logging.INFO, logger="nodewright.controllers.node_network_config.boot_pools")
    ipam.configure(scaler=SCALER, nic_list_period_seconds=LIST_PERIOD)
    scale_set = parse_scale_set_id(ipam.add_scale_set(capacity=1))
    ipam.emulator.state.scale_sets[str(scale_set).lower()].resource.properties["upgradePolicy"] = {
        "mode": mode
    }
    ipam.start()
    node = eventually(ipam.node_names, message="the node")[0]
    ipam.create_pods(node, 10)
    eventually(lambda: _settled(ipam, node, 10), message="the pool for its pods")

    def refusals() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage().startswith("Not keeping a boot pool")]

    eventually(refusals, message="the line saying why")
    time.sleep(LIST_PERIOD * 10)  # two more decisions' time: still one line, still no write
    assert len(refusals()) == 1
    assert _model_writes(ipam) == 0


def test_a_failed_model_write_is_logged_once_and_tried_again(
    ipam: IpamHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """The model's first PATCH is accepted and its operation fails (the emulator rolls the model
    back); then a PATCH is throttled (429). Each failure is one warning line; the next decision
    reads the model again and writes it."""
    caplog.set_level(logging.INFO, logger="nodewright.controllers.node_network_config.boot_pools")
    ipam.emulator.faults.fail_operation(MODEL_WRITES, code="InternalExecutionError", message="injected")
    ipam.emulator.faults.throttle(MODEL_WRITES, times=1, retry_after=1)
    scale_set, _nodes = _pooled_scale_set(ipam, capacity=2, pods=10)

    eventually(lambda: ipam.cloud.compute.get_scale_set_boot_pool(scale_set).count == 32, message="the pool")

    failed = [
        r for r in caplog.records if r.getMessage().startswith("Writing a scale set's boot pool failed")
    ]
    assert len(failed) == 2
    assert len(ipam.emulator.requests.entries(MODEL_WRITES, since=0.0)) == 3  # failed, throttled, written
    assert _model_writes(ipam) == 3


def test_no_boot_pool_where_the_subnet_lacks_room_for_ten_more_machines(ipam: IpamHarness) -> None:
    """A /25 (123 addresses) holding two nodes has room for fewer than ten new machines' boot
    pools, whether the nodes hold 16 (89 free, 170 needed) or 32 (57 free, 330 needed): the model
    is read and carries no boot pool (Azure would fail a scale-out it cannot hold); the new node
    then gets its IPs by PUT, as before."""
    ipam.subnet_prefix = "10.240.0.0/25"
    scale_set, nodes = _pooled_scale_set(ipam, capacity=2, pods=10)
    eventually(lambda: ipam.emulator.requests.count("VirtualMachineScaleSets.get"), message="a model read")
    since = time.monotonic()
    ipam.cloud.compute.scale_out(scale_set, 1, lambda _before: None, lambda _outcome: None)
    new = eventually(lambda: [n for n in ipam.node_names() if n not in nodes], message="the new node")[0]
    ipam.create_pods(new, 10)
    eventually(_settled_at(ipam, new, 10), message="the new node's pool for 10 pods")
    assert _instance_puts(ipam, new, since) >= 1
    assert ipam.cloud.compute.get_scale_set_boot_pool(scale_set).count == 0
    assert _model_writes(ipam) == 0


def _nic(scale_set: ScaleSetId, instance: str, pool: int) -> NicInfo:
    configurations = [IpConfigurationInfo("ipconfig1", "10.0.0.4", True, None, "Succeeded")]
    configurations += [IpConfigurationInfo(f"ip{i}", None, False, None, "Succeeded") for i in range(pool)]
    nic_id = f"{scale_set.instance(instance)}/networkInterfaces/{scale_set.name}-nic"
    return NicInfo(nic_id, None, tuple(configurations), True)


def test_a_cold_start_decides_from_the_nics_passes_read_without_waiting_a_period(
    arm_emulator: ArmEmulator,
) -> None:
    """The pools passes read (``observe``) decide a scale set never decided at the next
    ``decide_due``: the model carries the median at once; then nothing is read again within the
    check period; a listing replaces what was learnt (gone NICs no longer count)."""
    arm_emulator.state.operation_retry_after = 1
    arm_emulator.estate.add_resource_group("rg-boot")
    vnet = arm_emulator.estate.add_virtual_network("rg-boot", "vnet", subnets={"n": "10.242.0.0/16"})
    scale_set = parse_scale_set_id(
        arm_emulator.estate.add_scale_set("rg-boot", "vmss-d", subnet_id=vnet + "/subnets/n", capacity=3)
    )
    cloud = cloud_for(arm_emulator)
    clock = [1000.0]
    pools = BootPools(cloud.compute, SCALER, 60.0, lambda: clock[0])
    try:
        for instance, pool in (("0", 0), ("1", 32), ("2", 32)):
            pools.observe(_nic(scale_set, instance, pool))
        pools.decide_due()
        eventually(lambda: cloud.compute.get_scale_set_boot_pool(scale_set).count == 32, message="32")
        eventually(lambda: pools.writes_in_flight() == 0, message="the write's operation ended")
        reads = arm_emulator.requests.count("VirtualMachineScaleSets.get")

        pools.listed([_nic(scale_set, "0", 48), _nic(scale_set, "1", 48)])
        clock[0] += 299.0
        pools.decide_due()
        assert arm_emulator.requests.count("VirtualMachineScaleSets.get") == reads  # not due yet
        clock[0] += 1.0
        pools.decide_due()
        eventually(lambda: cloud.compute.get_scale_set_boot_pool(scale_set).count == 48, message="48")
    finally:
        cloud.close()


def test_a_write_our_budget_keeps_back_is_sent_later_without_a_new_read_nor_a_warning(
    arm_emulator: ArmEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """Two scale sets due at once, one write token a 4 s (the manager's budget at a cold start,
    scaled): the second write is kept back, not sent, not logged, and sent once the budget has a
    token, with the model as first read (one GET each)."""
    caplog.set_level(logging.INFO, logger="nodewright.controllers.node_network_config.boot_pools")
    arm_emulator.state.operation_retry_after = 1
    arm_emulator.estate.add_resource_group("rg-boot")
    vnet = arm_emulator.estate.add_virtual_network("rg-boot", "vnet", subnets={"n": "10.243.0.0/16"})
    scale_sets = [
        parse_scale_set_id(
            arm_emulator.estate.add_scale_set("rg-boot", name, subnet_id=vnet + "/subnets/n", capacity=1)
        )
        for name in ("vmss-e", "vmss-f")
    ]
    calls = InMemoryCallCounter()
    cloud = cloud_for(arm_emulator, calls, mutation_qps=0.25, mutation_burst=1, pacing_max_wait_seconds=0.1)
    checker = cloud_for(arm_emulator)
    pools = BootPools(cloud.compute, SCALER, 60.0, time.monotonic)
    try:
        for scale_set in scale_sets:
            pools.observe(_nic(scale_set, "0", 32))

        def both_written() -> bool:
            pools.decide_due()
            return all(checker.compute.get_scale_set_boot_pool(s).count == 32 for s in scale_sets)

        eventually(both_written, message="both models")
    finally:
        cloud.close()
        checker.close()
    writes = [
        e.outcome
        for e in calls.events
        if e.kind == "call" and e.operation == "compute.set_scale_set_boot_pool"
    ]
    assert writes.count("success") == 2
    assert len(writes) > 2, f"no write was kept back: {writes}"
    assert _model_writes_of(arm_emulator) == 2
    assert calls.count(kind="call", operation="compute.get_scale_set") == 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_boot_pool_is_the_median_sized_pool_rounded_up_to_the_batch() -> None:
    assert boot_pool_size([], SCALER) is None
    assert boot_pool_size([0, 0, 0], SCALER) is None
    assert boot_pool_size([0, 0, 16], SCALER) == 16  # nodes not sized yet do not count
    assert boot_pool_size([0] * 19 + [32], SCALER) is None  # fewer than a tenth sized
    assert boot_pool_size([0] * 18 + [32, 32], SCALER) == 32
    assert boot_pool_size([16, 32, 32], SCALER) == 32
    assert boot_pool_size([16, 20, 48, 48], SCALER) == 32  # the lower median, 20, to the batch
    assert boot_pool_size([240, 250], PoolScaler(batch_size=16, max_ip_count=250)) == 240
    assert boot_pool_size([250, 250], PoolScaler(batch_size=16, max_ip_count=250)) == 250


def test_the_boot_pool_needs_room_for_ten_machines_in_its_subnet() -> None:
    assert within_room(32, None) == 32
    assert within_room(32, 330) == 32
    assert within_room(32, 329) == 0
