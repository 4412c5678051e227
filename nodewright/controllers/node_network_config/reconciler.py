"""``NodeNetworkConfigReconciler``: one NodeNetworkConfig per node, its pool of secondary IPs kept
on the node's NIC.

A reconcile of ``<namespace>/<node>`` runs four stages, each the one owner of its decisions:

1. read (``view``): one immutable ``PassView`` of the node: the NodeNetworkConfig (taken hold
   of: finalizer, controller reference, NIC annotation), the Node, the NIC, the subnet, the
   node's pods and a copy of the book's memory of the NIC;
2. plan (``plan``, pure): the spec (``ipam.requested_count``: the whole requested-count rule),
   then the NIC changes (``ipam.plan_allocation``), re-planned against a fresh NIC read when a
   change is due and, before any release, against a fresh (uncached) list of the node's pods;
3. apply (``apply``): the spec write, then at most one NIC write, started, not waited for;
4. record (``record``): the book, Events, the status and the ``nodewright_ipam_*`` figures.

A missing NodeNetworkConfig is created, and one whose Node is gone is finalized
(``lifecycle``). A pass comes back after ``resyncPeriodSeconds`` (+-10 %) at the latest, or
sooner when a retry, a settling release or a grace period is due (``plan.next_visit``); a NIC
changed behind our back comes in through the NIC watcher, so a cluster at rest costs neither a
pass nor a read per node per minute.

This class only wires the parts and runs the stages. State: one ``NicBook`` (it alone holds
the lock) and one ``SubnetBook``. The client and the stores are the controller's own
(``builder.client``, ``builder.cache``): a pass reads our last write, not the cache's older copy.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.cloud.models import NicInfo
from nodewright.controllers.node_network_config.apply import PassApplier
from nodewright.controllers.node_network_config.cloud import ComputeOperations, NetworkOperations, WriteBudget
from nodewright.controllers.node_network_config.config_writes import ConfigWrites
from nodewright.controllers.node_network_config.heirs import pairing_wait
from nodewright.controllers.node_network_config.lifecycle import Lifecycle
from nodewright.controllers.node_network_config.metrics import IpamMetrics
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.operations import STALE_OPERATION_SECONDS, NicWrites
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.pass_rules import (
    NodeNetworkConfigStores,
    ignore_request,
    resync_jitter,
)
from nodewright.controllers.node_network_config.plan import (
    SpecPlan,
    account,
    count_facts,
    findings,
    next_visit,
    nic_entries,
    plan_nic,
    plan_spec,
)
from nodewright.controllers.node_network_config.record import PassRecorder
from nodewright.controllers.node_network_config.scope_listings import LISTING_MAX_AGE_SECONDS, with_listings
from nodewright.controllers.node_network_config.spec_writer import SpecWriter, spec_applier
from nodewright.controllers.node_network_config.status import EventSink, Outcome, StatusWriter
from nodewright.controllers.node_network_config.subnets import SubnetBook
from nodewright.controllers.node_network_config.view import (
    POD_NODE_INDEX,
    UNSELECTED,
    Halt,
    PassReader,
    PassView,
)
from nodewright.ipam import BLOCK_PREFIX_LENGTH, AllocationPlan
from nodewright.runtime import Client, Request, Result, now_text, parse_time

__all__ = ["POD_NODE_INDEX", "EventSink", "NodeNetworkConfigReconciler", "NodeNetworkConfigStores"]

Object = dict[str, Any]


def _book_for(settings: NodeNetworkConfigSettings) -> NicBook:
    return NicBook(
        backoff_base_seconds=settings.backoff_base_seconds,
        backoff_cap_seconds=settings.backoff_cap_seconds,
        leak_grace_seconds=settings.leak_grace_period_seconds,
    )


class NodeNetworkConfigReconciler:
    """Reconciles ``<namespace>/<node>`` keys (see the module docstring)."""

    def __init__(
        self,
        *,
        client: Client,
        stores: NodeNetworkConfigStores,
        network: NetworkOperations,
        compute: ComputeOperations,
        events: EventSink,
        settings: NodeNetworkConfigSettings,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], str] = now_text,
        new_name: Callable[[], str] = lambda: str(uuid.uuid4()),
        jitter: Callable[[], float] = resync_jitter,
        notify: Callable[[Request], None] | None = None,
    ) -> None:
        self._stores, self.settings, self._jitter, self._wall_clock = stores, settings, jitter, wall_clock
        self.book = _book_for(settings)
        prefix = BLOCK_PREFIX_LENGTH if settings.prefix_blocks else None
        writes = NicWrites(network, self.book, settings.namespace, notify or ignore_request, new_name, prefix)
        self.subnets = _subnet_book(client, network, settings, wall_clock)
        self._configs = configs = ConfigWrites(client, settings.namespace)
        status = StatusWriter(patch=configs.patch, events=events, scaler=settings.scaler)
        self.spec_writer = SpecWriter(
            apply=spec_applier(client, settings.namespace),
            patch_status=lambda name, fields: configs.patch(name, {"status": fields}, "status"),
            events=events,
            own_update_managers=(client.field_manager,),
            clock=clock,
        )
        self._lifecycle = Lifecycle(
            client=client,
            network=network,
            book=self.book,
            events=events,
            namespace=settings.namespace,
            patch=configs.patch,
        )
        self._reserved_write = (
            network.reserved_write if isinstance(network, WriteBudget) else _nothing_reserved
        )
        parts = (self.book, self.subnets, writes, configs, self._lifecycle)
        locator, listings = with_listings(network, compute, settings, clock)
        self._read = PassReader(
            client, stores, network, locator, parts, settings, (clock, wall_clock), listings=listings
        )
        self._apply = PassApplier(
            book=self.book,
            writes=writes,
            subnets=self.subnets,
            spec_writer=self.spec_writer,
            read_nic=lambda nic_id, now: self._read.nic(nic_id, now, fresh=True),
        )
        self.metrics = IpamMetrics(self.subnets.exhaustion_forecasts, self.subnets.exhaustion_states)
        self._record = PassRecorder(
            book=self.book, status=status, events=events, metrics=self.metrics, blocks=settings.prefix_blocks
        )

    def reconcile(self, request: Request) -> Result:
        namespace = self.settings.namespace
        if request.namespace != namespace:
            return Result()
        node = self._read.node(request.name)
        if node is not None and node is not UNSELECTED and (wait := self._pairing_wait(node)) > 0:
            return Result(requeue_after=wait)  # a heir in the making: sized once it is paired
        cached = self._stores.node_network_configs.get(f"{namespace}/{request.name}")
        if cached is None:
            if node is not None and node is not UNSELECTED:
                self._lifecycle.create(node)
            return Result()
        raw = copy.deepcopy(cached)  # read through our cache view: our last write while the watch is behind
        if node is UNSELECTED:
            return Result()
        if node is None or raw["metadata"].get("deletionTimestamp"):
            self.metrics.forget(request.name)
            self.spec_writer.forget(request.name)
            return self._lifecycle.finalize(raw, node)
        view = self._read.read(raw, node)
        if isinstance(view, Halt):
            return self._record.halted(view, self._resync())
        return self._live(view)

    def _pairing_wait(self, node: Object) -> float:
        """Seconds a new Node of a node image rollout still waits for its pairing (``heirs``)."""
        joins, groups = self._stores.pending_nodes, self._stores.scaling_groups
        if joins is None or groups is None:
            return 0.0
        return pairing_wait(
            node,
            joins.get(str(node["metadata"]["name"])),
            groups.list(),
            now=parse_time(self._wall_clock()),
            wait_seconds=self.settings.heir_pairing_wait_seconds,
        )

    def _after_spec(self, view: PassView, stored: Object | None) -> PassView:
        """The view with the object as it is now: the spec stage may have patched its status (the
        ``SpecWriter`` condition), and the record stage writes the status from this object, so a
        condition set there must not be written away. Our cache view already holds every answer
        of our client (the apply's and the status patch's), so one read gives the newest."""
        current = self._stores.node_network_configs.get(f"{self.settings.namespace}/{view.name}") or stored
        if current is None or _resource_version(current) == _resource_version(view.raw):
            return view
        current = copy.deepcopy(current)
        return dataclasses.replace(view, raw=current, config=NodeNetworkConfig.from_object(current))

    def _live(self, view: PassView) -> Result:
        """Plan, apply and record one pass over ``view``."""
        settings, facts = self.settings, count_facts(view)
        spec = plan_spec(settings, facts, view.memory)
        stored = self._apply.spec(view, spec)
        if stored is None:  # another writer holds the spec: follow it, mark nothing
            facts = dataclasses.replace(facts, surplus_since=spec.count.surplus_since)
            spec = plan_spec(settings, facts, view.memory, follow=True)
        view = self._after_spec(view, stored)
        with contextlib.ExitStack() as reserved:  # a write's budget, held from its read to it
            plan, nic, kept_back = self._plan_nic(view, spec, reserved)
            problems, warnings = findings(settings, plan, view.released_lately)
            outcome = Outcome(problems=[*([spec.count.problem] if spec.count.problem else []), *problems])
            self._record.say(view.raw, warnings)
            if kept_back > 0:  # the budget would keep the write back: come back then, unread
                outcome.complete, outcome.retry_in = False, kept_back
            else:
                nic = self._apply.nic(view, nic, plan, outcome)
        self._record.say(view.raw, outcome.warnings)
        accounting = account(nic_entries(nic), view.accounted, plan, (), spec)
        outcome.complete = outcome.complete and accounting.complete
        self._record.record(view, spec, accounting, nic, outcome)
        if self.book.operation(view.nic_id) is not None:
            return Result(requeue_after=STALE_OPERATION_SECONDS)  # the write's end enqueues this node
        memory = self.book.memory(view.nic_id)
        delay = next_visit(settings, outcome, spec, accounting.assignments, memory, view.now, self._resync())
        return Result(requeue_after=delay)

    def _plan_nic(
        self, view: PassView, spec: SpecPlan, reserved: contextlib.ExitStack
    ) -> tuple[AllocationPlan, NicInfo, float]:
        """Plan against the NIC; if a change is due and the NIC was read more than a listing's
        reuse age ago (``scope_listings.LISTING_MAX_AGE_SECONDS``, by this pass's GET, a
        scale-set listing or the NIC watcher's list), re-plan against a fresh NIC read and,
        before any release, against a fresh (uncached) list of the node's pods. The fresh read
        is for the write alone, so the write's share of ARM's budget is taken first, held in
        ``reserved`` until the write leaves; when it cannot be taken now, nothing is read and the
        seconds until it could be are returned (else 0). The fresh read is a scale-set listing
        sent within that age when a burst of such reads shares one (``PassReader.nic``)."""
        nic, in_use = view.nic, set(view.in_use)

        def plan_on(nic: NicInfo) -> AllocationPlan:
            entries = nic_entries(nic)
            return plan_nic(self.settings, spec, entries, view.accounted, in_use, view.memory, view.now)

        plan = plan_on(nic)
        young = min(self.settings.nic_refresh_seconds, LISTING_MAX_AGE_SECONDS)
        if plan.changes_nic and view.now - view.memory.read_at > young:
            if view.ended is None and (wait := reserved.enter_context(self._reserved_write(view.nic_id))) > 0:
                return plan, nic, wait
            # a listing as young as a plan may write from (the reader takes none older than the book's)
            nic = self._read.nic(view.nic_id, view.now, fresh=True, newer_than=view.now - young)
            plan = plan_on(nic)
        if plan.removals:
            in_use |= self._read.fresh_pod_addresses(view.name)
            plan = plan_on(nic)
        return plan, nic, 0.0

    def _resync(self) -> float:
        return self.settings.resync_period_seconds * self._jitter()


def _subnet_book(
    client: Client,
    network: NetworkOperations,
    settings: NodeNetworkConfigSettings,
    wall_clock: Callable[[], str],
) -> SubnetBook:
    return SubnetBook(
        client=client,
        network=network,
        namespace=settings.namespace,
        check_interval_seconds=settings.subnet_check_interval_seconds,
        batch_size=settings.scaler.batch_size,
        wall_clock=wall_clock,
    )


def _nothing_reserved(nic: str) -> AbstractContextManager[float]:  # noqa: ARG001 - no budget to ask
    return contextlib.nullcontext(0.0)


def _resource_version(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
