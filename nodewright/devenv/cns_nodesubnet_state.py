"""The state one Azure CNS (NodeSubnet mode, v1.6.48) keeps on one node, and the rules that change
it: pure, no I/O, no clock of its own.

Owns ``FetchSchedule`` (CNS's ``refresh`` package ``Fetcher``: the cached answer and the interval)
and ``CnsNodeState`` (``cns/restserver``: the network container's stored request, the IP states,
the endpoint state):

- ``FetchSchedule.observe``: the first fetch is always handed on, even a failed one (then as an
  empty answer); afterwards a failed fetch changes nothing (interval kept), an answer equal to
  the cached one doubles the interval up to the maximum and is not handed on, any other answer
  is cached *before* it is applied, resets the interval to the minimum and is handed on. So an
  answer whose update CNS refuses is never applied again: only a different answer is.
- ``CnsNodeState.update`` (``saveNetworkContainerGoalState`` → ``updateIPConfigsStateUntransacted``):
  the new address list replaces the stored request first; the addresses the old request had and
  the new one lacks are "to be deleted"; if one of them is Assigned, the update is refused and
  nothing else changes: the other dropped addresses stay Available and the new ones are not
  added. Since the stored request already lacks the dropped addresses, no later update deletes
  them: they are stranded (``stranded``) until CNS restarts.
- ``apply_fetch``: one fetch through both (``IPFetcher.ProcessInterfaces``: an answer with no
  interfaces is an error that applies nothing; ``UpdateIPsForNodeSubnet``).
- ``assign``/``release``: CNI ADD takes any Available address (``AssignAvailableIPConfigs``
  walks a Go map: no order), CNI DEL makes it Available again (``releaseIPConfigs``).
- ``restart``: the process's memory is lost; the state file (the stored request as of the last
  successful update) and the endpoint state survive, and ``ReconcileInitialCNSState`` rebuilds
  the pool from the endpoint state alone, every such address Assigned to its pod again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from nodewright.devenv.cns_nodesubnet_nmagent import EMPTY_ANSWER, Interfaces, secondary_addresses

__all__ = [
    "MAX_FETCH_INTERVAL_SECONDS",
    "MIN_FETCH_INTERVAL_SECONDS",
    "NODESUBNET_NETWORK_CONTAINER_ID",
    "CnsNodeState",
    "FetchOutcome",
    "FetchSchedule",
    "apply_fetch",
]

MIN_FETCH_INTERVAL_SECONDS = 4.0
MAX_FETCH_INTERVAL_SECONDS = 1024.0
NODESUBNET_NETWORK_CONTAINER_ID = "55022629-3854-499b-7133-5e6887959f4ea"
"""CNS's id for the network container that holds NodeSubnet's IPs (its source says: the md5 of
``NodeSubnetNC_IPv4``)."""


@dataclass
class FetchSchedule:
    """One node's NMAgent fetcher (module docstring). ``next_fetch`` is when it is due."""

    minimum: float = MIN_FETCH_INTERVAL_SECONDS
    maximum: float = MAX_FETCH_INTERVAL_SECONDS
    interval: float = MIN_FETCH_INTERVAL_SECONDS
    cache: Interfaces | None = None
    """The last answer kept (None: the first fetch has not run)."""
    next_fetch: float = 0.0

    def observe(self, answer: Interfaces | None, now: float) -> Interfaces | None:
        """Take one fetch's outcome (None: it failed); returns the answer to hand on (None: none)
        and sets when the next fetch is due."""
        handed_on: Interfaces | None = None
        if self.cache is None:
            self.cache = handed_on = answer or EMPTY_ANSWER
        elif answer is None:
            pass
        elif answer == self.cache:
            self.interval = min(self.interval * 2, self.maximum)
        else:
            self.cache = handed_on = answer
            self.interval = self.minimum
        self.next_fetch = now + self.interval
        return handed_on


AVAILABLE = ""
"""The pod key of an Available address in ``CnsNodeState.addresses``."""


@dataclass
class CnsNodeState:
    """CNS's IP state on one node (module docstring)."""

    stored_request: frozenset[str] = frozenset()
    """The NodeSubnet network container's secondary IPs, as last stored (refused updates too)."""
    saved_request: frozenset[str] = frozenset()
    """The same as of the last successful update: what the state file holds."""
    addresses: dict[str, str] = field(default_factory=dict)
    """Address -> the pod key it is Assigned to, or ``AVAILABLE`` (CNS's IP config states)."""
    endpoints: dict[str, str] = field(default_factory=dict)
    """Pod key -> its address: the endpoint state, kept on disk across restarts."""
    ready: bool = False
    """Whether CNS has written the CNI config (after its first successful update): until then
    no CNI ADD can reach it."""
    refused_updates: int = 0

    def update(self, fetched: Sequence[str]) -> bool:
        """Apply one fetched address list; returns False when CNS refused it."""
        new = frozenset(fetched)
        to_delete = self.stored_request - new
        self.stored_request = new
        if any(self.addresses.get(address, AVAILABLE) != AVAILABLE for address in to_delete):
            self.refused_updates += 1
            return False
        for address in to_delete:
            self.addresses.pop(address, None)
        for address in fetched:
            self.addresses.setdefault(address, AVAILABLE)
        self.saved_request = new
        self.ready = True
        return True

    def available(self) -> list[str]:
        return sorted(a for a, pod in self.addresses.items() if pod == AVAILABLE)

    def assign(self, pod: str, choose: Callable[[Sequence[str]], str]) -> str | None:
        """CNI ADD for ``pod``: its address (the one it holds already, if any), or None when CNS
        is not ready or has no Available address."""
        if pod in self.endpoints:
            return self.endpoints[pod]
        free = self.available()
        if not self.ready or not free:
            return None
        address = choose(free)
        self.addresses[address] = pod
        self.endpoints[pod] = address
        return address

    def release(self, pod: str) -> str | None:
        """CNI DEL for ``pod``: its address becomes Available; returns it (None: it held none)."""
        address = self.endpoints.pop(pod, None)
        if address is not None and address in self.addresses:
            self.addresses[address] = AVAILABLE
        return address

    def stranded(self) -> set[str]:
        """Addresses CNS holds that its stored request no longer lists: no update deletes them."""
        return set(self.addresses) - self.stored_request

    def restart(self) -> None:
        """CNS restarts: memory lost, state file and endpoint state kept, pool rebuilt from the
        endpoint state (``ReconcileInitialCNSState``); the CNI config waits for a new fetch."""
        self.stored_request = self.saved_request
        self.addresses = {}
        self.ready = False
        self.update(sorted(set(self.endpoints.values())))
        self.ready = False
        for pod, address in self.endpoints.items():
            self.addresses[address] = pod


FetchOutcome = Literal["failed", "unchanged", "no-interfaces", "applied", "refused"]


def apply_fetch(
    schedule: FetchSchedule, state: CnsNodeState, answer: Interfaces | None, now: float
) -> FetchOutcome:
    """One fetch (None: it failed) through the schedule and, when handed on, into the pool."""
    handed_on = schedule.observe(answer, now)
    if handed_on is None:
        return "failed" if answer is None else "unchanged"
    if not handed_on.entries:
        return "no-interfaces"
    return "applied" if state.update(secondary_addresses(handed_on)) else "refused"
