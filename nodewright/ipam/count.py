"""The whole requested-count rule of a node's pool: what spec.requestedIPCount (and ipsNotInUse)
should say, and how many IPs the NIC is sized to for it.

Owns ``CountRule`` (the configured part), ``CountFacts`` (one pass's inputs), ``RequestedCount``
(the answer), ``requested_count`` (the rule) and ``nic_entries_wanted`` (the count in NIC
entries). The rule, in order:

1. Whose spec: when the node agent writes the spec (``computes`` False) it is followed as stored.
   Otherwise the wanted count is the pods' demand plus ``headroom`` (pods a NodeSubnet consumer
   may gain before it discovers new IPs), the target is ``scaler.pool_target`` (exhaustion
   mode on an exhausted subnet), and ``request.compute_request`` turns it into the spec: a
   request never below what the node holds besides names pending release, the surplus marked
   among free IPs, newest first.
2. Hysteresis: a surplus (the target below what the node holds besides the names pending
   release: listed in ipsNotInUse and not used by a pod, as ``compute_request`` counts) must have
   lasted ``scale_down_delay_seconds`` before anything is marked; its clock is an input
   (``surplus_since``, kept by the caller) and the new value an output. Nothing is marked when
   ``may_release`` is False (a consumer with no release handshake). Prefix blocks (``blocks``)
   are never released and keep no surplus clock; their count is in addresses, like every count
   here (a /28 entry counts 16).
3. The bound: a negative count is unusable (``allocate`` None: nothing on the NIC changes for
   it); one above the node's usable maximum (the scaler's maximum within one NIC's 255
   secondary IPs) is served up to that maximum. Both are reported as ``problem``.
4. NIC entries (``nic_entries_wanted``): names listed in ipsNotInUse but not released in this
   pass (still settling) stay on the NIC on top of the count; with blocks the count becomes
   blocks.

Pure; imports nothing outside ``ipam``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from nodewright.ipam.blocks import address_count, blocks_for
from nodewright.ipam.request import PoolRequest, compute_request, split_listed
from nodewright.ipam.scaler import MAX_SECONDARY_IPS_PER_NIC, PoolScaler, pool_target

__all__ = ["CountFacts", "CountRule", "RequestedCount", "nic_entries_wanted", "requested_count"]


@dataclass(frozen=True)
class CountRule:
    """The configured part of the rule (see the module docstring)."""

    scaler: PoolScaler
    computes: bool = True
    """False: the node agent writes the spec, which is followed as stored."""
    headroom: int = 0
    scale_down_delay_seconds: float = 0.0
    may_release: bool = True
    blocks: bool = False

    @property
    def maximum(self) -> int:
        """The most IPs a node may hold: the scaler's maximum, within one NIC's capacity."""
        return min(self.scaler.max_ip_count, MAX_SECONDARY_IPS_PER_NIC)


@dataclass(frozen=True)
class CountFacts:
    """One pass's inputs: the pods' demand, the status's ``assignments`` (oldest first), the
    addresses pods use, the spec as stored, the subnet's state and the surplus clock."""

    demand: int
    assignments: Sequence[tuple[str, str]]
    in_use_addresses: Collection[str]
    requested_ip_count: int
    ips_not_in_use: Sequence[str]
    exhausted: bool = False
    surplus_since: float | None = None
    now: float = 0.0


@dataclass(frozen=True)
class RequestedCount:
    """The rule's answer: the spec (``request``), the NIC's count, what was wrong, the clock."""

    request: PoolRequest
    allocate: int | None
    """The count the NIC is sized to (None: the requested count is unusable, change nothing)."""
    problem: tuple[str, str] | None
    """(reason, message) when the requested count is out of bounds."""
    surplus_since: float | None
    """The surplus clock after this pass (None: no surplus)."""

    @property
    def requested(self) -> int:
        return self.request.requested_ip_count


def requested_count(rule: CountRule, facts: CountFacts) -> RequestedCount:
    """The requested count for one pass (see the module docstring)."""
    if not rule.computes:
        listed = tuple(dict.fromkeys(facts.ips_not_in_use))
        request = PoolRequest(facts.requested_ip_count, listed, facts.requested_ip_count)
        return _bounded(rule, request, facts.surplus_since)
    wanted = facts.demand + rule.headroom
    target = pool_target(wanted, rule.scaler, exhausted=facts.exhausted)
    since = facts.surplus_since
    allowed: Collection[str] | None = ()
    if not rule.blocks:
        pending = set(split_listed(dict(facts.assignments), facts.in_use_addresses, facts.ips_not_in_use)[0])
        held = address_count(address for name, address in facts.assignments if name not in pending)
        since = _surplus_clock(target < held, facts.surplus_since, facts.now)
        lasted = 0.0 if since is None else facts.now - since
        if rule.may_release and lasted >= rule.scale_down_delay_seconds:
            allowed = None  # any free address may be marked
    request = compute_request(
        demand=wanted,
        scaler=rule.scaler,
        assignments=facts.assignments,
        in_use_addresses=facts.in_use_addresses,
        ips_not_in_use=() if rule.blocks else facts.ips_not_in_use,
        exhausted=facts.exhausted,
        releasable_addresses=allowed,
    )
    return _bounded(rule, request, since)


def _surplus_clock(surplus: bool, since: float | None, now: float) -> float | None:
    """Since when the surplus has lasted (None: there is none now)."""
    if not surplus:
        return None
    return now if since is None else since


def _bounded(rule: CountRule, request: PoolRequest, since: float | None) -> RequestedCount:
    requested = request.requested_ip_count
    maximum = rule.maximum
    if requested < 0:
        problem = ("InvalidRequestedIPCount", f"requestedIPCount {requested} is negative")
        return RequestedCount(request, None, problem, since)
    if requested > maximum:
        message = f"requestedIPCount {requested} is above this node's usable maximum of {maximum} IPs"
        return RequestedCount(request, maximum, ("RequestedIPCountAboveMaximum", message), since)
    return RequestedCount(request, requested, None, since)


def nic_entries_wanted(
    count: int | None,
    *,
    listed: Collection[str],
    releasable: Collection[str],
    names_on_nic: Collection[str],
    blocks: bool,
) -> int | None:
    """How many secondary IP configurations the NIC should hold besides the ones released in
    this pass: the count plus the listed names still settling on the NIC, in blocks when
    ``blocks`` (None stays None: change nothing)."""
    if count is None:
        return None
    held_back = len([name for name in listed if name in names_on_nic and name not in releasable])
    wanted = count + held_back
    return blocks_for(wanted) if blocks else wanted
