"""Sizing a pool for pods about to arrive, and the free IPs to wait for: a pool sized for the
resident and incoming pods always shows the free IPs the wait asks for (the heir-network gate
and IPAM's pre-sizing agree by construction; issue 32's deadlock was 16 IPs against 18 needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodewright.ipam import (
    IncomingNeed,
    PoolScaler,
    demand_with_incoming,
    incoming_need,
    pool_target,
    spare_ips,
)
from tests.ipam.strategies import PROPERTY, scalers

counts = st.integers(min_value=0, max_value=300)
DEFAULTS = PoolScaler(16, 50, 250)


@pytest.mark.parametrize(
    ("scaler", "expected"),
    [
        pytest.param(PoolScaler(16, 50, 250), 8, id="cns-defaults"),
        pytest.param(PoolScaler(4, 50, 250), 2, id="small-batch"),
        pytest.param(PoolScaler(5, 50, 250), 3, id="rounded-up"),
        pytest.param(PoolScaler(16, 0, 250), 0, id="no-buffer"),
        pytest.param(PoolScaler(10, 250, 250), 25, id="buffer-beyond-a-batch"),
    ],
)
def test_spare_ips_table(scaler: PoolScaler, expected: int) -> None:
    """The spare is ceil(batch * requestThresholdPercent / 100)."""
    assert spare_ips(scaler) == expected


@pytest.mark.parametrize(
    ("resident", "incoming", "scaler", "expected"),
    [
        pytest.param(0, 10, DEFAULTS, IncomingNeed(18, 18, True, 250), id="issue-32-ten-pods"),
        pytest.param(0, 20, DEFAULTS, IncomingNeed(28, 28, True, 250), id="twenty-pods"),
        pytest.param(3, 10, DEFAULTS, IncomingNeed(21, 18, True, 250), id="resident-pods"),
        pytest.param(0, 0, DEFAULTS, IncomingNeed(8, 8, True, 250), id="nothing-moves"),
        pytest.param(0, 245, DEFAULTS, IncomingNeed(250, 250, True, 250), id="buffer-capped"),
        pytest.param(10, 245, DEFAULTS, IncomingNeed(250, 240, False, 250), id="cannot-fit"),
        pytest.param(260, 5, DEFAULTS, IncomingNeed(250, 0, False, 250), id="over-max-already"),
    ],
)
def test_incoming_need_table(
    resident: int, incoming: int, scaler: PoolScaler, expected: IncomingNeed
) -> None:
    """Resident and incoming pods plus the spare, capped at the maximum; ``fits`` says whether
    the pods fit under the maximum at all."""
    assert incoming_need(resident=resident, incoming=incoming, scaler=scaler) == expected


@pytest.mark.parametrize(
    ("resident", "incoming", "pool"),
    [
        pytest.param(0, 10, 32, id="ten-pods-32-ips"),
        pytest.param(0, 20, 32, id="twenty-pods-32-ips"),
        pytest.param(2, 9, 32, id="daemonsets-and-nine"),
    ],
)
def test_a_heir_sized_for_its_incoming_pods_holds_them(resident: int, incoming: int, pool: int) -> None:
    """The pool IPAM sizes with the incoming pods is what the wait asks for (16 would not be)."""
    scaler = PoolScaler(16, 50, 250)
    target = pool_target(demand_with_incoming(resident, incoming), scaler)
    assert target == pool
    need = incoming_need(resident=resident, incoming=incoming, scaler=scaler)
    assert target >= need.pool
    assert pool_target(resident, scaler) < need.pool, "sized from its own pods only, it would wait for ever"


@PROPERTY
@given(scaler=scalers, resident=counts, incoming=counts)
def test_the_sized_pool_always_meets_the_need(scaler: PoolScaler, resident: int, incoming: int) -> None:
    """For every scaler and count, the pool sized for resident + incoming pods holds at least
    what the wait needs: pre-sizing and the gate cannot wait on each other."""
    need = incoming_need(resident=resident, incoming=incoming, scaler=scaler)
    target = pool_target(demand_with_incoming(resident, incoming), scaler)
    assert target >= need.pool
    assert need.pool <= need.capacity
    assert need.free == max(need.pool - resident, 0)
    assert need.fits == (resident + incoming <= scaler.max_ip_count)


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        demand_with_incoming(-1, 3)
