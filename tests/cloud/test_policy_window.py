"""``PolicyWindow``: a Compute throttling policy mirrored as the sliding window it is. A burst is
given back when it ages out of the window (a token bucket refilled at capacity over window would
trickle for ever after it); what ARM reports beyond our own sends is someone else's, for a window.
Pure: the clock is passed in."""

from __future__ import annotations

import pytest

from nodewright.cloud.budget import ARM_LIMITS, ArmBudget, ClassLimit
from nodewright.cloud.policy_window import PolicyWindow


def test_a_burst_comes_back_when_it_leaves_the_window() -> None:
    window = PolicyWindow(capacity=10, window=180.0)
    assert [window.take(0.0, reserve=1) for _ in range(9)] == [0.0] * 9
    assert window.take(1.0, reserve=1) == pytest.approx(179.0)  # the first send leaves at 180
    # At 181 the nine are gone, the tenth (counted at 180) stays: eight more may go at once,
    # where a bucket refilled at 10 per 180 s would have given back one.
    assert [window.take(181.0, reserve=1) for _ in range(8)] == [0.0] * 8
    assert window.take(181.0, reserve=1) > 0


def test_what_arm_counts_beyond_our_sends_is_someone_elses_for_a_window() -> None:
    window = PolicyWindow(capacity=10, window=180.0)
    window.take(0.0, reserve=1)
    window.take(0.0, reserve=1)
    window.report(1.0, remaining=4)  # 6 counted: 2 ours, 4 someone else's
    assert window.available(1.0) == 4
    assert window.available(179.0) == 4
    assert window.available(181.0) == 10  # ours aged out at 180, theirs assumed gone at 181
    window.report(200.0, remaining=10)
    assert window.available(200.0) == 10


def test_a_request_not_sent_is_given_back_and_a_429_holds_the_policy() -> None:
    window = PolicyWindow(capacity=5, window=180.0)
    assert window.take(0.0, reserve=1) == 0.0
    window.give_back(0.0)
    assert window.available(0.0) == 5
    window.exhaust(10.0, seconds=30.0)
    assert window.available(20.0) <= 0
    assert window.take(20.0, reserve=1) == pytest.approx(20.0)  # the hold's end, at 40
    assert window.available(41.0) == 4  # the one counted at 40


def test_the_budget_paces_a_compute_policy_by_its_window() -> None:
    """Through ``ArmBudget`` (a writes class too large to matter): a policy reported with 599
    left lets 539 go at once (a reserve of 60 kept); reported nearly spent by them, it gives them
    all back once they aged out of the 3-minute window. (A bucket refilled at 600 per 3 min,
    lowered to each report, gave back 30 s x 3.3 = 100 at that point.)"""
    now = [0.0]
    budget = ArmBudget(
        "sub", limits={**ARM_LIMITS, "writes": ClassLimit(10_000, 1_000.0)}, clock=lambda: now[0]
    )
    header = {"x-ms-ratelimit-remaining-resource": "Microsoft.Compute/PutVMScaleSetVM3Min;599"}
    budget.learn("PUT", "put-vm", 200, header, None)  # capacity 600, one counted: not ours
    assert _burst(budget) == 539
    now[0] = 170.0  # still in the window: ARM says 60 left, all the others counted are ours
    budget.learn(
        "PUT",
        "put-vm",
        200,
        {"x-ms-ratelimit-remaining-resource": "Microsoft.Compute/PutVMScaleSetVM3Min;60"},
        None,
    )
    assert _burst(budget) == 0
    now[0] = 200.0  # the burst has left the window: it comes back whole, not 30 s x 3.3
    assert _burst(budget) == 539  # the one request not ours is assumed in the window until 350


def _burst(budget: ArmBudget) -> int:
    """How many PUTs go at once (the first that would wait is given back)."""
    free = 0
    while budget.wait_seconds("PUT", "put-vm") == 0.0:
        free += 1
    budget.refund("PUT", "put-vm")
    return free
