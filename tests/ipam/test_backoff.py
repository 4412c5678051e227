"""Per-NIC cloud protection: batch halving on capacity errors down to one, then exhaustion and
backoff; backoff 2 s x 2^n capped; success clears it and regrows a reduced add limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodewright.ipam import NicGuard, backoff_delay
from tests.ipam.strategies import PROPERTY


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        pytest.param(0, 0.0, id="none"),
        pytest.param(1, 2.0, id="first"),
        pytest.param(2, 4.0, id="second"),
        pytest.param(5, 32.0, id="fifth"),
        pytest.param(6, 60.0, id="capped"),
        pytest.param(10_000, 60.0, id="huge-count-no-overflow"),
    ],
)
def test_backoff_delay_table(failures: int, expected: float) -> None:
    """The delay after n consecutive failures is 2 s x 2^(n-1), capped at 60 s."""
    assert backoff_delay(failures) == expected


def test_capacity_errors_halve_then_mark_exhausted() -> None:
    """Baidu's sequence: 16 fails -> 8 -> 4 -> 2 -> 1 (no waiting), 1 fails -> exhausted, backed off."""
    guard = NicGuard()
    attempts = []
    now = 100.0
    wanted = 16
    while not guard.exhausted:
        attempt = guard.limit(wanted)
        attempts.append(attempt)
        assert guard.may_write(now)
        guard = guard.after_capacity_error(attempt, now)
    assert attempts == [16, 8, 4, 2, 1]
    assert not guard.may_write(now + 1.9)
    assert guard.may_write(now + 2.0)
    assert guard.retry_in(now) == 2.0


def test_success_clears_exhaustion_and_regrows_the_limit() -> None:
    """An add that goes through clears backoff and exhaustion and doubles the limit each time,
    back to no limit at the NIC's capacity; a removal alone leaves the limit and exhaustion."""
    guard = NicGuard().after_capacity_error(16, 0.0).after_capacity_error(8, 0.0)
    assert guard.add_limit == 4
    exhausted = NicGuard(add_limit=1).after_capacity_error(1, 0.0)
    assert exhausted.after_success(added=0).exhausted
    assert exhausted.after_success(added=0).may_write(0.0)
    limits = []
    for _ in range(9):
        guard = guard.after_success(added=1)
        limits.append(guard.add_limit)
    assert limits == [8, 16, 32, 64, 128, None, None, None, None]
    assert not exhausted.after_success(added=1).exhausted


def test_other_failures_back_off_and_keep_the_limit() -> None:
    """A throttled or failed write backs off exponentially without touching the add limit."""
    guard = NicGuard(add_limit=4)
    now = 0.0
    waits = []
    for _ in range(4):
        guard = guard.after_failure(now)
        waits.append(guard.retry_in(now))
    assert waits == [2.0, 4.0, 8.0, 16.0]
    assert guard.add_limit == 4


@PROPERTY
@given(
    events=st.lists(
        st.tuples(st.sampled_from(["capacity", "failure", "success", "removed"]), st.integers(1, 300)),
        max_size=30,
    ),
    wanted=st.integers(min_value=1, max_value=255),
)
def test_guard_invariants(events: list[tuple[str, int]], wanted: int) -> None:
    """Under any event sequence: the limit is at least 1 when set, limit(wanted) never exceeds
    wanted, the wait never exceeds the cap, exhaustion only follows a failed single-IP add."""
    guard = NicGuard()
    now = 0.0
    for event, size in events:
        now += 1.0
        before = guard
        attempt = guard.limit(size)
        if event == "capacity":
            guard = guard.after_capacity_error(attempt, now)
            if guard.exhausted and not before.exhausted:
                assert attempt == 1
        elif event == "failure":
            guard = guard.after_failure(now)
        elif event == "success":
            guard = guard.after_success(added=attempt)
        else:
            guard = guard.after_success(added=0)
        assert guard.add_limit is None or guard.add_limit >= 1
        assert 1 <= guard.limit(wanted) <= wanted
        assert guard.retry_in(now) <= guard.cap_seconds
