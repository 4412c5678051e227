"""The node's half of a NodeNetworkConfig (spec.requestedIPCount and ipsNotInUse): never marks an
IP in use, keeps a marked IP listed until it is really released (azure-container-networking
#962), drops released ones even when the target does not move (#4891)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodewright.ipam import PoolRequest, PoolScaler, compute_request, pool_target
from tests.ipam.strategies import PROPERTY, address, assignment_lists, name, scalers

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)


@dataclass(frozen=True)
class NodeState:
    """One call's input: a status, the addresses pods use, the previous ipsNotInUse."""

    assignments: list[tuple[str, str]]
    in_use_addresses: set[str]
    ips_not_in_use: list[str]
    demand: int
    scaler: PoolScaler
    exhausted: bool

    @property
    def address_of(self) -> dict[str, str]:
        return dict(self.assignments)

    def request(self, ips_not_in_use: Sequence[str] | None = None) -> PoolRequest:
        return compute_request(
            demand=self.demand,
            scaler=self.scaler,
            assignments=self.assignments,
            in_use_addresses=self.in_use_addresses,
            ips_not_in_use=self.ips_not_in_use if ips_not_in_use is None else ips_not_in_use,
            exhausted=self.exhausted,
        )


@st.composite
def node_states(draw: st.DrawFn) -> NodeState:
    """A status, the addresses pods use, and a previous ipsNotInUse mixing present and gone names."""
    assignments = draw(assignment_lists())
    in_use = draw(st.sets(st.sampled_from([a for _, a in assignments]))) if assignments else set()
    present = [n for n, _ in assignments]
    previous = draw(st.lists(st.sampled_from(present), max_size=20)) if present else []
    gone = draw(st.lists(st.integers(min_value=6000, max_value=6100).map(name), max_size=5))
    return NodeState(
        assignments=assignments,
        in_use_addresses=in_use,
        ips_not_in_use=list(draw(st.permutations(previous + gone))),
        demand=draw(st.integers(min_value=0, max_value=300)),
        scaler=draw(scalers),
        exhausted=draw(st.booleans()),
    )


@PROPERTY
@given(state=node_states())
def test_never_lists_an_ip_in_use(state: NodeState) -> None:
    """No name in the new ipsNotInUse has an address a pod uses."""
    request = state.request()
    assert not {state.address_of[n] for n in request.ips_not_in_use} & state.in_use_addresses


@PROPERTY
@given(state=node_states())
def test_lists_only_names_in_status_once_each(state: NodeState) -> None:
    """ipsNotInUse names only IPs the status lists, each once."""
    request = state.request()
    assert set(request.ips_not_in_use) <= set(state.address_of)
    assert len(request.ips_not_in_use) == len(set(request.ips_not_in_use))


@PROPERTY
@given(state=node_states())
def test_keeps_marked_ips_until_released(state: NodeState) -> None:
    """#962: a name already in ipsNotInUse that is still in status and unused stays listed,
    whatever the demand (a scale-up does not wipe it)."""
    request = state.request()
    for previous in state.ips_not_in_use:
        if previous in state.address_of and state.address_of[previous] not in state.in_use_addresses:
            assert previous in request.ips_not_in_use


@PROPERTY
@given(state=node_states())
def test_drops_names_gone_from_status(state: NodeState) -> None:
    """#4891: a name no longer in status (released) never stays in ipsNotInUse."""
    request = state.request()
    gone = set(state.ips_not_in_use) - set(state.address_of)
    assert not gone & set(request.ips_not_in_use)
    assert set(request.released) == gone


@PROPERTY
@given(state=node_states())
def test_request_is_the_target_unless_ips_in_use_hold_it_up(state: NodeState) -> None:
    """requestedIPCount is the pool target, or, when too few free IPs can be marked, exactly the
    IPs kept, all of the surplus in use (never less than the target, never more than needed)."""
    request = state.request()
    assert request.target == pool_target(state.demand, state.scaler, exhausted=state.exhausted)
    kept = set(state.address_of) - set(request.ips_not_in_use)
    if len(kept) <= request.target:
        assert request.requested_ip_count == request.target
    else:
        assert request.requested_ip_count == len(kept)
        assert all(state.address_of[n] in state.in_use_addresses for n in kept)


@PROPERTY
@given(state=node_states())
def test_is_idempotent(state: NodeState) -> None:
    """Feeding the result back in (nothing released meanwhile) changes nothing: no churn."""
    first = state.request()
    second = state.request(first.ips_not_in_use)
    assert not second.differs_from(first.requested_ip_count, first.ips_not_in_use)
    assert second.newly_marked == ()


def _status(count: int, start: int = 0) -> list[tuple[str, str]]:
    return [(name(i), address(i)) for i in range(start, start + count)]


def test_scale_up_right_after_scale_down_keeps_marked_ips() -> None:
    """#962 reproduced: 48 IPs, demand falls to 10 (16 IPs marked), then rises to 40 before the
    control plane released them. CNS's bug wrote ipsNotInUse=[] here and stranded 16 IPs; here
    the 16 stay listed and the request covers the new demand on top."""
    status = _status(48)
    in_use = {address(i) for i in range(10)}
    down = compute_request(
        demand=10, scaler=SCALER, assignments=status, in_use_addresses=in_use, ips_not_in_use=[]
    )
    assert down.requested_ip_count == 32
    assert len(down.ips_not_in_use) == 16
    in_use = {address(i) for i in range(40) if name(i) not in down.ips_not_in_use}
    up = compute_request(
        demand=40,
        scaler=SCALER,
        assignments=status,
        in_use_addresses=in_use,
        ips_not_in_use=down.ips_not_in_use,
    )
    assert set(up.ips_not_in_use) == set(down.ips_not_in_use)
    assert up.requested_ip_count == pool_target(40, SCALER) == 48


def test_stale_names_are_cleared_when_the_target_is_unchanged() -> None:
    """#4891 reproduced: the control plane released the 16 marked IPs; the target (32) is the same
    as the request already written. CNS skipped the write when the target did not change and kept
    the 16 stale names forever; here they are dropped and the caller is told to write."""
    status = _status(48)
    marked = [name(i) for i in range(32, 48)]
    after_release = _status(32)
    request = compute_request(
        demand=10,
        scaler=SCALER,
        assignments=after_release,
        in_use_addresses={address(i) for i in range(10)},
        ips_not_in_use=marked,
    )
    assert request.requested_ip_count == 32
    assert request.ips_not_in_use == ()
    assert set(request.released) == set(marked)
    assert request.differs_from(32, marked)
    assert len(status) == 48


@pytest.mark.parametrize(
    ("demand", "status_size", "in_use", "expected"),
    [
        pytest.param(25, 0, 0, (48, 0), id="fresh-node-asks-for-target"),
        pytest.param(25, 48, 25, (48, 0), id="at-target-nothing-to-do"),
        pytest.param(41, 48, 41, (64, 0), id="scale-up-asks-for-next-batch"),
        pytest.param(5, 48, 5, (16, 32), id="scale-down-marks-surplus"),
        pytest.param(5, 48, 40, (40, 8), id="scale-down-limited-by-ips-in-use"),
        pytest.param(0, 16, 0, (16, 0), id="idle-node-keeps-one-batch"),
    ],
)
def test_compute_request_table(demand: int, status_size: int, in_use: int, expected: tuple[int, int]) -> None:
    """Typical pool movements give the expected (requestedIPCount, number newly marked)."""
    request = compute_request(
        demand=demand,
        scaler=SCALER,
        assignments=_status(status_size),
        in_use_addresses={address(i) for i in range(in_use)},
        ips_not_in_use=[],
    )
    assert (request.requested_ip_count, len(request.newly_marked)) == expected


def test_releases_the_newest_ips_first() -> None:
    """Scale-down marks the most recently added free IPs (the end of ipAssignments)."""
    request = compute_request(
        demand=0, scaler=SCALER, assignments=_status(32), in_use_addresses=set(), ips_not_in_use=[]
    )
    assert request.newly_marked == tuple(name(i) for i in range(31, 15, -1))


def test_takes_back_a_listed_ip_that_a_pod_uses() -> None:
    """Bad input: ipsNotInUse names an IP a pod uses. It is taken out (reclaimed), not released."""
    request = compute_request(
        demand=1,
        scaler=SCALER,
        assignments=_status(16),
        in_use_addresses={address(3)},
        ips_not_in_use=[name(3)],
    )
    assert request.reclaimed == (name(3),)
    assert name(3) not in request.ips_not_in_use


def test_releasable_addresses_limit_what_a_scale_down_marks() -> None:
    """Only the allowed free addresses may be marked (none: no scale-down); the request then
    stays above the target by what could not be marked."""
    assignments = [(f"ip-{i}", f"10.0.0.{i}") for i in range(32)]
    none = compute_request(
        demand=0,
        scaler=SCALER,
        assignments=assignments,
        in_use_addresses=set(),
        ips_not_in_use=[],
        releasable_addresses=(),
    )
    assert (none.requested_ip_count, none.ips_not_in_use) == (32, ())
    some = compute_request(
        demand=0,
        scaler=SCALER,
        assignments=assignments,
        in_use_addresses=set(),
        ips_not_in_use=[],
        releasable_addresses={"10.0.0.3", "10.0.0.4"},
    )
    assert set(some.ips_not_in_use) == {"ip-3", "ip-4"}
    assert some.requested_ip_count == 30
