"""Private address allocation inside one subnet, as Azure does it: the first four addresses and the
last one of every subnet are reserved, the rest are handed out lowest first.

Pure bookkeeping: a :class:`SubnetAddressPool` maps owners (IP configuration resource IDs,
compared case-insensitively) to addresses. The state module owns one pool per subnet.
"""

from __future__ import annotations

import ipaddress

from nodewright.cloud.emulator.errors import ArmError, ErrorCode

__all__ = ["RESERVED_ADDRESSES_PER_SUBNET", "SubnetAddressPool"]

RESERVED_ADDRESSES_PER_SUBNET = 5


class SubnetAddressPool:
    """Addresses of one subnet CIDR and who holds them."""

    def __init__(self, subnet_id: str, subnet_name: str, prefix: str) -> None:
        self.subnet_id = subnet_id
        self.subnet_name = subnet_name
        self.prefix = prefix
        self.network = ipaddress.ip_network(prefix, strict=False)
        self._by_owner: dict[str, str] = {}
        self._owner_names: dict[str, str] = {}
        self._by_address: dict[str, str] = {}
        self._blocks: dict[str, list[str]] = {}

    @property
    def limit(self) -> int:
        """Usable addresses: the CIDR size minus the five Azure reserves."""
        return max(0, self.network.num_addresses - RESERVED_ADDRESSES_PER_SUBNET)

    @property
    def used(self) -> int:
        return len(self._by_address)

    def owners(self) -> list[str]:
        """Owner IDs as first given, in allocation order."""
        return [self._owner_names[key] for key in self._by_owner]

    def address_of(self, owner: str) -> str | None:
        return self._by_owner.get(owner.lower())

    def _usable(self) -> range:
        first = int(self.network.network_address) + 4
        last = int(self.network.broadcast_address) - 1
        return range(first, last + 1)

    def allocate(self, owner: str, requested: str | None = None) -> str:
        """Give ``owner`` an address (``requested`` if static; ``"/28"`` asks for a block, see
        ``_allocate_block``); idempotent for an existing owner."""
        key = owner.lower()
        existing = self._by_owner.get(key)
        if existing is not None and (requested is None or requested == existing):
            return existing
        if existing is not None and requested is not None and requested.startswith("/"):
            if existing.endswith(requested):
                return existing  # the block it holds, re-sent with the NIC
            self.release(owner)
        if requested is not None and requested.startswith("/"):
            return self._allocate_block(owner, int(requested[1:]))
        if requested is not None:
            return self._allocate_static(owner, requested)
        for value in self._usable():
            address = str(ipaddress.ip_address(value))
            if address not in self._by_address:
                self._assign(owner, address)
                return address
        raise ArmError(
            400,
            ErrorCode.SUBNET_IS_FULL,
            f"Subnet {self.subnet_name} with address prefix {self.prefix} does not have enough capacity "
            "for 1 IP addresses.",
        )

    def _allocate_block(self, owner: str, prefix_length: int) -> str:
        """Give ``owner`` the lowest free, aligned block of ``2**(32 - prefix_length)`` usable
        addresses (``privateIPAddressPrefixLength``); returns it as ``"a.b.c.d/len"``."""
        size = 2 ** (self.network.max_prefixlen - prefix_length)
        usable = self._usable()
        start = -(-usable.start // size) * size
        for base in range(start, usable.stop - size + 1, size):
            addresses = [str(ipaddress.ip_address(value)) for value in range(base, base + size)]
            if not any(address in self._by_address for address in addresses):
                for address in addresses:
                    self._by_address[address] = owner.lower()
                block = f"{addresses[0]}/{prefix_length}"
                self._by_owner[owner.lower()] = block
                self._owner_names[owner.lower()] = owner
                self._blocks[owner.lower()] = addresses
                return block
        raise ArmError(
            400,
            ErrorCode.SUBNET_IS_FULL,
            f"Subnet {self.subnet_name} with address prefix {self.prefix} does not have enough capacity "
            f"for a /{prefix_length} block.",
        )

    def _allocate_static(self, owner: str, requested: str) -> str:
        address = ipaddress.ip_address(requested)
        if address not in self.network:
            raise ArmError(
                400,
                ErrorCode.PRIVATE_IP_ADDRESS_NOT_IN_SUBNET,
                f"IP configuration {owner} references the private IP address {requested} which is not in "
                f"subnet {self.subnet_id} ({self.prefix}).",
            )
        if int(address) not in self._usable():
            raise ArmError(
                400,
                ErrorCode.PRIVATE_IP_ADDRESS_IN_RESERVED_RANGE,
                f"Private static IP address {requested} falls within reserved IP range of subnet prefix "
                f"{self.prefix} (network address, gateway, two DNS addresses and broadcast).",
            )
        holder = self._by_address.get(str(address))
        if holder is not None and holder != owner.lower():
            raise ArmError(
                400,
                ErrorCode.PRIVATE_IP_ADDRESS_IS_ALLOCATED,
                f"IP configuration {owner} is using the private IP address {requested} which is already "
                f"allocated to resource {self._owner_names[holder]}.",
            )
        self.release(owner)
        self._assign(owner, str(address))
        return str(address)

    def _assign(self, owner: str, address: str) -> None:
        key = owner.lower()
        self._by_owner[key] = address
        self._owner_names[key] = owner
        self._by_address[address] = key

    def release(self, owner: str) -> None:
        """Free ``owner``'s address, if it holds one."""
        key = owner.lower()
        address = self._by_owner.pop(key, None)
        self._owner_names.pop(key, None)
        for block_address in self._blocks.pop(key, []):
            self._by_address.pop(block_address, None)
        if address is not None:
            self._by_address.pop(address, None)
