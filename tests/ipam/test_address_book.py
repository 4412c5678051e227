"""The test allocation book: a node's book never hands one IP to two pods, never binds a pending IP,
stays in step with status and pods; the cluster check finds every address listed twice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.ipam.address_book import AddressBook, AddressConflict, NoFreeAddressError, find_address_conflicts
from tests.ipam.strategies import PROPERTY, address, assignment_lists, name


def _book(count: int) -> AddressBook:
    book = AddressBook()
    book.sync_status([(name(i), address(i)) for i in range(count)], now=0.0)
    return book


def test_binds_oldest_free_ip_and_is_idempotent_per_pod() -> None:
    """A new pod gets the oldest free IP; asking again for the same pod returns the same IP."""
    book = _book(3)
    book.mark_pending([name(0)])
    first = book.bind("default/a")
    assert first.name == name(1)
    assert book.bind("default/a") is first
    assert book.bind("default/b").name == name(2)
    with pytest.raises(NoFreeAddressError):
        book.bind("default/c")
    book.check()


def test_unbind_frees_the_ip_for_the_next_pod() -> None:
    """A pod's end frees its IP; the next pod can take it."""
    book = _book(1)
    book.bind("default/a")
    assert book.unbind("default/a") == name(0)
    assert book.unbind("default/a") is None
    assert book.bind("default/b").name == name(0)


def test_refuses_to_mark_an_ip_in_use_or_unknown() -> None:
    """mark_pending raises for an IP a pod holds and for a name the book does not know."""
    book = _book(2)
    book.bind("default/a")
    with pytest.raises(ValueError, match="in use"):
        book.mark_pending([name(0)])
    with pytest.raises(ValueError, match="unknown"):
        book.mark_pending([name(9)])


def test_sync_status_reports_pods_whose_ip_vanished() -> None:
    """If the status drops an IP a pod holds, the pod is reported (an IP released under a pod)."""
    book = _book(2)
    book.bind("default/a")
    assert book.sync_status([(name(1), address(1))], now=1.0) == ["default/a"]
    assert book.address_of_pod("default/a") is None
    book.check()


def test_sync_status_refuses_duplicates() -> None:
    """A status listing an address or a name twice is refused rather than silently merged."""
    book = AddressBook()
    with pytest.raises(ValueError, match="address"):
        book.sync_status([(name(0), address(0)), (name(1), address(0))], now=0.0)
    with pytest.raises(ValueError, match="name"):
        book.sync_status([(name(0), address(0)), (name(0), address(1))], now=0.0)


def test_sync_pods_rebuilds_bindings_from_observed_pods() -> None:
    """Level-based rebuild: bindings become exactly the pods' reported addresses; a pod with an
    address the book does not hold, or one another pod already holds, is reported."""
    book = _book(3)
    book.mark_pending([name(1)])
    strangers = book.sync_pods({"default/a": address(1), "default/b": address(7), "default/c": address(1)})
    assert strangers == ["default/b", "default/c"]
    assert book.address_of_pod("default/a") == address(1)
    assert book.get(name(1)) is not None
    assert not book.get(name(1)).pending_release  # type: ignore[union-attr]
    book.check()


@PROPERTY
@given(
    assignments=assignment_lists(max_size=30),
    operations=st.lists(
        st.tuples(st.sampled_from(["bind", "unbind", "mark"]), st.integers(min_value=0, max_value=40)),
        max_size=60,
    ),
)
def test_no_ip_is_allocated_twice(
    assignments: list[tuple[str, str]], operations: list[tuple[str, int]]
) -> None:
    """Under any sequence of binds, unbinds and markings no address goes to two pods, no pod holds
    two, and no IP is both in use and pending release."""
    book = AddressBook()
    book.sync_status(assignments, now=0.0)
    for operation, index in operations:
        pod = f"default/pod-{index}"
        if operation == "bind":
            try:
                book.bind(pod)
            except NoFreeAddressError:
                assert not book.free()
        elif operation == "unbind":
            book.unbind(pod)
        else:
            free = book.free()
            if free:
                book.mark_pending([free[index % len(free)]])
        book.check()
        bound = [book.address_of_pod(f"default/pod-{i}") for i in range(41)]
        held = [a for a in bound if a is not None]
        assert len(held) == len(set(held))


def test_find_address_conflicts() -> None:
    """An address in two nodes' statuses (or twice in one) is reported with every holder."""
    conflicts = find_address_conflicts(
        {
            "node-a": [(name(0), address(0)), (name(1), address(1))],
            "node-b": [(name(2), address(1)), (name(3), address(3))],
            "node-c": [],
        }
    )
    assert conflicts == [AddressConflict(address(1), (("node-a", name(1)), ("node-b", name(2))))]
    assert find_address_conflicts({"node-a": [(name(0), address(0))]}) == []
