"""Prefix blocks (experimental): a secondary IP configuration with ``privateIPAddressPrefixLength``
28 holds 16 addresses, written as ``"a.b.c.d/28"`` where a plain configuration holds one.

Owns the arithmetic between addresses and blocks: how many addresses an entry stands for, the
addresses it holds, which blocks hold an address a pod uses, and how many blocks cover a number
of IPs. Pure; imports nothing internal.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable

__all__ = [
    "BLOCK_PREFIX_LENGTH",
    "BLOCK_SIZE",
    "address_count",
    "addresses_of",
    "blocks_for",
    "blocks_in_use",
]

BLOCK_PREFIX_LENGTH = 28
BLOCK_SIZE = 16


def addresses_of(entry: str) -> list[str]:
    """The addresses an entry holds: itself, or every address of its block."""
    if "/" not in entry:
        return [entry]
    return [str(address) for address in ipaddress.ip_network(entry, strict=False)]


def address_count(entries: Iterable[str]) -> int:
    """How many addresses the entries hold together."""
    return sum(ipaddress.ip_network(e, strict=False).num_addresses if "/" in e else 1 for e in entries)


def blocks_in_use(entries: Iterable[str], in_use_addresses: Collection[str]) -> set[str]:
    """The entries (blocks or single addresses) that hold at least one address in use."""
    used = {ipaddress.ip_address(a) for a in in_use_addresses}
    return {e for e in entries if any(a in used for a in map(ipaddress.ip_address, addresses_of(e)))}


def blocks_for(ip_count: int, size: int = BLOCK_SIZE) -> int:
    """How many blocks of ``size`` cover ``ip_count`` IPs."""
    return max(0, -(-ip_count // size))
