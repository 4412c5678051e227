"""``NicWatch``: the node_network_config controller's watch on Azure NICs, so that a cluster at rest
costs ARM reads per scale set, not per node (issue 32).

A poller (``runtime.sources.PollingSource``) lists the NICs a scope at a time, one paged call per
scope: a Uniform scale set's instance NICs (ListVirtualMachineScaleSetNetworkInterfaces) or a
resource group's standalone NICs (Flexible members and VMs). The scopes come from the NICs the
reconciler tracks in the ``NicBook``. A sweep lists every scope once, the lists spread evenly over
``nicListPeriodSeconds`` with +-10 % jitter, and slower when the pages read would exceed
``nicListReadsPerSecond`` (pages grow with nodes; the period stretches instead of the rate).

Each list refreshes the book's snapshots of the tracked NICs it shows, so passes do not GET them,
and enqueues a node only when its NIC differs from the book (etag or IP configurations: drift made
behind our back, a reimage, an upgrade to the scale set's model) or the book had none. A tracked
NIC missing from a complete list has its snapshot dropped and its node enqueued (the pass reads it
and reports it missing). A failed list backs its scope off (``backoffBaseSeconds`` doubling up to
``backoffCapSeconds``; the scope is skipped until then), logs one line per run of failures and
enqueues nothing. A Uniform scale set's tracked NICs, as listed, also go to
``after_scale_set_list``, and ``after_poll`` runs after each list (``boot_pools``: the model's
boot pool follows them). Side effects: ARM reads, log lines, requests in the controller's queue.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from nodewright.cloud.errors import CloudError
from nodewright.cloud.models import NicInfo, NicListing
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_network_interface_id
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.ipam.backoff import backoff_delay
from nodewright.runtime import Request, get_logger

__all__ = ["NetworkInterfaceLister", "NicScope", "NicWatch", "list_pace", "scope_of"]

log = get_logger(__name__)

JITTER = 0.1
SCOPES_REMEMBERED = 65_536
"""NIC IDs whose scope ``scope_of`` keeps (more than the NICs of the largest cluster)."""
IDLE_CHECK_SECONDS = 5.0
"""How soon to look again for NICs to watch when none is tracked yet (no I/O)."""


@runtime_checkable
class NetworkInterfaceLister(Protocol):
    """Paged NIC lists (``nodewright.cloud.network.NetworkService``)."""

    def list_scale_set_network_interfaces(self, resource_group: str, scale_set: str) -> NicListing: ...

    def list_network_interfaces(self, resource_group: str) -> NicListing: ...


@dataclass(frozen=True, order=True)
class NicScope:
    """What one list call covers: a Uniform scale set, or a resource group's standalone NICs."""

    resource_group: str
    scale_set: str | None = None

    def __str__(self) -> str:
        return f"{self.resource_group}/{self.scale_set}" if self.scale_set else self.resource_group


@functools.lru_cache(maxsize=SCOPES_REMEMBERED)
def scope_of(nic_id: str) -> NicScope | None:
    """The list that shows this NIC (lowercased names), None for an ID that is not a NIC's. Pure,
    and remembered: every list's comparison asks it of every tracked NIC (a thousand NICs and ten
    scale sets made it 7 % of the manager's CPU at rest, parsing the same IDs each minute)."""
    try:
        parsed = parse_network_interface_id(nic_id)
    except InvalidResourceIdError:
        return None
    instance = parsed.scale_set_instance
    if instance is not None:
        return NicScope(instance.resource_group.lower(), instance.scale_set_name.lower())
    return NicScope(parsed.resource_group.lower())


def list_pace(pages: int, scopes: int, period: float, reads_per_second: float, jitter: float) -> float:
    """Seconds to wait after a list of ``pages`` pages, in a sweep of ``scopes`` lists: the period's
    share times ``jitter`` (about 1), never less than the pages' share of the read rate. Pure."""
    share = period / max(1, scopes) * jitter
    return max(share, pages / reads_per_second if reads_per_second > 0 else 0.0)


@dataclass
class _ScopeHealth:
    failures: int = 0
    retry_at: float = float("-inf")


@dataclass
class NicWatch:
    """The poll function of the NIC watcher (see the module docstring)."""

    book: NicBook
    lister: NetworkInterfaceLister
    settings: NodeNetworkConfigSettings
    clock: Callable[[], float] = time.monotonic
    jitter: Callable[[], float] = field(default=lambda: random.uniform(1 - JITTER, 1 + JITTER))  # noqa: S311
    _round: list[NicScope] = field(default_factory=list)
    _round_size: int = 0
    _health: dict[NicScope, _ScopeHealth] = field(default_factory=dict)
    after_scale_set_list: Callable[[list[NicInfo]], None] | None = None
    """Given a Uniform scale set's tracked NICs after each list of it (``boot_pools``)."""
    after_poll: Callable[[], None] | None = None
    """Called after each list (``boot_pools``: the decisions due, on this thread)."""

    def poll(self, enqueue: Callable[[Request], None]) -> float:
        """List the next scope of the sweep and enqueue the nodes whose NIC changed; returns the
        seconds until the next list."""
        if not self._round:
            self._round = self._next_round()
            self._round_size = len(self._round)
        if not self._round:
            return min(IDLE_CHECK_SECONDS, self.settings.nic_list_period_seconds)
        scope = self._round.pop(0)
        pages = self._visit(scope, enqueue)
        if self.after_poll is not None:
            self.after_poll()
        return list_pace(
            pages,
            self._round_size,
            self.settings.nic_list_period_seconds,
            self.settings.nic_list_reads_per_second,
            self.jitter(),
        )

    def _next_round(self) -> list[NicScope]:
        scopes = {scope for nic_id in self.book.tracked() if (scope := scope_of(nic_id)) is not None}
        for gone in set(self._health) - scopes:
            del self._health[gone]
        ordered = sorted(scopes)
        if ordered:  # start each sweep at a random scope: no scope is always listed first
            start = random.randrange(len(ordered))  # noqa: S311 - spreading, not security
            ordered = ordered[start:] + ordered[:start]
        return ordered

    def _visit(self, scope: NicScope, enqueue: Callable[[Request], None]) -> int:
        """List one scope (unless backed off); returns the pages read."""
        health = self._health.setdefault(scope, _ScopeHealth())
        listed_at = self.clock()
        if listed_at < health.retry_at:
            return 0
        try:
            listing = self._list(scope)
        except CloudError as error:
            health.failures += 1
            delay = backoff_delay(
                health.failures, self.settings.backoff_base_seconds, self.settings.backoff_cap_seconds
            )
            health.retry_at = self.clock() + delay
            if health.failures == 1:
                log.warning(
                    "Listing NICs failed", scope=str(scope), retry_in=f"{delay:.1f}s", error=str(error)
                )
            return 1
        if health.failures:
            log.info("Listed NICs again", scope=str(scope), failures=health.failures)
        self._health[scope] = _ScopeHealth()
        tracked = self._compare(scope, listing, listed_at, enqueue)
        if scope.scale_set is not None and self.after_scale_set_list is not None and tracked:
            self.after_scale_set_list(tracked)
        return listing.pages

    def _list(self, scope: NicScope) -> NicListing:
        if scope.scale_set is not None:
            return self.lister.list_scale_set_network_interfaces(scope.resource_group, scope.scale_set)
        return self.lister.list_network_interfaces(scope.resource_group)

    def _compare(
        self, scope: NicScope, listing: NicListing, listed_at: float, enqueue: Callable[[Request], None]
    ) -> list[NicInfo]:
        """Refresh the book from the list, enqueue the nodes whose NIC changed; returns the
        tracked NICs the list shows."""
        shown = {nic.id.lower(): nic for nic in listing.nics}
        namespace = self.settings.namespace
        tracked: list[NicInfo] = []
        for nic_id, owner in self.book.tracked().items():
            if scope_of(nic_id) != scope:
                continue
            nic = shown.get(nic_id)
            if nic is not None:
                tracked.append(nic)
                changed = self.book.refresh_from_list(nic_id, nic, listed_at)
            else:
                changed = self.book.drop_snapshot(nic_id, listed_at)
            if changed:
                enqueue(Request(namespace, owner))
        return tracked
