"""The plan stage of a node_network_config pass: pure functions from what was read to what to do.

Owns, each the one owner of its decision:

- ``plan_spec``: the spec the pass works to (``SpecPlan``): followed as stored when the node agent
  writes it, else decided by ``ipam.requested_count`` (headroom, target, hysteresis, marking,
  prefix blocks, the node's bound) with the names ready for release (marked at least
  ``releaseSettleSeconds`` ago) and the spec body to write if it changed;
- ``plan_nic``: the NIC changes (``ipam.plan_allocation``) towards ``ipam.nic_entries_wanted``,
  unaccounted names collectable after the leak grace period, additions within the write guard;
- ``findings``: what the plan found to say (unknown names in ipsNotInUse, refused releases);
- ``account``: the status assignments after the pass (``Accounting``), what the book should
  learn from it and whether the pass is complete;
- ``next_visit``: when the node's next pass is due.

Reads only its arguments (``PassView``, ``NicMemory``: copies), never the book, the caches or the
clouds; no callbacks. The stateful simulation (tests/ipam/test_simulation.py) drives these.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from nodewright.cloud.boot_configurations import is_boot_configuration
from nodewright.cloud.models import NicInfo
from nodewright.controllers.node_network_config.nic_book import NicMemory
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.status import Outcome
from nodewright.controllers.node_network_config.view import PENDING_REQUEUE_SECONDS, PassView
from nodewright.ipam import (
    MAX_SECONDARY_IPS_PER_NIC,
    AllocationPlan,
    CountFacts,
    CountRule,
    NicIpConfiguration,
    RequestedCount,
    address_count,
    blocks_in_use,
    collectable,
    nic_entries_wanted,
    plan_allocation,
    requested_count,
    status_assignments,
)

__all__ = [
    "Accounting",
    "SpecPlan",
    "account",
    "count_facts",
    "count_rule",
    "findings",
    "next_visit",
    "nic_entries",
    "plan_nic",
    "plan_spec",
]

Object = dict[str, Any]


@dataclass(frozen=True)
class SpecPlan:
    """The spec the allocation side works to in this pass."""

    count: RequestedCount
    listed: tuple[str, ...]
    """Every name in ipsNotInUse."""
    releasable: tuple[str, ...]
    """The listed names that may be released in this pass (settled)."""
    write: Object | None = None
    """The spec fields to write (None: the stored spec stands)."""
    marked: tuple[str, ...] = ()
    unmarked: tuple[str, ...] = ()

    @property
    def requested(self) -> int:
        return self.count.requested


def count_rule(settings: NodeNetworkConfigSettings, *, follow: bool = False) -> CountRule:
    """The configured requested-count rule (``follow``: the spec as stored, whoever wrote it)."""
    return CountRule(
        scaler=settings.scaler,
        computes=settings.computes_demand and not follow,
        headroom=settings.discovery_headroom_ips if settings.nodesubnet else 0,
        scale_down_delay_seconds=settings.scale_down_delay_seconds,
        may_release=not settings.nodesubnet,
        blocks=settings.prefix_blocks,
    )


def count_facts(view: PassView) -> CountFacts:
    """The requested-count rule's inputs, from a view."""
    spec = view.config.spec
    return CountFacts(
        demand=view.demand,
        assignments=view.assignments,
        in_use_addresses=view.in_use,
        requested_ip_count=spec.requested_ip_count,
        ips_not_in_use=spec.ips_not_in_use,
        exhausted=view.exhausted,
        surplus_since=view.memory.surplus_since,
        now=view.now,
    )


def plan_spec(
    settings: NodeNetworkConfigSettings, facts: CountFacts, memory: NicMemory, *, follow: bool = False
) -> SpecPlan:
    """The spec for this pass: the stored one when it is followed (``follow``: another writer
    holds it), else the rule's, with the body to write when it differs from the stored one."""
    count = requested_count(count_rule(settings, follow=follow), facts)
    request = count.request
    listed = tuple(request.ips_not_in_use)
    if not count_rule(settings, follow=follow).computes:
        return SpecPlan(count, listed, listed)
    write = None
    if request.differs_from(facts.requested_ip_count, facts.ips_not_in_use):
        write = {"requestedIPCount": request.requested_ip_count, "ipsNotInUse": list(listed)}
    unmarked = (*request.released, *request.reclaimed)
    marked_at = {**memory.marked_at, **dict.fromkeys(request.newly_marked, facts.now)}
    for name in unmarked:
        marked_at.pop(name, None)
    settle = settings.release_settle_seconds
    settled = {n for n in listed if facts.now - marked_at.get(n, float("-inf")) >= settle}
    releasable = tuple(n for n in listed if n in settled)
    return SpecPlan(count, listed, releasable, write, tuple(request.newly_marked), unmarked)


def nic_entries(nic: NicInfo) -> list[NicIpConfiguration]:
    """The NIC's secondary IP configurations, in NIC order."""
    return [NicIpConfiguration(c.name, c.address) for c in nic.secondary_ip_configurations]


def plan_nic(  # noqa: PLR0917 - the plan's inputs, each read once
    settings: NodeNetworkConfigSettings,
    spec: SpecPlan,
    secondary: Sequence[NicIpConfiguration],
    accounted: Collection[str],
    in_use: Collection[str],
    memory: NicMemory,
    now: float,
) -> AllocationPlan:
    """The NIC changes for this pass (``ipam.plan_allocation``)."""
    wanted = nic_entries_wanted(
        spec.count.allocate,
        listed=spec.listed,
        releasable=spec.releasable,
        names_on_nic={c.name for c in secondary},
        blocks=settings.prefix_blocks,
    )
    if settings.prefix_blocks:
        # Plan in blocks: a block is in use when a pod holds any of its addresses.
        in_use = blocks_in_use([c.address for c in secondary if c.address], in_use)
    unaccounted = [c.name for c in secondary if c.name not in accounted and c.address not in in_use]
    return plan_allocation(
        requested=wanted,
        ips_not_in_use=spec.releasable,
        nic=secondary,
        accounted=accounted,
        in_use_addresses=in_use,
        collectable=collectable(memory.leaks_first_seen, unaccounted, now, memory.leak_grace_seconds),
        add_limit=memory.guard.limit(MAX_SECONDARY_IPS_PER_NIC),
        # NodeSubnet: CNS hands out whatever the NIC carries from boot, and nothing may go.
        keep={c.name for c in secondary if is_boot_configuration(c.name)} if settings.nodesubnet else (),
    )


def findings(
    settings: NodeNetworkConfigSettings, plan: AllocationPlan, released_lately: Collection[str]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The problems (for the status) and warnings (Events) the plan found: names in ipsNotInUse
    the node does not hold (not lately released), releases refused because a pod uses the IP."""
    problems: list[tuple[str, str]] = []
    warnings: list[tuple[str, str]] = []
    unknown = sorted(n for n in plan.unknown if n not in released_lately)
    if unknown:
        message = f"ipsNotInUse names IPs this node does not hold: {', '.join(unknown)}"
        (warnings if settings.computes_demand else problems).append(("UnknownIPsNotInUse", message))
    if plan.refused:
        message = f"Kept IPs listed in ipsNotInUse that pods use: {', '.join(sorted(plan.refused))}"
        warnings.append(("ReleaseRefused", message))
    return problems, warnings


@dataclass(frozen=True)
class Accounting:
    """The pool after a pass: the status assignments, and what the book learns."""

    assignments: list[tuple[str, str]]
    accounted: frozenset[str]
    leaks: tuple[str, ...]
    """Unaccounted names the leak tracker should watch."""
    removed: tuple[str, ...]
    """Names the pass removed (or started removing): their marks go."""
    on_nic: frozenset[str]
    complete: bool


def account(
    secondary: Sequence[NicIpConfiguration],
    accounted: Collection[str],
    plan: AllocationPlan,
    added: Collection[str],
    spec: SpecPlan,
) -> Accounting:
    """The status assignments after the pass: what the NIC (``secondary``, as it is after the
    pass) really holds decides (a removal or an add that failed leaves names as they were)."""
    on_nic = frozenset(c.name for c in secondary)
    kept = frozenset((set(accounted) | set(plan.adopt) | set(added)) & on_nic)
    assignments = status_assignments(secondary, kept)
    present = dict(assignments)
    present_listed = {n for n in spec.listed if n in present}
    complete = not (plan.short_by or (plan.add_count and plan.removals))
    allocate = spec.count.allocate
    if (
        allocate is not None
        and address_count(a for n, a in assignments if n not in present_listed) < allocate
    ):
        complete = False
    return Accounting(
        assignments=assignments,
        accounted=kept,
        leaks=tuple(n for n in plan.unaccounted if n not in kept),
        removed=plan.removals if not plan.add_count else (),
        on_nic=on_nic,
        complete=complete,
    )


def next_visit(  # noqa: PLR0917 - what decides the next pass
    settings: NodeNetworkConfigSettings,
    outcome: Outcome,
    spec: SpecPlan,
    assignments: Sequence[tuple[str, str]],
    memory: NicMemory,
    now: float,
    resync: float,
) -> float:
    """Seconds until the node's next pass: the resync at the latest; sooner for a retry, an
    incomplete pass, a settling release, a surplus coming of age or a leak's grace ending."""
    delays = [resync]
    if outcome.retry_in is not None:
        delays.append(max(outcome.retry_in, PENDING_REQUEUE_SECONDS))
    elif not outcome.complete:
        delays.append(PENDING_REQUEUE_SECONDS)
    present = dict(assignments)
    pending = [n for n in spec.listed if n in present]
    surplus_due = memory.surplus_due(settings.scale_down_delay_seconds)
    # A surplus already past its time waits for demand to change.
    dues = [memory.next_leak_due()]
    if surplus_due and surplus_due > now:
        dues.append(surplus_due)
    if pending:
        dues.append(min(memory.settling_until(pending, settings.release_settle_seconds), default=now))
    delays += [max(due - now, PENDING_REQUEUE_SECONDS) for due in dues if due is not None]
    return min(delays)
