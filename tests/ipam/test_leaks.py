"""Leaked IP configurations are released only after staying unaccounted for the whole grace period
(default 10 minutes); coming back into use resets their clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodewright.ipam import DEFAULT_LEAK_GRACE_SECONDS, LeakTracker
from tests.ipam.strategies import PROPERTY


def test_default_grace_is_ten_minutes() -> None:
    """The grace period defaults to Baidu's 10 minutes."""
    assert DEFAULT_LEAK_GRACE_SECONDS == 600.0
    assert LeakTracker().grace_seconds == 600.0


@pytest.mark.parametrize(
    ("observations", "expected"),
    [
        pytest.param([(0.0, {"a"}), (599.0, {"a"})], (), id="inside-grace"),
        pytest.param([(0.0, {"a"}), (600.0, {"a"})], ("a",), id="exactly-at-grace"),
        pytest.param([(0.0, {"a"}), (300.0, set()), (700.0, {"a"})], (), id="back-in-use-resets-clock"),
        pytest.param(
            [(0.0, {"a"}), (300.0, {"a", "b"}), (650.0, {"a", "b"})], ("a",), id="each-name-own-clock"
        ),
        pytest.param([(0.0, {"b", "a"}), (900.0, {"a", "b"})], ("a", "b"), id="sorted-result"),
    ],
)
def test_observe_table(observations: list[tuple[float, set[str]]], expected: tuple[str, ...]) -> None:
    """observe returns the names unaccounted for the whole grace period at the last observation."""
    tracker = LeakTracker()
    result: tuple[str, ...] = ()
    for now, unaccounted in observations:
        result = tracker.observe("nic", unaccounted, now)
    assert result == expected


def test_nics_are_tracked_apart_and_can_be_forgotten() -> None:
    """Names are per NIC; forgetting a name or a whole NIC drops its clock; next_due says when to
    look again."""
    tracker = LeakTracker(grace_seconds=10)
    tracker.observe("nic-1", {"a", "b"}, 0.0)
    tracker.observe("nic-2", {"a"}, 5.0)
    assert tracker.next_due("nic-1") == 10.0
    assert tracker.next_due("nic-2") == 15.0
    tracker.forget("nic-1", ["a"])
    assert tracker.tracked("nic-1") == {"b": 0.0}
    tracker.forget("nic-2")
    assert tracker.next_due("nic-2") is None
    assert tracker.observe("nic-2", {"a"}, 20.0) == ()


def test_negative_grace_is_refused() -> None:
    """A negative grace period is a configuration error."""
    with pytest.raises(ValueError, match="grace"):
        LeakTracker(grace_seconds=-1)


@PROPERTY
@given(
    steps=st.lists(
        st.tuples(st.floats(min_value=0, max_value=400), st.sets(st.sampled_from("abcde"))), max_size=20
    )
)
def test_never_collects_before_a_full_grace_period(steps: list[tuple[float, set[str]]]) -> None:
    """Whatever the sequence of observations, a name is returned only if it was unaccounted at
    every observation of the last grace period (continuously since its first-seen time)."""
    tracker = LeakTracker(grace_seconds=600)
    now = 0.0
    streak_start: dict[str, float] = {}
    for delay, unaccounted in steps:
        now += delay
        streak_start = {n: streak_start.get(n, now) for n in unaccounted}
        ready = tracker.observe("nic", unaccounted, now)
        assert set(ready) <= unaccounted
        for n in ready:
            assert now - streak_start[n] >= 600
