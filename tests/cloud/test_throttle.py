"""Throttling and counting: the token bucket and Retry-After gate on an injected clock, request
classification, call counting; then (with the emulator) the policies inside the real SDK clients."""

from __future__ import annotations

import threading
import time

import pytest
from azure.core.pipeline import PipelineContext, PipelineRequest
from azure.core.rest import HttpRequest

from nodewright.cloud.budget import ArmBudgets
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.errors import CloudError, NotFoundError, ThrottledError
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import ScaleSetId, parse_scale_set_id
from nodewright.cloud.throttle import (
    PACED_SECONDS,
    InMemoryCallCounter,
    MutationRateLimitPolicy,
    RetryAfterGate,
    TokenBucket,
    observe_call,
    operation_class,
    operation_name,
)
from tests.cloud.helpers import cloud_for, publish_test_images


class FakeClock:
    """A clock that only moves when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_token_bucket_allows_a_burst_then_paces_at_the_rate() -> None:
    """Burst 3 at 2 qps: three immediate tokens, then one every half second."""
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(0.5)
    assert waits[4] == pytest.approx(0.5)


def test_token_bucket_refills_up_to_burst_only() -> None:
    """A long idle period refills to the burst, never beyond it."""
    clock = FakeClock()
    bucket = TokenBucket(rate=1.0, burst=2, clock=clock, sleep=clock.sleep)
    bucket.acquire()
    bucket.acquire()
    clock.now += 100
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, pytest.approx(1.0)]


def test_token_bucket_debt_queues_waiters_in_order() -> None:
    """Concurrent reservations beyond the burst wait 1/rate, 2/rate, ... (no two share a slot)."""
    clock = FakeClock()
    bucket = TokenBucket(rate=4.0, burst=1, clock=clock, sleep=clock.sleep)
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.25, 0.5, 0.75]


def test_gate_refuses_at_once_while_held_then_opens() -> None:
    """After block(key, 3 s) a request of that key is refused at once (quiet ThrottledError naming
    the time left), never slept; other keys pass; once the deadline has passed it opens."""
    clock = FakeClock()
    gate = RetryAfterGate(clock=clock)
    gate.block("h compute write", 3.0)
    gate.check("h compute read")
    with pytest.raises(ThrottledError) as caught:
        gate.check("h compute write")
    assert caught.value.quiet
    assert caught.value.code == "ClientThrottleHold"
    assert caught.value.retry_after == pytest.approx(3.0)
    clock.now += 3.0
    gate.check("h compute write")


def test_gate_never_shortens_a_deadline() -> None:
    """A shorter Retry-After does not shorten a longer one."""
    clock = FakeClock()
    gate = RetryAfterGate(clock=clock)
    gate.block("k", 30.0)
    gate.block("k", 1.0)
    with pytest.raises(ThrottledError) as caught:
        gate.check("k")
    assert caught.value.retry_after == pytest.approx(30.0)


def _write_request(paced: float = 0.0) -> PipelineRequest[HttpRequest]:
    request = PipelineRequest(HttpRequest("PUT", "https://arm/subscriptions/s"), PipelineContext(None))
    if paced:
        request.context[PACED_SECONDS] = paced
    return request


def test_mutation_pacing_is_slept_within_the_bound_and_refused_beyond_it() -> None:
    """A token wait within the bound (1 s for the whole attempt) is slept; a longer one gives the
    token back and refuses the write at once (quiet, ClientPacing, naming the wait), so that no
    write leaves long after its caller decided it; reads take no token."""
    clock = FakeClock()
    bucket = TokenBucket(rate=1.0, burst=1, clock=clock)
    slept: list[float] = []
    policy = MutationRateLimitPolicy(bucket, max_wait_seconds=1.0, sleep=slept.append)
    policy.on_request(_write_request())
    second = _write_request()
    policy.on_request(second)
    assert slept == [pytest.approx(1.0)]
    assert second.context[PACED_SECONDS] == pytest.approx(1.0)
    for _ in range(2):  # refunded: the second refusal names the same wait, not a longer one
        with pytest.raises(ThrottledError) as caught:
            policy.on_request(_write_request())
        assert caught.value.quiet
        assert caught.value.code == "ClientPacing"
        assert caught.value.retry_after == pytest.approx(2.0)
    clock.now += 1.4  # the next token in 0.6 s: within 1 s alone, not after 0.5 s spent elsewhere
    with pytest.raises(ThrottledError):  # 0.5 s of pacing already spent by another policy
        policy.on_request(_write_request(paced=0.5))
    policy.on_request(PipelineRequest(HttpRequest("GET", "https://arm/x"), PipelineContext(None)))
    assert slept == [pytest.approx(1.0)]


@pytest.mark.parametrize(
    ("method", "url", "expected_class", "expected_name"),
    [
        pytest.param(
            "GET",
            "https://127.0.0.1:8443/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/pool/virtualMachines/3?api-version=x",
            "127.0.0.1:8443 microsoft.compute read",
            "GET Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
            id="instance-get",
        ),
        pytest.param(
            "PUT",
            "https://ARM/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic",
            "arm microsoft.network write",
            "PUT Microsoft.Network/networkInterfaces",
            id="nic-put",
        ),
        pytest.param(
            "GET",
            "https://arm/subscriptions/s/resourcegroups/rg",
            "arm arm read",
            "GET subscriptions/resourcegroups",
            id="no-provider",
        ),
    ],
)
def test_request_classification(method: str, url: str, expected_class: str, expected_name: str) -> None:
    """Retry-After scope is host + provider + read/write; names keep types, drop resource names."""
    assert operation_class(method, url) == expected_class
    assert operation_name(method, url) == expected_name


def test_observe_call_counts_outcomes() -> None:
    """Each call is counted once, by operation and outcome word."""
    counter = InMemoryCallCounter()
    with observe_call(counter, "compute.get"):
        pass
    with pytest.raises(NotFoundError), observe_call(counter, "compute.get"):
        raise NotFoundError("gone")
    assert counter.count(kind="call", operation="compute.get", outcome="success") == 1
    assert counter.count(kind="call", operation="compute.get", outcome="not_found") == 1
    assert counter.count() == 2


# Inside the real SDK clients, against the emulator ------------------------------------------------

GROUP = "rg-throttle"


def _scale_set(emulator: ArmEmulator) -> ScaleSetId:
    emulator.estate.add_resource_group(GROUP)
    publish_test_images(emulator)
    vnet = emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.2.0.0/24"})
    return parse_scale_set_id(
        emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=vnet + "/subnets/nodes")
    )


def test_retry_after_gate_refuses_other_calls_until_the_deadline(arm_emulator: ArmEmulator) -> None:
    """A 429 naming 2 s: the call fails with ThrottledError; the next call of the same class, made
    at once, is refused unsent (quiet, naming the time left), and so is another client's (one
    budget per subscription and principal in one ``ArmBudgets``, as a manager's clouds share);
    nothing reaches ARM before the deadline, and a call made once it has passed goes through."""
    scale_set = _scale_set(arm_emulator)
    counter = InMemoryCallCounter()
    budgets = ArmBudgets()
    cloud = cloud_for(arm_emulator, observer=counter, retry_total=0, budgets=budgets)
    arm_emulator.faults.throttle("VirtualMachineScaleSets.get", times=1, retry_after=2)
    try:
        with pytest.raises(ThrottledError) as caught:
            cloud.compute.get_scale_set_image(scale_set)
        assert caught.value.retry_after == pytest.approx(2.0)
        with pytest.raises(ThrottledError) as held:
            cloud.compute.get_identities(scale_set)
        assert held.value.quiet
        assert held.value.code == "ClientThrottleHold"
        assert held.value.retry_after is not None
        assert 0 < held.value.retry_after <= 2.0
        # Another client of the same subscription and principal shares the budget: held too.
        other = cloud_for(arm_emulator, budgets=budgets)
        try:
            with pytest.raises(ThrottledError):
                other.compute.get_identities(scale_set)
            assert held.value.retry_at is not None
            time.sleep(max(0.0, held.value.retry_at - time.monotonic()))
            other.compute.get_identities(scale_set)
        finally:
            other.close()
    finally:
        cloud.close()
    throttled, later = arm_emulator.requests.entries("VirtualMachineScaleSets.get")
    assert throttled.status == 429
    assert later.status == 200
    assert later.monotonic - throttled.monotonic >= 2.0
    assert counter.count(kind="call", operation="compute.get_scale_set", outcome="throttled") == 2
    assert counter.count(kind="request", outcome="429") == 1


def test_no_concurrent_request_slips_through_the_gate(arm_emulator: ArmEmulator) -> None:
    """Six threads read while one 429 names 1 s: every attempt that reaches the gate after the
    client learned of the 429 is refused until the deadline (the throttled caller comes back at
    the time its refusal names, as the work queue does; azure-core does not retry a 429).

    Timed on the client side (when the gate learned, when each attempt passed it): an attempt
    that passed before the 429 was processed was already on its way, and under load the client
    may process the 429 well after the emulator sent it."""
    scale_set = _scale_set(arm_emulator)
    cloud = cloud_for(arm_emulator, retry_total=3)
    gate = cloud.clients.compute_gate
    learned: list[float] = []
    passed: list[float] = []  # when an attempt passed the gate
    check, block = gate.check, gate.block

    def recording_check(key: str) -> None:
        check(key)
        passed.append(time.monotonic())

    def recording_block(key: str, seconds: float) -> None:
        learned.append(time.monotonic())
        block(key, seconds)

    gate.check = recording_check  # type: ignore[method-assign]
    gate.block = recording_block  # type: ignore[method-assign]
    arm_emulator.faults.add_latency(0.05, "VirtualMachineScaleSets.get")
    arm_emulator.faults.throttle("VirtualMachineScaleSets.get", times=1, retry_after=1)
    try:

        def read_until_it_goes_through() -> None:
            for _ in range(10):
                try:
                    cloud.compute.get_identities(scale_set)
                    return
                except ThrottledError as error:
                    time.sleep(max(0.0, (error.retry_at or 0.0) - time.monotonic()))

        threads = [threading.Thread(target=read_until_it_goes_through) for _ in range(6)]
        for thread in threads:
            thread.start()
            time.sleep(0.02)
        for thread in threads:
            thread.join(timeout=30)
    finally:
        cloud.close()
    entries = arm_emulator.requests.entries("VirtualMachineScaleSets.get")
    throttled = next(entry for entry in entries if entry.status == 429)
    assert len(learned) == 1
    after = [moment for moment in passed if moment > learned[0]]
    assert after, "the throttled caller should have come back through the gate"
    assert all(moment >= learned[0] + 1.0 for moment in after), after
    assert max(entry.monotonic for entry in entries) >= throttled.monotonic + 1.0
    assert sum(1 for entry in entries if entry.status == 200) == 6


def test_mutation_token_bucket_paces_writes_not_reads(arm_emulator: ArmEmulator) -> None:
    """At 5 writes per second with burst 1, four PATCHes are spread over >= 0.6 s; reads are free."""
    scale_set = _scale_set(arm_emulator)
    cloud = cloud_for(arm_emulator, mutation_qps=5.0, mutation_burst=1)
    try:
        for version in range(4):
            cloud.compute.set_scale_set_image(
                scale_set, ImageReference(publisher="p", offer="o", sku="s", version=f"1.0.{version}")
            )
        started = time.monotonic()
        for _ in range(10):
            cloud.compute.get_scale_set_image(scale_set)
        reads_took = time.monotonic() - started
    finally:
        cloud.close()
    writes = arm_emulator.requests.entries("VirtualMachineScaleSets.update")
    assert len(writes) == 4
    assert writes[-1].monotonic - writes[0].monotonic >= 0.6 - 0.02
    assert reads_took < 1.0


def test_every_attempt_and_call_is_counted(arm_emulator: ArmEmulator) -> None:
    """One 503, then (after the target's backoff) success: two request events (503, 200), one
    failed and one successful call event."""
    scale_set = _scale_set(arm_emulator)
    counter = InMemoryCallCounter()
    cloud = cloud_for(arm_emulator, observer=counter)
    arm_emulator.faults.server_error("VirtualMachineScaleSets.get", times=1, status=503)
    try:
        with pytest.raises(CloudError):
            cloud.compute.get_scale_set_image(scale_set)
        time.sleep(0.3)
        cloud.compute.get_scale_set_image(scale_set)
    finally:
        cloud.close()
    operation = "GET Microsoft.Compute/virtualMachineScaleSets"
    assert counter.count(kind="request", operation=operation, outcome="503") == 1
    assert counter.count(kind="request", operation=operation, outcome="200") == 1
    assert counter.count(kind="call", operation="compute.get_scale_set", outcome="success") == 1
    assert counter.count(kind="call", operation="compute.get_scale_set", outcome="error") == 1


def test_a_write_that_waited_for_a_token_is_refused_by_a_new_retry_after(arm_emulator: ArmEmulator) -> None:
    """The mutation token is taken before the Retry-After gate is checked: a write that was
    waiting for a token when another write's 429 came back is refused unsent (a plan made before
    the hold is never sent after it), not sent as soon as its token arrives."""
    scale_set = _scale_set(arm_emulator)
    cloud = cloud_for(arm_emulator, retry_total=0, mutation_qps=1.0, mutation_burst=1)
    arm_emulator.faults.add_latency(0.3, "VirtualMachineScaleSets.update")
    arm_emulator.faults.throttle("VirtualMachineScaleSets.update", times=1, retry_after=2)
    image = ImageReference.parse("canonical:ubuntu:22_04-lts:latest")
    outcomes: list[str] = []

    def write() -> None:
        try:
            cloud.compute.set_scale_set_image(scale_set, image)
            outcomes.append("written")
        except ThrottledError as error:
            outcomes.append(str(error.code))

    try:
        first = threading.Thread(target=write)
        first.start()
        time.sleep(0.05)  # the first write holds the only token and is on the wire
        second = threading.Thread(target=write)
        second.start()  # waits about 1 s for a token; the 429 comes back meanwhile
        first.join(timeout=30)
        second.join(timeout=30)
    finally:
        cloud.close()
    assert outcomes[0] == "TooManyRequests"
    assert outcomes[1] in {"ClientThrottleHold", "ClientPacing"}
    (throttled,) = arm_emulator.requests.entries("VirtualMachineScaleSets.update")
    assert throttled.status == 429
