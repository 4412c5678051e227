"""The whole requested-count rule (``ipam.requested_count``): properties over random pools and
rules, then tables. Followed counts are bounded by the node's usable maximum; computed counts
never fall below what the node holds besides pending names, never mark an IP in use, mark
nothing before the surplus has lasted the delay nor for a consumer without release, count prefix
blocks in addresses; the surplus clock starts, lasts and stops with the surplus; the NIC entry
count adds names still settling and turns into blocks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from nodewright.ipam import (
    MAX_SECONDARY_IPS_PER_NIC,
    CountFacts,
    CountRule,
    PoolScaler,
    RequestedCount,
    nic_entries_wanted,
    pool_target,
    requested_count,
)
from tests.ipam.strategies import PROPERTY, assignment_lists, scalers

NOW = 1_000.0


@dataclass(frozen=True)
class Case:
    rule: CountRule
    facts: CountFacts

    def count(self) -> RequestedCount:
        return requested_count(self.rule, self.facts)


@st.composite
def cases(draw: st.DrawFn, *, computes: bool = True, blocks: bool = False) -> Case:
    assignments = draw(assignment_lists(max_size=40))
    names = [n for n, _ in assignments]
    addresses = [a for _, a in assignments]
    rule = CountRule(
        scaler=draw(scalers),
        computes=computes,
        headroom=draw(st.integers(min_value=0, max_value=20)),
        scale_down_delay_seconds=draw(st.sampled_from([0.0, 30.0, 600.0])),
        may_release=draw(st.booleans()),
        blocks=blocks,
    )
    facts = CountFacts(
        demand=draw(st.integers(min_value=0, max_value=300)),
        assignments=assignments,
        in_use_addresses=set(draw(st.lists(st.sampled_from(addresses)) if addresses else st.just([]))),
        requested_ip_count=draw(st.integers(min_value=-5, max_value=400)),
        ips_not_in_use=draw(st.lists(st.sampled_from(names)) if names else st.just([])),
        exhausted=draw(st.booleans()),
        surplus_since=draw(st.none() | st.floats(min_value=0.0, max_value=NOW)),
        now=NOW,
    )
    return Case(rule, facts)


@PROPERTY
@given(case=cases(computes=False))
def test_a_followed_count_is_the_stored_one_within_the_bound(case: Case) -> None:
    count = case.count()
    stored = case.facts.requested_ip_count
    assert count.requested == stored
    assert count.request.ips_not_in_use == tuple(dict.fromkeys(case.facts.ips_not_in_use))
    assert count.surplus_since == case.facts.surplus_since
    maximum = min(case.rule.scaler.max_ip_count, MAX_SECONDARY_IPS_PER_NIC)
    if stored < 0:
        assert (count.allocate, count.problem and count.problem[0]) == (None, "InvalidRequestedIPCount")
    elif stored > maximum:
        assert (count.allocate, count.problem and count.problem[0]) == (
            maximum,
            "RequestedIPCountAboveMaximum",
        )
    else:
        assert (count.allocate, count.problem) == (stored, None)


@PROPERTY
@given(case=cases())
def test_a_computed_count_marks_only_free_ips_and_never_goes_below_what_is_held(case: Case) -> None:
    count = case.count()
    facts, request = case.facts, case.count().request
    address_of = dict(facts.assignments)
    assert not {address_of[n] for n in request.newly_marked} & set(facts.in_use_addresses)
    pending = set(request.ips_not_in_use)
    held = len([n for n, _ in facts.assignments if n not in pending])
    target = pool_target(facts.demand + case.rule.headroom, case.rule.scaler, exhausted=facts.exhausted)
    assert count.requested == max(target, held)
    assert count.allocate is not None
    assert count.allocate == min(count.requested, case.rule.maximum)


RECLAIMED_AND_FREE = Case(  # found by Hypothesis: a listed name a pod uses is held, not pending
    CountRule(PoolScaler(batch_size=1, request_threshold_percent=0), scale_down_delay_seconds=0.0),
    CountFacts(
        demand=0,
        assignments=[("used", "10.240.0.4"), ("free", "10.240.0.5")],
        in_use_addresses={"10.240.0.4"},
        requested_ip_count=0,
        ips_not_in_use=["used"],
        exhausted=True,
        surplus_since=None,
        now=NOW,
    ),
)


@PROPERTY
@given(case=cases())
@example(case=RECLAIMED_AND_FREE)
def test_nothing_is_marked_before_the_surplus_lasted_nor_without_release(case: Case) -> None:
    count = case.count()
    lasted = None if count.surplus_since is None else case.facts.now - count.surplus_since
    if not case.rule.may_release or lasted is None or lasted < case.rule.scale_down_delay_seconds:
        assert count.request.newly_marked == ()


@PROPERTY
@given(case=cases())
@example(case=RECLAIMED_AND_FREE)
def test_the_surplus_clock_runs_with_the_surplus(case: Case) -> None:
    """The clock keeps its start while a surplus lasts, starts now when one appears, and stops."""
    count = case.count()
    facts = case.facts
    listed = set(facts.ips_not_in_use)  # pending release unless in use: a used one is reclaimed
    pending = {n for n, a in facts.assignments if n in listed and a not in facts.in_use_addresses}
    held = len([n for n, _ in facts.assignments if n not in pending])
    target = pool_target(facts.demand + case.rule.headroom, case.rule.scaler, exhausted=facts.exhausted)
    if target >= held:
        assert count.surplus_since is None
    else:
        assert count.surplus_since == (NOW if facts.surplus_since is None else facts.surplus_since)


@PROPERTY
@given(case=cases(blocks=True))
def test_blocks_count_addresses_mark_nothing_and_keep_no_clock(case: Case) -> None:
    blocks = [(n, f"{a}/28") for n, a in case.facts.assignments]
    facts = CountFacts(**{**case.facts.__dict__, "assignments": blocks})
    count = requested_count(case.rule, facts)
    target = pool_target(facts.demand + case.rule.headroom, case.rule.scaler, exhausted=facts.exhausted)
    assert count.requested == max(target, 16 * len(blocks))
    assert count.request.ips_not_in_use == ()
    assert count.surplus_since == facts.surplus_since


@PROPERTY
@given(
    count=st.none() | st.integers(min_value=0, max_value=300),
    listed=st.sets(st.sampled_from("abcdefgh")),
    releasable=st.sets(st.sampled_from("abcdefgh")),
    on_nic=st.sets(st.sampled_from("abcdefgh")),
    blocks=st.booleans(),
)
def test_nic_entries_add_the_settling_names_and_turn_into_blocks(
    count: int | None, listed: set[str], releasable: set[str], on_nic: set[str], blocks: bool
) -> None:
    wanted = nic_entries_wanted(
        count, listed=listed, releasable=releasable, names_on_nic=on_nic, blocks=blocks
    )
    if count is None:
        assert wanted is None
        return
    settling = len((listed & on_nic) - releasable)
    assert wanted == (-(-(count + settling) // 16) if blocks else count + settling)


SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
HELD = [(f"ip-{i}", f"10.0.0.{i}") for i in range(40)]


@pytest.mark.parametrize(
    ("rule", "demand", "surplus_since", "expected"),
    [
        pytest.param(CountRule(SCALER), 25, None, (48, 0, None), id="grows-to-the-target"),
        pytest.param(CountRule(SCALER, headroom=8), 25, None, (48, 0, None), id="headroom-within-batch"),
        pytest.param(CountRule(SCALER, headroom=20), 25, None, (64, 0, None), id="headroom-next-batch"),
        pytest.param(
            CountRule(SCALER, scale_down_delay_seconds=60), 5, None, (40, 0, NOW), id="surplus-starts"
        ),
        pytest.param(
            CountRule(SCALER, scale_down_delay_seconds=60),
            5,
            NOW - 60,
            (16, 24, NOW - 60),
            id="surplus-lasted",
        ),
        pytest.param(
            CountRule(SCALER, may_release=False), 5, NOW - 600, (40, 0, NOW - 600), id="no-release-handshake"
        ),
        pytest.param(CountRule(SCALER, blocks=True), 5, None, (640, 0, None), id="blocks-hold-addresses"),
    ],
)
def test_requested_count_table(
    rule: CountRule, demand: int, surplus_since: float | None, expected: tuple[int, int, float | None]
) -> None:
    held = [(n, f"{a}/28") for n, a in HELD] if rule.blocks else HELD
    facts = CountFacts(demand, held, set(), 40, (), surplus_since=surplus_since, now=NOW)
    count = requested_count(rule, facts)
    assert (count.requested, len(count.request.newly_marked), count.surplus_since) == expected
