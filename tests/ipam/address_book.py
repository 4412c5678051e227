"""Test support, the node side's allocation book: which secondary IPs a node holds, which pod uses
which, which are on their way out, and checks that no address is handed out twice.

Owns ``AddressBook`` (one node's IPs: name -> address, the pod using it, pending release, when it
was first seen) and ``find_address_conflicts`` (the cluster-wide check that no address is listed
under two names or in two nodes' NodeNetworkConfigs). The book is what the node side keeps: it
hands a free IP to a new pod (the oldest free one, so the newest stay free for release, see
``release``), takes it back when the pod ends, and marks IPs pending release. It can be rebuilt
from observed state at any time (``sync_status`` + ``sync_pods``).

No product code keeps such a book (Azure CNS does, on the node), so it lives with the tests:
``test_simulation`` uses it as a stand-in for CNS, and the node network config harness uses
``find_address_conflicts`` as an invariant. Pure, in memory, times passed in; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["AddressBook", "AddressConflict", "NoFreeAddressError", "SecondaryIp", "find_address_conflicts"]


class NoFreeAddressError(LookupError):
    """No IP of the node is free for another pod: demand has outrun supply."""


@dataclass
class SecondaryIp:
    """One secondary IP of a node."""

    name: str
    address: str
    first_seen: float
    pod: str | None = None
    pending_release: bool = False
    sequence: int = 0
    """Order of recording in the book; breaks ties between IPs first seen at the same time."""

    @property
    def free(self) -> bool:
        return self.pod is None and not self.pending_release


class AddressBook:
    """One node's secondary IPs (see the module docstring)."""

    def __init__(self) -> None:
        self._by_name: dict[str, SecondaryIp] = {}
        self._name_by_address: dict[str, str] = {}
        self._name_by_pod: dict[str, str] = {}
        self._recorded = 0

    # -- reading ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> SecondaryIp | None:
        return self._by_name.get(name)

    def entries(self) -> list[SecondaryIp]:
        """All IPs, oldest first (by first-seen time, then the order they were added)."""
        return sorted(self._by_name.values(), key=lambda entry: (entry.first_seen, entry.sequence))

    def assignments(self) -> list[tuple[str, str]]:
        """``(name, address)`` pairs, oldest first."""
        return [(entry.name, entry.address) for entry in self.entries()]

    def address_of_pod(self, pod: str) -> str | None:
        name = self._name_by_pod.get(pod)
        return None if name is None else self._by_name[name].address

    def in_use_addresses(self) -> set[str]:
        return {entry.address for entry in self._by_name.values() if entry.pod is not None}

    def pending_release(self) -> list[str]:
        return [entry.name for entry in self.entries() if entry.pending_release]

    def free(self) -> list[str]:
        return [entry.name for entry in self.entries() if entry.free]

    # -- syncing with observed state ------------------------------------------------------------

    def sync_status(self, assignments: Sequence[tuple[str, str]], now: float) -> list[str]:
        """Make the book hold exactly ``assignments`` (the status's ``(name, address)`` pairs):
        new names are recorded as first seen at ``now`` (in the given order), missing names are
        dropped. Returns the pods that lost their IP that way (their IP was released under them:
        a bug elsewhere, the caller reports it). Raises ValueError if the status lists an
        address or a name twice."""
        names = [name for name, _ in assignments]
        addresses = [address for _, address in assignments]
        if len(set(names)) != len(names):
            raise ValueError("status lists a secondary IP name twice")
        if len(set(addresses)) != len(addresses):
            raise ValueError("status lists an address twice")
        wanted = dict(assignments)
        orphaned: list[str] = []
        for name in list(self._by_name):
            entry = self._by_name[name]
            if wanted.get(name) != entry.address:
                if entry.pod is not None:
                    orphaned.append(entry.pod)
                self._remove(name)
        for name, address in assignments:
            if name not in self._by_name:
                self._recorded += 1
                entry = SecondaryIp(name=name, address=address, first_seen=now, sequence=self._recorded)
                self._by_name[name] = entry
                self._name_by_address[address] = name
        return orphaned

    def sync_pods(self, pod_addresses: Mapping[str, str]) -> list[str]:
        """Make the pod bindings exactly ``pod_addresses`` (pod -> the address it reports).
        Returns the pods whose address the book does not hold (they use an IP from elsewhere;
        a pod cannot bind an IP another pod already holds, it is returned too)."""
        for pod in list(self._name_by_pod):
            self._unbind(pod)
        strangers: list[str] = []
        for pod, address in pod_addresses.items():
            name = self._name_by_address.get(address)
            if name is None or self._by_name[name].pod is not None:
                strangers.append(pod)
                continue
            entry = self._by_name[name]
            entry.pod = pod
            entry.pending_release = False
            self._name_by_pod[pod] = name
        return strangers

    def sync_pending(self, names: Iterable[str]) -> None:
        """Mark exactly ``names`` pending release (names not in the book, or in use, are ignored)."""
        wanted = set(names)
        for entry in self._by_name.values():
            entry.pending_release = entry.name in wanted and entry.pod is None

    # -- changes ------------------------------------------------------------------------------

    def bind(self, pod: str) -> SecondaryIp:
        """Give ``pod`` an IP: the one it already has, else the oldest free one. Raises
        ``NoFreeAddressError`` when none is free."""
        existing = self._name_by_pod.get(pod)
        if existing is not None:
            return self._by_name[existing]
        for entry in self.entries():
            if entry.free:
                entry.pod = pod
                self._name_by_pod[pod] = entry.name
                return entry
        raise NoFreeAddressError(f"no free IP for pod {pod}: {len(self)} held, none free")

    def unbind(self, pod: str) -> str | None:
        """Take ``pod``'s IP back (it becomes free); returns its name, None if it had none."""
        return self._unbind(pod)

    def mark_pending(self, names: Iterable[str]) -> None:
        """Mark free IPs pending release. Raises ValueError for an unknown name or one in use."""
        for name in names:
            entry = self._by_name.get(name)
            if entry is None:
                raise ValueError(f"unknown secondary IP {name}")
            if entry.pod is not None:
                raise ValueError(f"secondary IP {name} is in use by {entry.pod}")
            entry.pending_release = True

    def check(self) -> None:
        """Assert the book's invariants (for tests and debugging): each address and each pod
        appears once, indexes agree, no IP is both in use and pending release."""
        addresses = [entry.address for entry in self._by_name.values()]
        if len(addresses) != len(set(addresses)):
            raise AssertionError("an address is held under two names")
        pods = [entry.pod for entry in self._by_name.values() if entry.pod is not None]
        if len(pods) != len(set(pods)):
            raise AssertionError("a pod holds two IPs")
        if {pod: name for pod, name in self._name_by_pod.items()} != {
            entry.pod: entry.name for entry in self._by_name.values() if entry.pod is not None
        }:
            raise AssertionError("pod index out of step")
        if self._name_by_address != {entry.address: entry.name for entry in self._by_name.values()}:
            raise AssertionError("address index out of step")
        if any(entry.pod is not None and entry.pending_release for entry in self._by_name.values()):
            raise AssertionError("an IP is both in use and pending release")

    def _unbind(self, pod: str) -> str | None:
        name = self._name_by_pod.pop(pod, None)
        if name is not None:
            self._by_name[name].pod = None
        return name

    def _remove(self, name: str) -> None:
        entry = self._by_name.pop(name)
        self._name_by_address.pop(entry.address, None)
        if entry.pod is not None:
            self._name_by_pod.pop(entry.pod, None)


@dataclass(frozen=True)
class AddressConflict:
    """An address listed more than once: where, as ``(node, name)`` pairs."""

    address: str
    holders: tuple[tuple[str, str], ...]


def find_address_conflicts(
    assignments_by_node: Mapping[str, Sequence[tuple[str, str]]],
) -> list[AddressConflict]:
    """Every address that appears under more than one ``(node, name)`` across all nodes'
    ipAssignments (an empty list is the healthy answer), sorted by address."""
    holders: dict[str, list[tuple[str, str]]] = {}
    for node, assignments in assignments_by_node.items():
        for name, address in assignments:
            holders.setdefault(address, []).append((node, name))
    return [
        AddressConflict(address=address, holders=tuple(found))
        for address, found in sorted(holders.items())
        if len(found) > 1
    ]
