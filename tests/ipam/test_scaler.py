"""The pool target (Azure CNS v2 scaling function) and scaler normalisation: batch-aligned unless
capped, never below demand unless capped, never above max, exact at batch boundaries."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodewright.ipam import MAX_SECONDARY_IPS_PER_NIC, PoolScaler, pool_target
from tests.ipam.strategies import PROPERTY, scalers

demands = st.integers(min_value=0, max_value=400)


@pytest.mark.parametrize(
    ("scaler", "demand", "exhausted", "expected"),
    [
        pytest.param(PoolScaler(16, 50, 250), 25, False, 48, id="reference-example-25-pods"),
        pytest.param(PoolScaler(16, 50, 250), 0, False, 16, id="empty-node-holds-one-batch"),
        pytest.param(PoolScaler(16, 50, 250), 8, False, 16, id="half-batch-spare-fits-exactly"),
        pytest.param(PoolScaler(16, 50, 250), 9, False, 32, id="one-past-the-buffer-adds-a-batch"),
        pytest.param(PoolScaler(16, 0, 250), 16, False, 16, id="no-buffer-on-a-boundary"),
        pytest.param(PoolScaler(16, 100, 250), 16, False, 32, id="full-buffer-on-a-boundary"),
        pytest.param(PoolScaler(16, 50, 250), 240, False, 250, id="capped-at-max"),
        pytest.param(PoolScaler(16, 50, 250), 300, False, 250, id="demand-above-max"),
        pytest.param(PoolScaler(16, 50, 250), 25, True, 26, id="exhausted-one-spare"),
        pytest.param(PoolScaler(16, 50, 250), 250, True, 250, id="exhausted-capped"),
        pytest.param(PoolScaler(1, 0, 250), 7, False, 7, id="batch-one-no-buffer"),
        pytest.param(PoolScaler(10, 250, 250), 0, False, 30, id="buffer-beyond-a-batch"),
    ],
)
def test_pool_target_table(scaler: PoolScaler, demand: int, exhausted: bool, expected: int) -> None:
    """pool_target gives CNS v2's documented values for typical and boundary inputs."""
    assert pool_target(demand, scaler, exhausted=exhausted) == expected


@PROPERTY
@given(demand=demands, scaler=scalers)
def test_target_is_batch_aligned_unless_capped(demand: int, scaler: PoolScaler) -> None:
    """The target is a whole number of batches, or exactly the maximum."""
    target = pool_target(demand, scaler)
    assert target % scaler.batch_size == 0 or target == scaler.max_ip_count


@PROPERTY
@given(demand=demands, scaler=scalers, exhausted=st.booleans())
def test_target_never_above_max(demand: int, scaler: PoolScaler, exhausted: bool) -> None:
    """The target never exceeds the maximum, exhausted or not."""
    assert pool_target(demand, scaler, exhausted=exhausted) <= scaler.max_ip_count


@PROPERTY
@given(demand=demands, scaler=scalers, exhausted=st.booleans())
def test_target_covers_demand_and_buffer_unless_at_max(
    demand: int, scaler: PoolScaler, exhausted: bool
) -> None:
    """Below the maximum the target holds every pod plus at least the buffer (percent of a batch)."""
    target = pool_target(demand, scaler, exhausted=exhausted)
    effective = scaler.exhausted() if exhausted else scaler
    if target < scaler.max_ip_count:
        assert target >= demand
        assert Fraction(target - demand) >= Fraction(
            effective.request_threshold_percent * effective.batch_size, 100
        )


@PROPERTY
@given(demand=demands, scaler=scalers)
def test_target_is_the_smallest_such_multiple(demand: int, scaler: PoolScaler) -> None:
    """One batch less would not cover demand plus buffer: the pool is never a batch too big."""
    target = pool_target(demand, scaler)
    smaller = target - scaler.batch_size
    if target < scaler.max_ip_count and smaller >= 0:
        assert Fraction(smaller) < demand + Fraction(
            scaler.request_threshold_percent * scaler.batch_size, 100
        )


@PROPERTY
@given(demand=demands, scaler=scalers)
def test_target_equals_the_exact_formula(demand: int, scaler: PoolScaler) -> None:
    """The integer arithmetic equals min(max, batch * ceil(buffer + demand/batch)) over rationals."""
    batch = scaler.batch_size
    exact = batch * math.ceil(Fraction(scaler.request_threshold_percent, 100) + Fraction(demand, batch))
    assert pool_target(demand, scaler) == min(scaler.max_ip_count, exact)


@PROPERTY
@given(demand=demands, more=st.integers(min_value=0, max_value=50), scaler=scalers)
def test_target_is_monotonic_in_demand(demand: int, more: int, scaler: PoolScaler) -> None:
    """More pods never shrink the target."""
    assert pool_target(demand + more, scaler) >= pool_target(demand, scaler)


@PROPERTY
@given(demand=demands, scaler=scalers)
def test_exhausted_target_is_demand_plus_one(demand: int, scaler: PoolScaler) -> None:
    """On an exhausted subnet the node holds exactly one spare IP (capped at the maximum)."""
    assert pool_target(demand, scaler, exhausted=True) == min(scaler.max_ip_count, demand + 1)


def test_negative_demand_is_refused() -> None:
    """Demand is a pod count: a negative one is a caller bug, not something to round."""
    with pytest.raises(ValueError, match="demand"):
        pool_target(-1, PoolScaler())


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param((16, 50, 250), PoolScaler(16, 50, 250), id="cns-defaults-unchanged"),
        pytest.param((16, 50, 0), PoolScaler(16, 50, 250), id="max-zero-means-default"),
        pytest.param((16, 50, -3), PoolScaler(16, 50, 250), id="negative-max-means-default"),
        pytest.param((16, 50, 1000), PoolScaler(16, 50, MAX_SECONDARY_IPS_PER_NIC), id="max-clamped-to-nic"),
        pytest.param((0, 50, 250), PoolScaler(1, 50, 250), id="batch-zero-becomes-one"),
        pytest.param((300, 50, 30), PoolScaler(30, 50, 30), id="batch-clamped-to-max"),
        pytest.param((16, -50, 250), PoolScaler(16, 50, 250), id="negative-threshold-by-magnitude"),
    ],
)
def test_normalized_reads_wire_values_like_cns(raw: tuple[int, int, int], expected: PoolScaler) -> None:
    """Raw status.scaler values become a usable scaler the way CNS reads them (plus the NIC cap)."""
    batch, percent, maximum = raw
    scaler = PoolScaler.normalized(batch_size=batch, request_threshold_percent=percent, max_ip_count=maximum)
    assert (scaler.batch_size, scaler.request_threshold_percent, scaler.max_ip_count) == (
        expected.batch_size,
        expected.request_threshold_percent,
        expected.max_ip_count,
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param({"batch_size": 0}, "batch_size", id="batch-zero"),
        pytest.param({"batch_size": 300}, "batch_size", id="batch-above-max"),
        pytest.param({"max_ip_count": 0}, "max_ip_count", id="max-zero"),
        pytest.param({"request_threshold_percent": -1}, "request_threshold_percent", id="negative-threshold"),
    ],
)
def test_scaler_refuses_unnormalised_values(arguments: dict[str, int], message: str) -> None:
    """A PoolScaler built directly must already be normalised; bad values raise at once."""
    with pytest.raises(ValueError, match=message):
        PoolScaler(**arguments)
