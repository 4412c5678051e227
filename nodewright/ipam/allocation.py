"""The control plane's half of a NodeNetworkConfig: which secondary IP configurations to add to
and remove from the node's NIC so that it matches the spec, and what status to report.

Owns ``plan_allocation`` (a pure decision from what the NIC holds, what the spec asks, what the
status accounts for and which addresses pods use), ``AllocationPlan`` and ``status_assignments``
(the count it plans to comes from ``count.requested_count``). Rules:

- Release only names listed in ipsNotInUse, and never one whose address a pod uses (``refused``);
  names not on the NIC are reported (``unknown``) and otherwise ignored.
- Never exceed the NIC's capacity (255 secondary IPs: 256 IP configurations minus the primary).
- IP configurations on the NIC that the status does not list are *unaccounted* (left by a crash
  between the NIC write and the status write, or by someone else). One whose address a pod uses
  is adopted at once, as is one the caller says to ``keep``; others are adopted when the node
  needs more IPs (cheaper than adding new ones: no cloud call); the rest wait for the leak
  tracker's grace period and are then released (``collected``).
- Add what is still missing, at most ``add_limit`` at once (the batch halving state of
  ``backoff``), at most the capacity.

The status lists the NIC's accounted IP configurations that have an address, in NIC order (new
ones are appended to a NIC, so this is oldest first, the order ``release`` relies on). Pure;
ipsNotInUse is sorted by ``request.split_listed``, as the spec's side sorts it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from nodewright.ipam.request import split_listed
from nodewright.ipam.scaler import MAX_SECONDARY_IPS_PER_NIC

__all__ = [
    "AllocationPlan",
    "NicIpConfiguration",
    "plan_allocation",
    "status_assignments",
]


@dataclass(frozen=True)
class NicIpConfiguration:
    """A secondary IP configuration as the NIC reports it; ``address`` is None until Azure has
    given it one."""

    name: str
    address: str | None


@dataclass(frozen=True)
class AllocationPlan:
    """What to do on the NIC, and what was found along the way."""

    release: tuple[str, ...] = ()
    """Names from ipsNotInUse to remove from the NIC."""
    collected: tuple[str, ...] = ()
    """Unaccounted, unused names past their grace period: also removed from the NIC."""
    add_count: int = 0
    """How many new secondary IP configurations to create."""
    adopt: tuple[str, ...] = ()
    """Unaccounted names taken into the pool (listed in status from now on)."""
    unaccounted: tuple[str, ...] = ()
    """Unaccounted names left alone for now: the leak tracker should watch them."""
    refused: tuple[str, ...] = ()
    """Names in ipsNotInUse that a pod uses: kept."""
    unknown: tuple[str, ...] = ()
    """Names in ipsNotInUse that are not on the NIC."""
    short_by: int = 0
    """How many IPs the request is still short of after this plan (capacity or add limit)."""

    @property
    def removals(self) -> tuple[str, ...]:
        return (*self.release, *self.collected)

    @property
    def changes_nic(self) -> bool:
        return bool(self.release or self.collected or self.add_count)


def plan_allocation(
    *,
    requested: int | None,
    ips_not_in_use: Sequence[str],
    nic: Sequence[NicIpConfiguration],
    accounted: Collection[str],
    in_use_addresses: Collection[str],
    collectable: Collection[str] = (),
    add_limit: int | None = None,
    capacity: int = MAX_SECONDARY_IPS_PER_NIC,
    keep: Collection[str] = (),
) -> AllocationPlan:
    """Plan the NIC changes for one node (see the module docstring for the rules).

    ``requested`` is the NIC's entry count (``count.nic_entries_wanted``; None: only report,
    change nothing); ``nic`` the NIC's secondary IP configurations in NIC order; ``accounted`` the
    names the status lists; ``collectable`` the unaccounted names the leak tracker says are past their
    grace period; ``add_limit`` caps this round's additions (None: no cap); ``keep`` (a set)
    names unaccounted configurations to adopt at once, needed or not, as if a pod used them."""
    address_of = {configuration.name: configuration.address for configuration in nic}
    release, unknown, refused = split_listed(address_of, in_use_addresses, ips_not_in_use)
    if requested is None:
        return AllocationPlan(refused=tuple(refused), unknown=tuple(unknown))

    releasing = set(release)
    remaining = [configuration.name for configuration in nic if configuration.name not in releasing]
    # A name without an address is in no pod's use (the addresses are strings).
    kept = [n for n in remaining if n in accounted or n in keep or address_of[n] in in_use_addresses]
    kept_set = set(kept)
    spare = [name for name in remaining if name not in kept_set]
    adopt_now = [name for name in kept if name not in accounted]

    needed = max(0, requested - len(kept))
    # Prefer spare configurations that already have an address: they can serve a pod at once.
    spare_by_readiness = sorted(spare, key=lambda name: address_of[name] is None)
    adopted_for_demand = spare_by_readiness[:needed]
    needed -= len(adopted_for_demand)
    adopted_set = set(adopted_for_demand)
    left_over = [name for name in spare if name not in adopted_set]
    collected = [name for name in left_over if name in collectable]
    collected_set = set(collected)
    unaccounted = [name for name in left_over if name not in collected_set]

    room = max(0, capacity - (len(nic) - len(release) - len(collected)))
    add_count = min(needed, room)
    if add_limit is not None:
        add_count = min(add_count, max(0, add_limit))
    return AllocationPlan(
        release=tuple(release),
        collected=tuple(collected),
        add_count=add_count,
        adopt=(*adopt_now, *adopted_for_demand),
        unaccounted=tuple(unaccounted),
        refused=tuple(refused),
        unknown=tuple(unknown),
        short_by=needed - add_count,
    )


def status_assignments(
    nic: Sequence[NicIpConfiguration], accounted: Collection[str]
) -> list[tuple[str, str]]:
    """The ``(name, address)`` pairs for status.networkContainers[0].ipAssignments: the NIC's
    accounted configurations that have an address, in NIC order."""
    return [
        (configuration.name, configuration.address)
        for configuration in nic
        if configuration.name in accounted and configuration.address is not None
    ]
