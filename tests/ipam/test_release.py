"""Choosing IPs to release: never one in use or already pending, newest first, at most the count."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nodewright.ipam import choose_ips_to_release
from tests.ipam.strategies import PROPERTY, address, assignment_lists, name


@PROPERTY
@given(assignments=assignment_lists(), data=st.data(), count=st.integers(min_value=-2, max_value=70))
def test_choice_invariants(assignments: list[tuple[str, str]], data: st.DataObject, count: int) -> None:
    """The choice holds at most count names, none in use, none pending, as many as are free, and
    they are the newest free ones."""
    addresses = [a for _, a in assignments]
    names = [n for n, _ in assignments]
    in_use = data.draw(st.sets(st.sampled_from(addresses))) if addresses else set()
    pending = data.draw(st.sets(st.sampled_from(names))) if names else set()
    chosen = choose_ips_to_release(assignments, count, in_use_addresses=in_use, pending_release=pending)
    free = [n for n, a in assignments if a not in in_use and n not in pending]
    assert chosen == list(reversed(free))[: max(count, 0)]


def test_newest_free_first() -> None:
    """With IPs 0..4 (oldest first) and 4 in use, two releases take 3 then 2."""
    assignments = [(name(i), address(i)) for i in range(5)]
    assert choose_ips_to_release(assignments, 2, in_use_addresses={address(4)}) == [name(3), name(2)]
