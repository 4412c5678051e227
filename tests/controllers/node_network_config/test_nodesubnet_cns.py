"""The CNS NodeSubnet stand-in's rules, one test per behaviour of CNS v1.6.48 it reproduces (the
table in docs/ipam.md names each test): NMAgent's answer and its comparison, the fetch schedule,
the update that CNS refuses and what it strands, CNI ADD/DEL, restart. Pure: no cluster."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from nodewright.devenv.cns_nodesubnet_nmagent import (
    EMPTY_ANSWER,
    Interface,
    Interfaces,
    InterfaceSubnet,
    LaggedNMAgent,
    NodeAddress,
    secondary_addresses,
)
from nodewright.devenv.cns_nodesubnet_state import (
    NODESUBNET_NETWORK_CONTAINER_ID,
    CnsNodeState,
    FetchSchedule,
    apply_fetch,
)

PROJECT = Path(__file__).resolve().parents[3]
MAC = "00-0D-3A-00-00-01"


def answer(*secondaries: str, mac: str = MAC, prefix: str = "10.240.0.0/16") -> Interfaces:
    """NMAgent's answer for a VM with one primary NIC: its own address, then ``secondaries``."""
    addresses = (NodeAddress("10.240.0.4", True), *(NodeAddress(a) for a in secondaries))
    return Interfaces((Interface(mac, True, (InterfaceSubnet(prefix, addresses),)),))


def started(*secondaries: str) -> tuple[FetchSchedule, CnsNodeState]:
    """A CNS whose first fetch answered ``secondaries`` at t=0."""
    schedule, state = FetchSchedule(), CnsNodeState()
    assert apply_fetch(schedule, state, answer(*secondaries), 0.0) == "applied"
    return schedule, state


def test_fetch_schedule_doubles_to_1024_and_resets_on_change() -> None:
    """4 s after start, doubling while the answer stays the same, capped at 1,024 s, back to 4 s
    on a different answer."""
    schedule, state = started("10.240.0.10")
    assert schedule.next_fetch == 4.0
    intervals = []
    for _ in range(10):
        apply_fetch(schedule, state, answer("10.240.0.10"), 0.0)
        intervals.append(schedule.interval)
    assert intervals == [8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 1024.0, 1024.0]
    assert apply_fetch(schedule, state, answer("10.240.0.11"), 0.0) == "applied"
    assert schedule.interval == 4.0


def test_an_answer_equal_to_the_cached_one_is_not_applied_again() -> None:
    """CNS hands an answer on only when it differs from the cached one: an address CNS dropped
    from its pool is not re-read from an unchanged answer at the next fetch."""
    schedule, state = started("10.240.0.10", "10.240.0.11")
    del state.addresses["10.240.0.11"]  # whatever CNS holds, an equal answer does not touch it
    assert apply_fetch(schedule, state, answer("10.240.0.10", "10.240.0.11"), 4.0) == "unchanged"
    assert set(state.addresses) == {"10.240.0.10"}


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(answer("10.240.0.11", "10.240.0.10"), id="same-addresses-other-order"),
        pytest.param(answer("10.240.0.10", "10.240.0.11", mac="00-0D-3A-00-00-02"), id="other-mac"),
        pytest.param(answer("10.240.0.10", "10.240.0.11", prefix="10.240.0.0/22"), id="other-prefix"),
        pytest.param(
            Interfaces(
                (
                    Interface(
                        MAC,
                        True,
                        (
                            InterfaceSubnet(
                                "10.240.0.0/16",
                                (
                                    NodeAddress("10.240.0.4"),
                                    NodeAddress("10.240.0.10", True),
                                    NodeAddress("10.240.0.11"),
                                ),
                            ),
                        ),
                    ),
                )
            ),
            id="primary-flag-moved",
        ),
        pytest.param(
            Interfaces(
                (*answer("10.240.0.10", "10.240.0.11").entries, Interface("00-0D-3A-00-00-09", False, ()))
            ),
            id="another-interface",
        ),
    ],
)
def test_answers_are_compared_whole_and_in_order(changed: Interfaces) -> None:
    """CNS compares NMAgent's whole answer in order (interfaces, MAC, primary flags, prefixes,
    addresses): any difference resets the interval to 4 s and is applied."""
    schedule, state = started("10.240.0.10", "10.240.0.11")
    apply_fetch(schedule, state, answer("10.240.0.10", "10.240.0.11"), 4.0)
    assert schedule.interval == 8.0
    assert apply_fetch(schedule, state, changed, 12.0) == "applied"
    assert schedule.interval == 4.0


def test_a_failed_fetch_changes_neither_pool_nor_interval() -> None:
    """An NMAgent error is logged and nothing else: the pool and the interval stay."""
    schedule, state = started("10.240.0.10", "10.240.0.11")
    apply_fetch(schedule, state, answer("10.240.0.10", "10.240.0.11"), 4.0)
    assert apply_fetch(schedule, state, None, 12.0) == "failed"
    assert (schedule.interval, schedule.next_fetch) == (8.0, 20.0)
    assert set(state.addresses) == {"10.240.0.10", "10.240.0.11"}


def test_an_answer_without_interfaces_resets_the_interval_and_keeps_the_pool() -> None:
    """An answer with no interfaces differs from the cached one (interval back to 4 s) but is an
    error to CNS: the pool stays; the next real answer differs from it and is applied."""
    schedule, state = started("10.240.0.10")
    apply_fetch(schedule, state, answer("10.240.0.10"), 4.0)
    assert apply_fetch(schedule, state, EMPTY_ANSWER, 12.0) == "no-interfaces"
    assert schedule.interval == 4.0
    assert set(state.addresses) == {"10.240.0.10"}
    assert apply_fetch(schedule, state, answer("10.240.0.10"), 16.0) == "applied"


def test_a_refused_update_strands_the_addresses_it_dropped() -> None:
    """The issue's run: a pod holds .12; NMAgent's answer drops .10, .11 and .12 and adds .13.
    CNS refuses the update but caches the answer: .10 and .11 stay Available, .13 is not added.
    The same answer is never retried. When the answer changes again (after the pod left), .13
    arrives, and .10 and .11 are still Available, for good, though on no NIC."""
    schedule, state = started("10.240.0.10", "10.240.0.11", "10.240.0.12")
    state.addresses["10.240.0.12"] = "pod"
    state.endpoints["pod"] = "10.240.0.12"
    assert apply_fetch(schedule, state, answer("10.240.0.13"), 4.0) == "refused"
    assert state.available() == ["10.240.0.10", "10.240.0.11"]
    assert apply_fetch(schedule, state, answer("10.240.0.13"), 8.0) == "unchanged"
    state.release("pod")
    assert apply_fetch(schedule, state, answer("10.240.0.13"), 24.0) == "unchanged"
    assert apply_fetch(schedule, state, answer("10.240.0.13", "10.240.0.14"), 56.0) == "applied"
    assert state.available() == ["10.240.0.10", "10.240.0.11", "10.240.0.12", "10.240.0.13", "10.240.0.14"]
    assert state.stranded() == {"10.240.0.10", "10.240.0.11", "10.240.0.12"}
    assert apply_fetch(schedule, state, answer("10.240.0.14"), 60.0) == "applied"
    assert state.stranded() == {"10.240.0.10", "10.240.0.11", "10.240.0.12"}


def test_cni_add_takes_any_available_address_not_the_lowest() -> None:
    """CNS hands out whichever Available address its map walk meets first: not in order."""
    _, state = started(*(f"10.240.0.{i}" for i in range(10, 26)))
    rng = random.Random(7)
    given = [str(state.assign(f"pod-{i}", rng.choice)) for i in range(8)]
    assert given != sorted(given)
    assert given != [f"10.240.0.{i}" for i in range(10, 18)]
    assert len(set(given)) == 8


def test_no_cni_add_before_the_first_successful_update() -> None:
    """CNS writes the CNI config only after its first successful update: a failed first fetch
    (handed on as an empty answer) leaves pods without an address until a real answer arrives."""
    schedule, state = FetchSchedule(), CnsNodeState()
    assert apply_fetch(schedule, state, None, 0.0) == "no-interfaces"
    assert state.assign("pod", random.Random(1).choice) is None
    assert apply_fetch(schedule, state, answer("10.240.0.10"), 4.0) == "applied"
    assert state.assign("pod", random.Random(1).choice) == "10.240.0.10"


def test_restart_restores_assigned_addresses_from_endpoint_state() -> None:
    """After a restart CNS rebuilds its pool from its endpoint state alone: each pod keeps its
    address, Assigned; the other addresses wait for the next fetch, and so does any CNI ADD; an
    address stranded before the restart is gone."""
    schedule, state = started("10.240.0.10", "10.240.0.11", "10.240.0.12")
    state.addresses["10.240.0.12"] = "pod"
    state.endpoints["pod"] = "10.240.0.12"
    apply_fetch(schedule, state, answer("10.240.0.13"), 4.0)  # refused: .10 and .11 stranded
    state.restart()
    assert state.addresses == {"10.240.0.12": "pod"}
    assert state.assign("other", random.Random(1).choice) is None
    schedule = FetchSchedule()
    assert apply_fetch(schedule, state, answer("10.240.0.12", "10.240.0.13"), 5.0) == "applied"
    assert state.available() == ["10.240.0.13"]
    assert state.stranded() == set()


def test_nmagent_answers_arm_as_it_was_lag_seconds_ago() -> None:
    """NMAgent reports an ARM change only ``lag`` seconds after it; a node's first state counts
    as known from the start."""
    arm = {"node": answer("10.240.0.10")}
    nmagent = LaggedNMAgent(lambda: dict(arm), lag=5.0, sample_seconds=0.0)
    nmagent.sample(0.0)
    arm["node"] = answer("10.240.0.10", "10.240.0.11")
    nmagent.sample(1.0)
    assert nmagent.answer("node", 1.0) == answer("10.240.0.10")
    assert nmagent.current("node") == {"10.240.0.10", "10.240.0.11"}
    nmagent.sample(5.9)
    assert nmagent.answer("node", 5.9) == answer("10.240.0.10")
    nmagent.sample(6.0)
    assert secondary_addresses(nmagent.answer("node", 6.0) or EMPTY_ANSWER) == ["10.240.0.10", "10.240.0.11"]
    assert nmagent.answer("other", 6.0) is None


def test_network_container_id_is_cns_constant() -> None:
    """CNS keys NodeSubnet's IPs under the network container id ``NodeSubnetNCID`` (its source
    calls it the md5 of ``NodeSubnetNC_IPv4``); docs/ipam.md names that id, not the string."""
    assert NODESUBNET_NETWORK_CONTAINER_ID == "55022629-3854-499b-7133-5e6887959f4ea"
    docs = (PROJECT / "docs" / "ipam.md").read_text()
    assert NODESUBNET_NETWORK_CONTAINER_ID in docs
    assert not re.search(r"id `NodeSubnetNC_IPv4`", docs)
