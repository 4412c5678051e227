"""The control plane's half: NIC changes planned from spec, status, NIC and pods. Releases only
ipsNotInUse (and leaked IPs past their grace period), never an IP in use, never exceeds the NIC's
capacity or the add limit, adopts unaccounted IPs before adding new ones, changes nothing for an
unusable request (the bound of a requested count is ``test_count``'s)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodewright.ipam import (
    MAX_SECONDARY_IPS_PER_NIC,
    AllocationPlan,
    NicIpConfiguration,
    plan_allocation,
    status_assignments,
)
from tests.ipam.strategies import PROPERTY, address, name


@dataclass(frozen=True)
class NicState:
    """One planning input: the NIC, what status accounts for, the spec, pods, leak-tracker output."""

    nic: list[NicIpConfiguration]
    accounted: set[str]
    ips_not_in_use: list[str]
    in_use_addresses: set[str]
    collectable: set[str]
    requested: int | None
    add_limit: int | None
    capacity: int
    keep: frozenset[str] = frozenset()

    def plan(self) -> AllocationPlan:
        return plan_allocation(
            requested=self.requested,
            ips_not_in_use=self.ips_not_in_use,
            nic=self.nic,
            accounted=self.accounted,
            in_use_addresses=self.in_use_addresses,
            collectable=self.collectable,
            add_limit=self.add_limit,
            capacity=self.capacity,
            keep=self.keep,
        )

    @property
    def address_of(self) -> dict[str, str | None]:
        return {c.name: c.address for c in self.nic}


@st.composite
def nic_states(draw: st.DrawFn) -> NicState:
    capacity = draw(st.integers(min_value=1, max_value=MAX_SECONDARY_IPS_PER_NIC))
    indexes = draw(
        st.lists(st.integers(min_value=0, max_value=3000), unique=True, max_size=min(capacity, 80))
    )
    nic = [NicIpConfiguration(name(i), draw(st.one_of(st.just(address(i)), st.none()))) for i in indexes]
    names = [c.name for c in nic]
    addresses = [c.address for c in nic if c.address is not None]

    def subset(values: list[str]) -> set[str]:
        return draw(st.sets(st.sampled_from(values))) if values else set()

    accounted = subset(names)
    unknown = draw(st.lists(st.integers(min_value=4000, max_value=4100).map(name), max_size=3))
    listed = list(subset(names)) + unknown
    return NicState(
        nic=nic,
        accounted=accounted,
        ips_not_in_use=list(draw(st.permutations(listed))),
        in_use_addresses=subset(addresses),
        collectable=subset([n for n in names if n not in accounted]),
        requested=draw(st.one_of(st.none(), st.integers(min_value=0, max_value=capacity))),
        add_limit=draw(st.one_of(st.none(), st.integers(min_value=1, max_value=64))),
        capacity=capacity,
        keep=frozenset(subset(names)),
    )


@PROPERTY
@given(state=nic_states())
def test_never_removes_an_ip_in_use(state: NicState) -> None:
    """No removed name (released or collected) has an address a pod uses."""
    plan = state.plan()
    assert not {state.address_of[n] for n in plan.removals} & state.in_use_addresses


@PROPERTY
@given(state=nic_states())
def test_removes_only_listed_or_collectable_names(state: NicState) -> None:
    """Releases come from ipsNotInUse; collections from the leak tracker's unaccounted names."""
    plan = state.plan()
    assert set(plan.release) <= set(state.ips_not_in_use)
    assert set(plan.collected) <= state.collectable - state.accounted
    assert not set(plan.release) & set(plan.collected)


@PROPERTY
@given(state=nic_states())
def test_stays_within_capacity_and_add_limit(state: NicState) -> None:
    """After the plan the NIC holds at most its capacity; additions respect the add limit."""
    plan = state.plan()
    assert len(state.nic) - len(plan.removals) + plan.add_count <= max(state.capacity, len(state.nic))
    if len(state.nic) <= state.capacity:
        assert len(state.nic) - len(plan.removals) + plan.add_count <= state.capacity
    if state.add_limit is not None:
        assert plan.add_count <= state.add_limit


@PROPERTY
@given(state=nic_states())
def test_meets_the_request_unless_short(state: NicState) -> None:
    """The pool after the plan (kept, adopted and added IPs) is max(request, IPs that must be kept)
    unless the plan reports itself short, in which case it is exactly that much below the request;
    it never grows beyond what was asked."""
    plan = state.plan()
    if state.requested is None:
        return
    on_nic = {c.name for c in state.nic} - set(plan.removals)
    must_keep = {
        n
        for n in on_nic
        if n in state.accounted or n in state.keep or state.address_of[n] in state.in_use_addresses
    }
    pool = len((set(state.accounted) | set(plan.adopt)) & on_nic) + plan.add_count
    if plan.short_by == 0:
        assert pool == max(state.requested, len(must_keep))
    else:
        assert pool + plan.short_by == state.requested


@PROPERTY
@given(state=nic_states())
def test_adopts_spare_ips_before_adding(state: NicState) -> None:
    """New IP configurations are only created once every unaccounted spare one is adopted."""
    plan = state.plan()
    if plan.add_count:
        assert plan.unaccounted == ()
        assert plan.collected == ()


@PROPERTY
@given(state=nic_states())
def test_adopts_every_unaccounted_ip_in_use(state: NicState) -> None:
    """An unaccounted IP configuration a pod uses is taken into the status at once."""
    plan = state.plan()
    if state.requested is None:
        return
    releasing = set(plan.release)
    for configuration in state.nic:
        used = configuration.address in state.in_use_addresses
        if used and configuration.name not in state.accounted and configuration.name not in releasing:
            assert configuration.name in plan.adopt


@PROPERTY
@given(state=nic_states())
def test_adopts_every_name_it_is_told_to_keep(state: NicState) -> None:
    """A name to ``keep`` (NodeSubnet's boot configurations) is never collected, and is adopted
    at once unless accounted already or released from ipsNotInUse; the request still counts it."""
    plan = state.plan()
    if state.requested is None:
        return
    releasing = set(plan.release)
    for kept in state.keep - releasing:
        assert kept not in plan.collected
        assert kept in state.accounted or kept in plan.adopt
    held = len({c.name for c in state.nic} - releasing - set(plan.collected)) + plan.add_count
    assert plan.add_count == 0 or held <= max(state.requested, len(state.accounted | state.keep))


@PROPERTY
@given(state=nic_states())
def test_unusable_request_changes_nothing(state: NicState) -> None:
    """With requestedIPCount unusable (None after validation) the NIC is left exactly as it is."""
    plan = plan_allocation(
        requested=None,
        ips_not_in_use=state.ips_not_in_use,
        nic=state.nic,
        accounted=state.accounted,
        in_use_addresses=state.in_use_addresses,
        collectable=state.collectable,
    )
    assert not plan.changes_nic


def _nic(count: int, start: int = 0) -> list[NicIpConfiguration]:
    return [NicIpConfiguration(name(i), address(i)) for i in range(start, start + count)]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param(
            {"requested": 48, "nic": [], "accounted": set()},
            AllocationPlan(add_count=48),
            id="fresh-nic-adds-everything",
        ),
        pytest.param(
            {"requested": 48, "nic": _nic(48), "accounted": {name(i) for i in range(48)}},
            AllocationPlan(),
            id="at-request-nothing-to-do",
        ),
        pytest.param(
            {
                "requested": 32,
                "nic": _nic(48),
                "accounted": {name(i) for i in range(48)},
                "ips_not_in_use": [name(i) for i in range(32, 48)],
            },
            AllocationPlan(release=tuple(name(i) for i in range(32, 48))),
            id="releases-listed-names",
        ),
        pytest.param(
            {"requested": 16, "nic": _nic(48), "accounted": {name(i) for i in range(48)}},
            AllocationPlan(),
            id="surplus-not-listed-is-kept",
        ),
        pytest.param(
            {
                "requested": 16,
                "nic": _nic(16),
                "accounted": {name(i) for i in range(16)},
                "ips_not_in_use": [name(3), name(99)],
                "in_use_addresses": {address(3)},
            },
            AllocationPlan(refused=(name(3),), unknown=(name(99),)),
            id="in-use-refused-unknown-reported",
        ),
        pytest.param(
            {"requested": 20, "nic": _nic(18), "accounted": {name(i) for i in range(16)}},
            AllocationPlan(adopt=(name(16), name(17)), add_count=2),
            id="adopts-unaccounted-then-adds",
        ),
        pytest.param(
            {
                "requested": 16,
                "nic": _nic(18),
                "accounted": {name(i) for i in range(16)},
                "collectable": {name(17)},
            },
            AllocationPlan(collected=(name(17),), unaccounted=(name(16),)),
            id="collects-leaks-past-grace",
        ),
        pytest.param(
            {"requested": 64, "nic": _nic(16), "accounted": {name(i) for i in range(16)}, "add_limit": 8},
            AllocationPlan(add_count=8, short_by=40),
            id="add-limit-after-halving",
        ),
        pytest.param(
            {"requested": 255, "nic": _nic(250), "accounted": {name(i) for i in range(250)}, "capacity": 252},
            AllocationPlan(add_count=2, short_by=3),
            id="capped-by-nic-capacity",
        ),
    ],
)
def test_plan_allocation_table(arguments: dict[str, object], expected: AllocationPlan) -> None:
    """Typical and bad-input situations give exactly the expected plan."""
    defaults: dict[str, object] = {"ips_not_in_use": [], "in_use_addresses": set()}
    assert plan_allocation(**{**defaults, **arguments}) == expected  # type: ignore[arg-type]


def test_status_lists_accounted_ips_with_addresses_in_nic_order() -> None:
    """ipAssignments are the NIC's accounted configurations that have an address, oldest first."""
    nic = [*_nic(3), NicIpConfiguration(name(3), None), *_nic(2, start=4)]
    assert status_assignments(nic, {name(0), name(2), name(3), name(5)}) == [
        (name(0), address(0)),
        (name(2), address(2)),
        (name(5), address(5)),
    ]
