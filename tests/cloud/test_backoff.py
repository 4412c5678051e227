"""TargetBackoff on a fake clock: a failure of a target doubles its backoff up to the cap; a
terminal (400-class) answer doubles from 2 s to 2 minutes; throttling
backs a target off for the class hold only and is cut short by any success of the same access,
while failure backoffs of other targets keep running."""

from __future__ import annotations

import pytest

from nodewright.cloud.backoff import BackingOffError, TargetBackoff
from nodewright.cloud.errors import (
    CloudError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    SubnetFullError,
    ThrottledError,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def server_error() -> CloudError:
    return CloudError("Internal error", status_code=500, code="InternalServerError")


def throttled(retry_after: float | None) -> ThrottledError:
    return ThrottledError("Throttled", retry_after=retry_after, code="OperationNotAllowed")


def client_hold(seconds: float) -> ThrottledError:
    return ThrottledError("Held", retry_after=seconds, status_code=None, code="ClientThrottleHold")


def backing_off(backoff: TargetBackoff, target: str, access: str = "write") -> bool:
    try:
        backoff.check(target, access)
    except BackingOffError:
        return True
    return False


def test_failures_of_a_target_double_up_to_the_cap() -> None:
    """5 s, 10, 20, 40, then the one-minute cap; a success of the target ends it."""
    clock = FakeClock()
    backoff = TargetBackoff(initial_seconds=5.0, max_seconds=60.0, clock=clock)
    delays = []
    for _ in range(6):
        delays.append(backoff.failed("vm-a", "write", server_error()))
        clock.now += delays[-1]
    assert delays == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    backoff.failed("vm-a", "write", server_error())
    assert backing_off(backoff, "vm-a")
    backoff.succeeded("vm-a", "write")
    assert not backing_off(backoff, "vm-a")


def test_throttling_backs_a_target_off_for_the_class_hold_without_growing() -> None:
    """Six throttled writes in a row of one target (the budget refusing them during a 10 s hold,
    or 429s while the budget holds 30 s): each backs the target off for that hold, never for the
    doubled per-target delay that a failure would earn (5, 10, ... 60 s)."""
    clock = FakeClock()
    hold = {"write": 30.0}
    backoff = TargetBackoff(initial_seconds=5.0, clock=clock, class_hold=lambda access: hold.get(access, 0.0))
    refused = [backoff.failed("vm-a", "write", client_hold(10.0)) for _ in range(6)]
    assert refused == [10.0] * 6
    without_retry_after = [backoff.failed("vm-a", "write", throttled(None)) for _ in range(6)]
    assert without_retry_after == [30.0] * 6
    hold["write"] = 0.0
    assert backoff.failed("vm-a", "write", throttled(None)) == 5.0  # no hold known: the initial delay
    assert backoff.failed("vm-a", "read", throttled(None)) == 0.0  # reads wait in the budget's hold


def test_a_success_cuts_throttle_backoffs_short_but_not_failure_backoffs() -> None:
    """Two targets throttled (30 s), one failing with 500s: once a write of another target goes
    through, the throttled two may write again at once; the failing one still backs off, and its
    next failure keeps doubling from where it was."""
    clock = FakeClock()
    backoff = TargetBackoff(initial_seconds=5.0, clock=clock, class_hold=lambda _access: 30.0)
    backoff.failed("vm-a", "write", throttled(None))
    backoff.failed("vm-b", "write", client_hold(30.0))
    backoff.failed("vm-c", "write", server_error())
    clock.now += 5.0
    backoff.failed("vm-c", "write", server_error())  # 10 s now
    backoff.failed("vm-d", "read", server_error())
    clock.now += 1.0
    assert backing_off(backoff, "vm-a")
    assert backing_off(backoff, "vm-b")
    backoff.succeeded("vm-e", "read")  # a read proves nothing about the writes class
    assert backing_off(backoff, "vm-a")
    backoff.succeeded("vm-e", "write")
    assert not backing_off(backoff, "vm-a")
    assert not backing_off(backoff, "vm-b")
    assert backing_off(backoff, "vm-c")
    assert backing_off(backoff, "vm-d", "read")
    clock.now += 10.0
    assert backoff.failed("vm-c", "write", server_error()) == 20.0


def test_throttling_between_failures_keeps_the_failure_count() -> None:
    """A target that failed twice, then was throttled and released, backs off 20 s at its next
    failure: throttling neither counts as a failure nor forgives earlier ones."""
    clock = FakeClock()
    backoff = TargetBackoff(initial_seconds=5.0, clock=clock)
    assert backoff.failed("vm-a", "write", server_error()) == 5.0
    clock.now += 5.0
    assert backoff.failed("vm-a", "write", server_error()) == 10.0
    clock.now += 10.0
    backoff.failed("vm-a", "write", client_hold(30.0))
    backoff.succeeded("vm-b", "write")
    assert not backing_off(backoff, "vm-a")
    assert backoff.failed("vm-a", "write", server_error()) == 20.0


@pytest.mark.parametrize(
    "error",
    [NotFoundError("gone", status_code=404, code="NotFound")],
    ids=["not-found"],
)
def test_errors_the_caller_handles_start_nothing(error: CloudError) -> None:
    """A 404 is the caller's to handle: no backoff."""
    backoff = TargetBackoff(clock=FakeClock())
    assert backoff.failed("vm-a", "write", error) == 0.0
    assert not backing_off(backoff, "vm-a")


@pytest.mark.parametrize(
    "error",
    [
        SubnetFullError("Subnet nodes has no free address", status_code=400, code="SubnetIsFull"),
        LimitExceededError("Too many identities", status_code=400, code="TooManyUserAssignedIdentities"),
        InvalidRequestError("Property 'x' is invalid", status_code=400, code="InvalidParameter"),
    ],
    ids=["subnet-full", "quota", "invalid-parameter"],
)
def test_terminal_answers_back_off_from_seconds_to_minutes(error: CloudError) -> None:
    """A 400-class answer (the same request cannot succeed) backs its target's writes off 2 s,
    doubling per further answer up to 2 minutes: at most 5 writes in the first minute, then one
    per 2 minutes. The refusal names ARM's code and message; only a success of the target ends it."""
    clock = FakeClock()
    backoff = TargetBackoff(clock=clock)
    delays, sent, refusals = [], [], []
    started = clock.now
    while clock.now - started < 3600:
        try:
            backoff.check("nic-a", "write")
        except BackingOffError as refused:
            refusals.append(refused)
            clock.now += 0.5  # a caller asking again every half second
            continue
        sent.append(clock.now - started)
        delays.append(backoff.failed("nic-a", "write", error))
    assert {(r.terminal, r.code, r.last_message) for r in refusals} == {(True, error.code, error.message)}
    assert delays[:8] == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 120.0, 120.0]
    assert max(len([t for t in sent if start <= t < start + 60]) for start in sent) <= 5
    backoff.succeeded("nic-b", "write")
    assert backing_off(backoff, "nic-a"), "a success of another target ends no terminal backoff"
    backoff.succeeded("nic-a", "write")
    assert not backing_off(backoff, "nic-a")
    assert backoff.failed("nic-a", "write", error) == 2.0
