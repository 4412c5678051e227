"""The emulator's subnet address pool against a plain model of Azure's rule: the first four and
the last address of a subnet are reserved, and a dynamic allocation gets the lowest free address,
whatever was given back or taken statically before (pure, no I/O)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodewright.cloud.emulator.addresses import SubnetAddressPool
from nodewright.cloud.emulator.errors import ArmError

PREFIX = "10.0.0.0/27"  # 32 addresses, 27 usable: small enough to fill in a case
NIC = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic{}"


def owner(nic: int, config: int) -> str:
    return f"{NIC.format(nic)}/ipConfigurations/ipconfig{config}"


def lowest_free(held: set[str]) -> str | None:
    network = ipaddress.ip_network(PREFIX)
    first, last = int(network.network_address) + 4, int(network.broadcast_address) - 1
    for value in range(first, last + 1):
        if str(ipaddress.ip_address(value)) not in held:
            return str(ipaddress.ip_address(value))
    return None


steps = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "release", "static"]),
        st.integers(0, 5),
        st.integers(0, 5),
        st.integers(4, 30),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_dynamic_allocations_take_the_lowest_free_address(script: list[tuple[str, int, int, int]]) -> None:
    pool = SubnetAddressPool("subnet-id", "subnet", PREFIX)
    model: dict[str, str] = {}
    for action, nic, config, offset in script:
        who = owner(nic, config)
        if action == "release":
            pool.release(who)
            model.pop(who.lower(), None)
        elif action == "allocate" and who.lower() not in model:
            expected = lowest_free(set(model.values()))
            if expected is None:
                with pytest.raises(ArmError):
                    pool.allocate(who)
                continue
            assert pool.allocate(who) == expected
            model[who.lower()] = expected
        elif action == "static":
            address = str(ipaddress.ip_address(int(ipaddress.ip_network(PREFIX).network_address) + offset))
            holder = next((k for k, v in model.items() if v == address), None)
            if holder is not None and holder != who.lower():
                with pytest.raises(ArmError):
                    pool.allocate(who, address)
                continue
            assert pool.allocate(who, address) == address
            model[who.lower()] = address
        assert pool.used == len(model)
        assert {o.lower(): pool.address_of(o) for o in pool.owners()} == model


def test_owners_under_a_prefix_are_found_by_their_parent() -> None:
    pool = SubnetAddressPool("subnet-id", "subnet", "10.0.0.0/24")
    for nic in (1, 2, 12):
        for config in range(3):
            pool.allocate(owner(nic, config))
    assert sorted(pool.owners_under(NIC.format(1) + "/")) == sorted(owner(1, c) for c in range(3))
    assert sorted(pool.owners_under(NIC.format(1).upper())) == sorted(
        owner(n, c) for n in (1, 12) for c in range(3)
    )
    assert pool.owners_under(owner(2, 1)) == [owner(2, 1)]
    assert pool.owners_under(NIC.format(3)) == []


def test_a_large_subnet_filled_and_emptied_hands_out_the_lowest_again() -> None:
    """1,000 NICs of 17 IPs in one /17, released NIC by NIC: every address unique and in order,
    and the lowest handed out first again afterwards."""
    pool = SubnetAddressPool("subnet-id", "subnet", "10.1.0.0/17")
    given_out = [pool.allocate(owner(nic, config)) for nic in range(1_000) for config in range(17)]
    assert len(set(given_out)) == 17_000
    assert [int(ipaddress.ip_address(a)) for a in given_out] == sorted(
        int(ipaddress.ip_address(a)) for a in given_out
    )
    for nic in range(1_000):
        for owned in pool.owners_under(NIC.format(nic) + "/"):
            pool.release(owned)
    assert pool.used == 0
    assert pool.allocate(owner(0, 0)) == "10.1.0.4"
