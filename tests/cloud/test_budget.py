"""The client lives within ARM's budget: it paces by the remaining-quota headers before they reach
zero, holds a whole class after a 429 (for Retry-After, or a derived time without it), and shares
one budget per subscription and principal across clients."""

from __future__ import annotations

import json
import threading
import time

import pytest

from nodewright.cloud.budget import (
    ARM_LIMITS,
    ArmBudget,
    ArmBudgets,
    ClassLimit,
    derived_hold_seconds,
    parse_resource_policies,
)
from nodewright.cloud.config import CredentialKind
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.throttling import BucketLimit, RequestLimits
from nodewright.cloud.errors import CloudError, ThrottledError
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import ScaleSetId, parse_scale_set_id
from tests.cloud.helpers import cloud_for, publish_test_images

GROUP = "rg-budget"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.remaining_values: list[tuple[str, str, int]] = []
        self.throttles: list[tuple[str, str]] = []

    def remaining(self, subscription: str, request_class: str, value: int) -> None:
        self.remaining_values.append((subscription, request_class, value))

    def throttled(self, request_class: str, code: str) -> None:
        self.throttles.append((request_class, code))


def _compute_429(policy: str) -> bytes:
    return json.dumps(
        {"error": {"code": "OperationNotAllowed", "message": "x", "details": [{"target": policy}]}}
    ).encode()


def test_parse_resource_policies() -> None:
    """The Compute header as Azure's example spells it."""
    assert parse_resource_policies(
        "Microsoft.Compute/GetVMScaleSet3Min;197,Microsoft.Compute/GetVMScaleSet30Min;1297"
    ) == {"GetVMScaleSet3Min": 197, "GetVMScaleSet30Min": 1297}
    assert parse_resource_policies(None) == {}


@pytest.mark.parametrize(
    ("code", "policies", "hold"),
    [
        pytest.param("OperationNotAllowed", ["PutVMScaleSetVM3Min"], 30.0, id="3-minute-policy"),
        pytest.param("OperationNotAllowed", ["PutVMScaleSetVM30Min"], 300.0, id="30-minute-policy"),
        pytest.param("OperationNotAllowed", [], 30.0, id="policy-not-named"),
        pytest.param("TooManyRequests", [], 5.0, id="arm-bucket-floor"),
    ],
)
def test_derived_hold_without_retry_after(code: str, policies: list[str], hold: float) -> None:
    """A 429 without Retry-After: a sixth of the policy window, else the bucket's refill time."""
    assert derived_hold_seconds(code, policies, ClassLimit(200, 10.0), 20) == hold


def test_remaining_header_slows_before_zero() -> None:
    """Writes are free while plenty is left; once ARM reports the bucket near its reserve, each
    write waits for the refill instead of spending the last tokens."""
    clock = Clock()
    recorder = Recorder()
    budget = ArmBudget("sub", reserve_fraction=0.1, observer=recorder, clock=clock)
    assert budget.wait_seconds("PUT", "op") == 0.0
    budget.learn("PUT", "op", 200, {"x-ms-ratelimit-remaining-subscription-writes": "21"}, None)
    assert recorder.remaining_values == [("sub", "writes", 21)]
    assert budget.wait_seconds("PUT", "op") == 0.0  # 20 left: at the reserve, not below
    assert budget.wait_seconds("PUT", "op") == pytest.approx(0.1)  # one below: 1 / (10/s)
    assert budget.wait_seconds("GET", "op") == 0.0  # reads are another bucket


def test_compute_policy_header_paces_its_operation() -> None:
    """A Compute policy reported nearly spent paces the operation that reported it (capacity =
    the most reported + 1, refilled over its window), and no other operation."""
    clock = Clock()
    budget = ArmBudget("sub", clock=clock)
    header = {"x-ms-ratelimit-remaining-resource": "Microsoft.Compute/PutVMScaleSetVM3Min;179"}
    budget.learn("PUT", "put-vm", 200, header, None)
    low = {"x-ms-ratelimit-remaining-resource": "Microsoft.Compute/PutVMScaleSetVM3Min;3"}
    budget.learn("PUT", "put-vm", 200, low, None)
    assert budget.wait_seconds("PUT", "put-vm") > 0  # 180 per 180 s: 1/s; reserve 18
    assert budget.wait_seconds("PUT", "other") == 0.0


def test_429_without_retry_after_holds_the_class_and_doubles() -> None:
    """OperationNotAllowed naming a 3-minute policy holds writes 30 s, then 60 s for the next one
    in a row, and no longer after that; reads are not held; the observer counts each 429 by class
    and code."""
    clock = Clock()
    recorder = Recorder()
    budget = ArmBudget("sub", observer=recorder, clock=clock)
    budget.learn("PUT", "op", 429, {}, _compute_429("PutVMScaleSetVM3Min"))
    assert budget.held_for("PATCH") == pytest.approx(30.0)
    assert budget.held_for("GET") == 0.0
    clock.now += 30.0
    budget.learn("PUT", "op", 429, {}, _compute_429("PutVMScaleSetVM3Min"))
    assert budget.held_for("PUT") == pytest.approx(60.0)
    clock.now += 60.0
    budget.learn("PUT", "op", 429, {}, _compute_429("PutVMScaleSetVM3Min"))
    assert budget.held_for("PUT") == pytest.approx(60.0)  # capped: calls resume within a minute
    clock.now += 60.0
    budget.learn("PUT", "op", 200, {}, None)
    budget.learn("PUT", "op", 429, {}, _compute_429("PutVMScaleSetVM3Min"))
    assert budget.held_for("PUT") == pytest.approx(30.0)  # a success ended the run
    assert recorder.throttles == [("writes", "OperationNotAllowed")] * 4


def test_429_with_retry_after_holds_for_it() -> None:
    clock = Clock()
    budget = ArmBudget("sub", clock=clock)
    budget.learn("DELETE", "op", 429, {"Retry-After": "7"}, b'{"error": {"code": "TooManyRequests"}}')
    assert budget.held_for("DELETE") == pytest.approx(7.0)
    assert budget.held_for("PUT") == 0.0


def test_a_refused_request_gives_its_tokens_back() -> None:
    """A request refused for a pacing wait beyond the bound was not sent: the tokens it took are
    given back, so the next request waits as long as it would have, not longer."""
    clock = Clock()
    budget = ArmBudget("sub", limits={**ARM_LIMITS, "writes": ClassLimit(2, 1.0)}, clock=clock)
    assert budget.wait_seconds("PUT", "op") == 0.0
    assert budget.wait_seconds("PUT", "op") == pytest.approx(1.0)
    budget.refund("PUT", "op")
    assert budget.wait_seconds("PUT", "op") == pytest.approx(1.0)


def test_a_prepaid_write_takes_its_tokens_once_and_gives_back_what_it_did_not_spend() -> None:
    """``prepay`` takes the write's tokens up front (the write then passes without taking more);
    one it cannot take within the wait bound takes nothing and names the wait; a credit no
    write spent goes back to the bucket; a credit is the calling thread's alone."""
    clock = Clock()
    budget = ArmBudget("sub", limits={**ARM_LIMITS, "writes": ClassLimit(3, 1.0)}, clock=clock)
    naps: list[float] = []
    assert budget.prepay("PUT", "op", 1.0, sleep=naps.append) == 0.0  # 2 left, reserve 1
    assert budget.spend_prepaid("PUT", "op")
    assert not budget.spend_prepaid("PUT", "op")  # spent once
    assert budget.prepay("PUT", "op", 1.0, sleep=naps.append) == 0.0  # 1 left: at the reserve
    assert budget.prepay("PUT", "op", 0.5, sleep=naps.append) == 0.0  # held already: none taken
    elsewhere: list[object] = []

    def other_thread() -> None:
        elsewhere.append(budget.spend_prepaid("PUT", "op"))
        elsewhere.append(budget.prepay("PUT", "op", 0.5, sleep=naps.append))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert elsewhere == [False, pytest.approx(1.0)]  # not its credit; none left within 0.5 s
    assert naps == []
    budget.release_prepaid("PUT", "op")  # the second credit, never spent: its token comes back
    assert budget.wait_seconds("PUT", "op") == 0.0
    assert budget.wait_seconds("PUT", "op") == pytest.approx(1.0)


# Against the emulator ----------------------------------------------------------------------------


def _subnet(emulator: ArmEmulator) -> str:
    return (
        f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}"
        "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
    )


def _scale_set(emulator: ArmEmulator) -> ScaleSetId:
    emulator.estate.add_resource_group(GROUP)
    publish_test_images(emulator)
    vnet = emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.3.0.0/24"})
    return parse_scale_set_id(
        emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=vnet + "/subnets/nodes")
    )


def test_two_clients_share_one_budget_and_never_see_a_429(arm_emulator: ArmEmulator) -> None:
    """Write bucket of 20 at 5/s, enforced. Two clouds (one subscription and principal) write 40
    times from four threads: no 429 reaches the emulator's log, and the writes took at least the
    bucket-limited lower bound ((40 - 20) / 5 = 4 s, less the reserve the client keeps). A write
    whose pacing would last over 1 s is refused unsent (quiet) and comes back at the time it
    names, as the work queue brings a reconcile back."""
    arm_emulator.throttling.configure(
        RequestLimits(enforce=True, buckets={**RequestLimits().buckets, "writes": BucketLimit(20, 5.0)})
    )
    scale_set = _scale_set(arm_emulator)
    image = ImageReference(publisher="p", offer="o", sku="s", version="1.0.0")
    # A trial-sized subscription: the clouds' budget is told its limits before first use.
    budgets = ArmBudgets()
    budget = budgets.get(
        arm_emulator.endpoint,
        DEFAULT_SUBSCRIPTION,
        CredentialKind.STATIC_TOKEN.value,
        limits={**ARM_LIMITS, "writes": ClassLimit(20, 5.0)},
    )
    clouds = [cloud_for(arm_emulator, budgets=budgets), cloud_for(arm_emulator, budgets=budgets)]
    assert clouds[0].clients.budget is budget
    assert clouds[1].clients.budget is budget
    errors: list[BaseException] = []

    def write(cloud_index: int) -> None:
        written = 0
        while written < 10:
            try:
                clouds[cloud_index].compute.set_scale_set_image(scale_set, image)
                written += 1
            except CloudError as error:
                if not error.quiet or error.retry_at is None:
                    errors.append(error)
                    return
                time.sleep(max(0.0, error.retry_at - time.monotonic()))
            except BaseException as error:
                errors.append(error)
                return

    started = time.monotonic()
    threads = [threading.Thread(target=write, args=(index % 2,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    took = time.monotonic() - started
    for cloud in clouds:
        cloud.close()
    writes = arm_emulator.requests.entries("VirtualMachineScaleSets.update")
    assert errors == []
    assert [entry.status for entry in writes if entry.status == 429] == []
    assert len(writes) == 40
    assert took >= (40 - 20) / 5.0


def test_compute_throttle_without_retry_after_holds_later_writes(arm_emulator: ArmEmulator) -> None:
    """An injected OperationNotAllowed without Retry-After: the write fails with ThrottledError;
    a later write of another target is refused unsent for the derived hold (30 s here, more than
    the 1 s the client may wait), quietly; reads still go out."""
    scale_set = _scale_set(arm_emulator)
    other = parse_scale_set_id(
        arm_emulator.estate.add_scale_set(GROUP, "vmss-b", subnet_id=_subnet(arm_emulator))
    )
    cloud = cloud_for(arm_emulator, pacing_max_wait_seconds=1.0)
    arm_emulator.faults.compute_throttle("VirtualMachineScaleSets.update", policy="PutVMScaleSet3Min")
    image = ImageReference(publisher="p", offer="o", sku="s", version="1.0.0")
    try:
        with pytest.raises(ThrottledError):
            cloud.compute.set_scale_set_image(scale_set, image)
        with pytest.raises(ThrottledError) as held:
            cloud.compute.set_scale_set_image(other, image)
        assert held.value.code == "ClientThrottleHold"
        assert held.value.quiet
        assert held.value.retry_after is not None
        assert held.value.retry_after > 25
        assert cloud.compute.get_scale_set_image(other) is not None
    finally:
        cloud.close()
    statuses = [entry.status for entry in arm_emulator.requests.entries("VirtualMachineScaleSets.update")]
    assert statuses == [429]


def test_a_write_built_before_a_hold_is_never_sent_after_it(arm_emulator: ArmEmulator) -> None:
    """A 429 with Retry-After 20 s on one scale set's write holds the writes class: a write of
    another scale set, made at once, fails at once (quiet ThrottledError naming the time left)
    and is not sent, not slept through the hold and sent 20 s late with the plan it was built
    from; with default settings (no wait allowed for a hold)."""
    scale_set = _scale_set(arm_emulator)
    other = parse_scale_set_id(
        arm_emulator.estate.add_scale_set(GROUP, "vmss-b", subnet_id=_subnet(arm_emulator))
    )
    cloud = cloud_for(arm_emulator)
    arm_emulator.faults.throttle("VirtualMachineScaleSets.update", times=1, retry_after=20)
    image = ImageReference(publisher="p", offer="o", sku="s", version="1.0.0")
    try:
        with pytest.raises(ThrottledError):
            cloud.compute.set_scale_set_image(scale_set, image)
        started = time.monotonic()
        with pytest.raises(ThrottledError) as held:
            cloud.compute.set_scale_set_image(other, image)
        took = time.monotonic() - started
    finally:
        cloud.close()
    assert took < 2.0, f"the held write took {took:.1f} s to fail"
    assert held.value.quiet
    assert held.value.code == "ClientThrottleHold"
    assert held.value.retry_after is not None
    assert 15.0 < held.value.retry_after <= 20.0
    statuses = [entry.status for entry in arm_emulator.requests.entries("VirtualMachineScaleSets.update")]
    assert statuses == [429], "nothing sent after the 429"


def test_an_instance_write_the_budget_keeps_back_costs_no_read(arm_emulator: ArmEmulator) -> None:
    """A scale-set instance's IP configurations are a read-modify-write (GET the model, PUT it).
    When the budget would keep the PUT back, the GET is not sent either (a kept-back write used to
    cost a read each time it came back); when it lets it through, one GET and one PUT go out and
    the PUT's tokens are taken once."""
    _scale_set(arm_emulator)
    scale_set = parse_scale_set_id(
        arm_emulator.estate.add_scale_set(GROUP, "vmss-c", subnet_id=_subnet(arm_emulator), capacity=1)
    )
    nic_id = f"{scale_set.instance('0')}/networkInterfaces/vmss-c-nic"
    clock = Clock()  # stands still: no refill hides a token taken twice
    budgets = ArmBudgets()
    budget = budgets.get(
        arm_emulator.endpoint, DEFAULT_SUBSCRIPTION, CredentialKind.STATIC_TOKEN.value, clock=clock
    )
    cloud = cloud_for(arm_emulator, budgets=budgets, pacing_max_wait_seconds=0.5)
    assert cloud.clients.budget is budget
    try:
        cloud.network.add_secondary_ip_configurations(nic_id, ["pod-1"])
        assert _tokens(budget, "writes") == budget.limits["writes"].capacity - 1  # taken once
        sent = len(arm_emulator.requests.entries())
        spent = {"x-ms-ratelimit-remaining-subscription-writes": "0"}
        budget.learn("PUT", "op", 200, spent, None)  # ARM says the writes bucket is empty
        with pytest.raises(ThrottledError) as kept:
            cloud.network.add_secondary_ip_configurations(nic_id, ["pod-2"])
    finally:
        cloud.close()
    assert kept.value.status_code is None
    assert kept.value.code == "ClientPacing"
    assert arm_emulator.requests.count("VirtualMachineScaleSetVMs.update") == 1
    assert len(arm_emulator.requests.entries()) == sent, "the kept-back write sent nothing, no read either"


def _tokens(budget: ArmBudget, kind: str) -> float:
    return budget._classes[kind].bucket.tokens  # the local bucket's estimate
