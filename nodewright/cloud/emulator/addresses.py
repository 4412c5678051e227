"""Private address allocation inside one subnet, as Azure does it: the first four addresses and the
last one of every subnet are reserved, the rest are handed out lowest first.

Pure bookkeeping: a :class:`SubnetAddressPool` maps owners (IP configuration resource IDs,
compared case-insensitively) to addresses. The state module owns one pool per subnet. Its costs do
not grow with the subnet's use (Azure's do not either): the lowest free address comes from a heap
of freed addresses below a high-water mark, and owners are indexed by their parent resource (the
NIC an IP configuration belongs to) so a NIC's or instance's owners are found without a scan of
every address in the subnet.
"""

from __future__ import annotations

import heapq
import ipaddress

from nodewright.cloud.emulator.errors import ArmError, ErrorCode

__all__ = ["RESERVED_ADDRESSES_PER_SUBNET", "SubnetAddressPool"]

RESERVED_ADDRESSES_PER_SUBNET = 5
_CHILD_MARKER = "/ipconfigurations/"


def _parent_of(key: str) -> str:
    """The parent resource of a lowercased owner ID (its NIC for an IP configuration)."""
    cut = key.rfind(_CHILD_MARKER)
    return key if cut < 0 else key[:cut]


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
        self._children: dict[str, dict[str, None]] = {}
        """Owner keys by parent (``_parent_of``), in allocation order."""
        usable = self._usable()
        self._high_water = usable.start
        """Every usable address below this has been handed out at least once."""
        self._freed: list[int] = []
        """A heap of addresses below ``_high_water`` given back (entries may be taken again
        meanwhile, by a static request: checked when popped)."""

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

    def owners_under(self, prefix: str) -> list[str]:
        """Owner IDs (as first given) whose ID starts with ``prefix``, compared case-insensitively;
        costs one look per parent resource, not one per address."""
        lowered = prefix.lower()
        found: list[str] = []
        for parent, keys in self._children.items():
            if parent.startswith(lowered):
                found += [self._owner_names[key] for key in keys]
            elif lowered.startswith(parent):  # the prefix reaches into the owners' own names
                found += [self._owner_names[key] for key in keys if key.startswith(lowered)]
        return found

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
        value = self._lowest_free()
        if value is not None:
            address = str(ipaddress.ip_address(value))
            self._assign(owner, address)
            return address
        raise ArmError(
            400,
            ErrorCode.SUBNET_IS_FULL,
            f"Subnet {self.subnet_name} with address prefix {self.prefix} does not have enough capacity "
            "for 1 IP addresses.",
        )

    def _lowest_free(self) -> int | None:
        """The lowest usable address nobody holds (``None``: the subnet is full)."""
        while self._freed:
            value = heapq.heappop(self._freed)
            if str(ipaddress.ip_address(value)) not in self._by_address:
                return value
        stop = self._usable().stop
        while self._high_water < stop:
            value = self._high_water
            self._high_water += 1
            if str(ipaddress.ip_address(value)) not in self._by_address:
                return value
        return None

    def _free(self, address: str) -> None:
        """Note ``address`` as free again (it is handed out before any higher one)."""
        value = int(ipaddress.ip_address(address))
        if value < self._high_water:
            heapq.heappush(self._freed, value)

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
                self._index(owner, block)
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
        self._index(owner, address)
        self._by_address[address] = owner.lower()

    def _index(self, owner: str, held: str) -> None:
        key = owner.lower()
        self._by_owner[key] = held
        self._owner_names[key] = owner
        self._children.setdefault(_parent_of(key), {})[key] = None

    def release(self, owner: str) -> None:
        """Free ``owner``'s address, if it holds one."""
        key = owner.lower()
        address = self._by_owner.pop(key, None)
        self._owner_names.pop(key, None)
        siblings = self._children.get(_parent_of(key))
        if siblings is not None:
            siblings.pop(key, None)
            if not siblings:
                del self._children[_parent_of(key)]
        for block_address in self._blocks.pop(key, []):
            if self._by_address.pop(block_address, None) is not None:
                self._free(block_address)
        if address is not None and self._by_address.pop(address, None) is not None:
            self._free(address)
