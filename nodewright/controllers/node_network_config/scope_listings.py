"""Cold-start reads a Uniform scale set at a time (issue 32): ``ScaleSetListings`` and
``MachineNicLocator``.

A node's first pass needs its machine's primary NIC ID (the locator) and a snapshot of that NIC
(the ``NicBook``). Read one node at a time, that is two ARM GETs per node (the instance model,
then the NIC); a cold start of 1,000 nodes spent 2,000 of ARM's reads on them. Here both come
from one paged list of the scale set's NICs (ListVirtualMachineScaleSetNetworkInterfaces), shared
by every pass that needs it:

- ``ScaleSetListings.current`` lists a scale set at most once at a time: concurrent passes wait
  for the list in flight instead of each listing (single flight, a lock per scale set), and a
  listing younger than ``max_age`` (the reconciler uses ``min(nicRefreshSeconds, 10 s)``: no
  older than a snapshot the book would serve) is reused, so a wave of new nodes in one scale
  set costs about one list per ``max_age``, not two GETs per node. A failed list (``CloudError``)
  answers None, backs the scale set off (``backoffBaseSeconds`` doubling up to
  ``backoffCapSeconds``) and logs one line per run of failures; callers fall back to GETs.
- ``ScaleSetListings.newer_nic`` serves a pass that must read its NIC again before a write (its
  snapshot is older than a plan may write from; at cold start, a write our budget kept back):
  from a listing sent since, while young, and, during a burst of such reads in one scale set,
  from a new list shared by the burst; a read alone is left to a GET.
- ``ScaleSetListing`` keeps the listed NICs by ID and, per instance, its primary NIC: the one
  whose ``primary`` property is true, else its only NIC. An instance with several NICs none of
  them marked, or one the list does not show (a brand-new instance), is not answered here.
- ``MachineNicLocator`` answers a Uniform instance's primary NIC from its scale set's listing and
  anything else (VMs, Flexible members, instances the listing does not show, every machine when
  there are no listings) through ``ComputeOperations`` (a GET of the model); it remembers each
  answer once, in one memo, as a machine's NICs do not change over its life.

The listing's NICs stay in the listing (the book is not filled with NICs no node asked for);
``PassReader`` takes a node's NIC from it when the book has no snapshot. Side effects: ARM reads,
log lines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from nodewright.cloud.errors import CloudError
from nodewright.cloud.models import NicInfo, NicListing
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    MachineId,
    ScaleSetInstanceId,
    parse_network_interface_id,
)
from nodewright.controllers.node_network_config.cloud import ComputeOperations, NicLocator
from nodewright.controllers.node_network_config.nic_watch import NetworkInterfaceLister
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.ipam.backoff import backoff_delay
from nodewright.runtime import get_logger

__all__ = [
    "LISTING_MAX_AGE_SECONDS",
    "MachineNicLocator",
    "ScaleSetListing",
    "ScaleSetListings",
    "primary_nics",
    "scale_set_instance_of",
    "with_listings",
]

log = get_logger(__name__)

LISTING_MAX_AGE_SECONDS = 10.0
"""The most a listing is reused for (``nicRefreshSeconds`` when that is shorter)."""


def primary_nics(nics: tuple[NicInfo, ...]) -> dict[str, str]:
    """Per instance (its lowercased ARM ID), the ID of its primary NIC: the one marked primary,
    else its only NIC; instances with several NICs, none marked, are left out. Pure."""
    by_instance: dict[str, list[NicInfo]] = {}
    for nic in nics:
        instance = scale_set_instance_of(nic.id)
        if instance is not None:
            by_instance.setdefault(instance.key, []).append(nic)
    primaries: dict[str, str] = {}
    for instance_key, found in by_instance.items():
        marked = [nic for nic in found if nic.primary]
        if len(marked) == 1:
            primaries[instance_key] = marked[0].id
        elif len(found) == 1:
            primaries[instance_key] = found[0].id
    return primaries


@dataclass(frozen=True)
class ScaleSetListing:
    """One list of a scale set's NICs, sent at ``listed_at`` (the reconciler's clock)."""

    listed_at: float
    nics: Mapping[str, NicInfo]
    """The listed NICs by lowercased ID."""
    primaries: Mapping[str, str]
    """Per instance (lowercased ID), its primary NIC's ID (``primary_nics``)."""

    @classmethod
    def of(cls, listing: NicListing, listed_at: float) -> ScaleSetListing:
        return cls(listed_at, {nic.id.lower(): nic for nic in listing.nics}, primary_nics(listing.nics))

    def primary_nic(self, instance: ScaleSetInstanceId) -> str | None:
        return self.primaries.get(instance.key)

    def nic(self, nic_id: str) -> NicInfo | None:
        return self.nics.get(nic_id.lower())


@dataclass
class _Scope:
    lock: threading.Lock = field(default_factory=threading.Lock)
    listing: ScaleSetListing | None = None
    failures: int = 0
    retry_at: float = float("-inf")
    asked_newer_at: float = float("-inf")


class ScaleSetListings:
    """Single-flight, briefly reused lists of Uniform scale sets' NICs (see the module docstring)."""

    def __init__(
        self,
        lister: NetworkInterfaceLister,
        *,
        max_age: float,
        backoff: tuple[float, float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister, self._max_age, self._clock = lister, max_age, clock
        self._backoff_base, self._backoff_cap = backoff
        self._scopes: dict[tuple[str, str], _Scope] = {}
        self._lock = threading.Lock()

    def current(self, resource_group: str, scale_set: str) -> ScaleSetListing | None:
        """The scale set's listing: a young one, the one in flight, or a new list; None while
        listing it fails (the caller reads what it needs with GETs)."""
        scope = self._scope(resource_group, scale_set)
        with scope.lock:  # one list per scale set at a time: the others wait for its answer
            now = self._clock()
            if scope.listing is not None and now - scope.listing.listed_at < self._max_age:
                return scope.listing
            if now < scope.retry_at:
                return None
            scope.listing = None
            try:
                listing = self._lister.list_scale_set_network_interfaces(resource_group, scale_set)
            except CloudError as error:
                scope.failures += 1
                delay = backoff_delay(scope.failures, self._backoff_base, self._backoff_cap)
                scope.retry_at = self._clock() + delay
                if scope.failures == 1:
                    log.warning(
                        "Listing a scale set's NICs failed; reading them one at a time",
                        scale_set=f"{resource_group}/{scale_set}",
                        retry_in=f"{delay:.1f}s",
                        error=str(error),
                    )
                return None
            if scope.failures:
                log.info("Listed a scale set's NICs again", scale_set=f"{resource_group}/{scale_set}")
            scope.failures, scope.retry_at = 0, float("-inf")
            scope.listing = ScaleSetListing.of(listing, now)
            return scope.listing

    def _scope(self, resource_group: str, scale_set: str) -> _Scope:
        with self._lock:
            return self._scopes.setdefault((resource_group.lower(), scale_set.lower()), _Scope())

    def nic(self, nic_id: str) -> tuple[NicInfo, float] | None:
        """A Uniform instance's NIC as its scale set's listing shows it, and when that was
        listed; None for other NICs, a failed list, or a NIC the listing does not show."""
        instance = scale_set_instance_of(nic_id)
        if instance is None:
            return None
        return _shown(self.current(instance.resource_group, instance.scale_set_name), nic_id)

    def newer_nic(self, nic_id: str, newer_than: float) -> tuple[NicInfo, float] | None:
        """For a NIC read again before a write (its snapshot too old to write from): the NIC as a
        listing sent after ``newer_than`` and younger than ``max_age`` shows it. While its scale
        set's NICs are read again in a burst (another within ``max_age``), an old listing is
        replaced by a new list, shared as ``current``'s are; a read alone answers None and the
        caller GETs (one read either way, and a listing's pages grow with the scale set)."""
        instance = scale_set_instance_of(nic_id)
        if instance is None:
            return None
        scope = self._scope(instance.resource_group, instance.scale_set_name)
        with self._lock:
            now = self._clock()
            asked_before, scope.asked_newer_at = scope.asked_newer_at, now
            listing = scope.listing
        if listing is None or now - listing.listed_at >= self._max_age:
            if now - asked_before >= self._max_age:
                return None
            listing = self.current(instance.resource_group, instance.scale_set_name)
        return _shown(listing, nic_id) if listing is not None and listing.listed_at > newer_than else None


def scale_set_instance_of(nic_id: str) -> ScaleSetInstanceId | None:
    """The Uniform scale-set instance a NIC belongs to; None for other NICs and bad IDs. Pure."""
    try:
        return parse_network_interface_id(nic_id).scale_set_instance
    except InvalidResourceIdError:
        return None


def _shown(listing: ScaleSetListing | None, nic_id: str) -> tuple[NicInfo, float] | None:
    nic = listing.nic(nic_id) if listing is not None else None
    return (nic, listing.listed_at) if nic is not None and listing is not None else None


class MachineNicLocator:
    """A ``NicLocator``: Uniform instances from their scale set's listing (when ``listings`` is
    given), the rest (and the instances it does not show) from ``compute``; answers are
    remembered, each in one place."""

    def __init__(self, compute: ComputeOperations, listings: ScaleSetListings | None = None) -> None:
        self._compute, self._listings = compute, listings
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def primary_network_interface(self, machine: MachineId) -> str:
        """Raises ``NotFoundError`` (from ``compute``) when the machine is gone or has no NIC."""
        with self._lock:
            known = self._known.get(machine.key)
        if known is not None:
            return known
        nic_id = self._listed(machine)
        if nic_id is None:
            nic_id = self._compute.get_primary_network_interface(machine)
        with self._lock:
            self._known[machine.key] = nic_id
        return nic_id

    def _listed(self, machine: MachineId) -> str | None:
        if self._listings is None or not isinstance(machine, ScaleSetInstanceId):
            return None
        listing = self._listings.current(machine.resource_group, machine.scale_set_name)
        return listing.primary_nic(machine) if listing is not None else None


def with_listings(
    network: object,
    compute: ComputeOperations,
    settings: NodeNetworkConfigSettings,
    clock: Callable[[], float],
) -> tuple[NicLocator, ScaleSetListings | None]:
    """The reconciler's locator and listings: when ``network`` can list scale sets' NICs, the
    listings (reused for ``min(nicRefreshSeconds, LISTING_MAX_AGE_SECONDS)``) and a
    ``MachineNicLocator`` that asks them before ``compute``; else one that asks ``compute``
    alone, and no listings."""
    if not isinstance(network, NetworkInterfaceLister):
        return MachineNicLocator(compute), None
    listings = ScaleSetListings(
        network,
        max_age=min(settings.nic_refresh_seconds, LISTING_MAX_AGE_SECONDS),
        backoff=(settings.backoff_base_seconds, settings.backoff_cap_seconds),
        clock=clock,
    )
    return MachineNicLocator(compute, listings), listings
