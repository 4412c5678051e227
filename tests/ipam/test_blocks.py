"""/28 prefix blocks: addresses per entry, blocks in use, blocks needed for a number of IPs."""

from __future__ import annotations

import pytest

from nodewright.ipam import address_count, addresses_of, blocks_for, blocks_in_use


def test_a_block_holds_its_16_addresses_and_a_plain_entry_one() -> None:
    assert addresses_of("10.0.0.4") == ["10.0.0.4"]
    block = addresses_of("10.0.0.16/28")
    assert (len(block), block[0], block[-1]) == (16, "10.0.0.16", "10.0.0.31")
    assert address_count(["10.0.0.4", "10.0.0.16/28", "10.0.0.32/28"]) == 33


def test_a_block_is_in_use_when_a_pod_holds_any_of_its_addresses() -> None:
    entries = ["10.0.0.16/28", "10.0.0.32/28", "10.0.0.5"]
    assert blocks_in_use(entries, {"10.0.0.31", "10.0.0.5"}) == {"10.0.0.16/28", "10.0.0.5"}
    assert blocks_in_use(entries, set()) == set()


@pytest.mark.parametrize(("ips", "blocks"), [(0, 0), (1, 1), (16, 1), (17, 2), (24, 2), (250, 16)])
def test_blocks_for(ips: int, blocks: int) -> None:
    assert blocks_for(ips) == blocks
