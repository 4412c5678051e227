"""The node's half of a NodeNetworkConfig: what to write into spec.requestedIPCount and
spec.ipsNotInUse, given the pods' demand and the IPs the control plane has provided.

Owns ``compute_request``, ``PoolRequest`` and ``split_listed`` (which listed names are pending
release, gone or in use; the requested-count rule and ``allocation`` sort with it too). Wire semantics
(as Azure CNS and its control plane use them): ``ipsNotInUse`` names IPs (by their ipAssignments
name) the node gives back; ``requestedIPCount`` is how many IPs the node wants to hold once those
are gone.

Two failures of Azure CNS's pool monitor are ruled out by construction:

- azure-container-networking #962: a scale-up right after a scale-down rebuilt the spec without
  the IPs already marked for release, so they were neither released nor used again. Here a name
  stays in ipsNotInUse for as long as it is listed in status (it leaves only once the control
  plane has really released it), whatever the new target.
- #4891: a stale ipsNotInUse was never cleared when the target did not change, because the
  spec was only rewritten on a target change. Here ipsNotInUse is recomputed on every call
  from status (released names drop out) and ``PoolRequest.differs_from`` tells the caller to
  write whenever the requested count *or the set of names* differs.

One correction of bad input: a name in ipsNotInUse whose address a pod uses is taken back out
(``reclaimed``); releasing it would cut a running pod off. Pure; imports nothing internal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from nodewright.ipam.blocks import address_count
from nodewright.ipam.release import choose_ips_to_release
from nodewright.ipam.scaler import PoolScaler, pool_target

__all__ = ["PoolRequest", "compute_request", "split_listed"]


@dataclass(frozen=True)
class PoolRequest:
    """The spec to write and why it looks the way it does."""

    requested_ip_count: int
    ips_not_in_use: tuple[str, ...]
    target: int
    newly_marked: tuple[str, ...] = ()
    released: tuple[str, ...] = ()
    """Names that were in ipsNotInUse and are gone from status: released, so dropped."""
    reclaimed: tuple[str, ...] = ()
    """Names that were in ipsNotInUse although a pod uses their address: taken back."""

    def differs_from(self, requested_ip_count: int, ips_not_in_use: Sequence[str]) -> bool:
        """Whether the current spec must be rewritten: the count or the set of names changed."""
        return requested_ip_count != self.requested_ip_count or set(ips_not_in_use) != set(
            self.ips_not_in_use
        )


def split_listed(
    address_of: Mapping[str, str | None], in_use_addresses: Collection[str], ips_not_in_use: Sequence[str]
) -> tuple[list[str], list[str], list[str]]:
    """The names in ``ips_not_in_use``, once each in listed order, as (pending release; gone:
    not in ``address_of``, the status's or the NIC's names; in use: a pod uses the address).
    Only pending ones are not held (``allocation`` releases them, the rest it refuses or reports)."""
    pending: list[str] = []
    gone: list[str] = []
    used: list[str] = []
    for name in dict.fromkeys(ips_not_in_use):
        if name not in address_of:
            gone.append(name)
        elif address_of[name] in in_use_addresses:
            used.append(name)
        else:
            pending.append(name)
    return pending, gone, used


def compute_request(
    *,
    demand: int,
    scaler: PoolScaler,
    assignments: Sequence[tuple[str, str]],
    in_use_addresses: Collection[str],
    ips_not_in_use: Sequence[str],
    exhausted: bool = False,
    releasable_addresses: Collection[str] | None = None,
) -> PoolRequest:
    """The spec for a node with ``demand`` pods that hold ``in_use_addresses``, given the status's
    ``assignments`` (``(name, address)``, oldest first) and the current spec's ``ips_not_in_use``.

    - Names still listed in status stay pending release; names gone from status are dropped.
    - If the target is at least what the node holds besides the pending names, the request is
      the target (the control plane adds the difference). Counts are in addresses (a /28 prefix
      block counts 16; blocks are never released, so their callers pass no releasable ones).
    - Otherwise the surplus is marked for release among the free IPs (``release`` rules) and the
      request is what remains; when too few are free the request stays above the target.
    - ``releasable_addresses``, when given, limits what may be newly marked to those addresses
      (empty: no scale-down now, as under hysteresis or a consumer with no release handshake)."""
    address_of = dict(assignments)
    pending, released, reclaimed = split_listed(address_of, in_use_addresses, ips_not_in_use)
    pending_set = set(pending)
    retained = [(name, address) for name, address in assignments if name not in pending_set]
    target = pool_target(demand, scaler, exhausted=exhausted)
    holding = address_count(address for _, address in retained)
    marked: list[str] = []
    if target < holding:
        held = set(in_use_addresses)
        if releasable_addresses is not None:
            allowed = set(releasable_addresses)
            held |= {address for _, address in retained if address not in allowed}
        marked = choose_ips_to_release(
            retained, holding - target, in_use_addresses=held, pending_release=pending_set
        )
        requested = holding - address_count(address_of[name] for name in marked)
    else:
        requested = target
    return PoolRequest(
        requested_ip_count=requested,
        ips_not_in_use=(*pending, *marked),
        target=target,
        newly_marked=tuple(marked),
        released=tuple(released),
        reclaimed=tuple(reclaimed),
    )
