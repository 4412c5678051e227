"""``NodeNetworkConfigReconciler``: one NodeNetworkConfig per node, its pool of secondary IPs kept
on the node's NIC.

A reconcile of ``<namespace>/<node>`` goes read -> decide -> apply -> status:

1. Read (``_read``): the Node, the NodeNetworkConfig (given our finalizer and, if missing, the
   Node as its controller: ``lifecycle``), the NIC (tracked in the book for the NIC watcher,
   ``nic_watch``, whose lists keep its snapshot fresh; read with a GET only when the snapshot is
   older than ``nicRefreshSeconds`` or a change is due), the subnet's usage (``subnets``) and the
   node's pods (``spec.nodeName`` index), plus the pods the Node's ``nodewright.io/incoming-pods``
   annotation says are about to arrive (a heir before its donor's drain: ``demand.incoming_pods``).
2. Decide: the spec (``demand``: read from the node agent in consumer ``crd``, computed from the
   pods otherwise, with hysteresis and the NodeSubnet release rule) and the NIC changes
   (``ipam.plan_allocation``): releases only names in ipsNotInUse that no pod uses, checked
   against a fresh, uncached pod list first; unaccounted IP configurations adopted when needed,
   else released after the leak grace period; additions within 255 per NIC, halved on capacity
   errors; per-NIC backoff after failures.
3. Apply: at most one NIC write per pass (additions first; removals wait for the next pass),
   started, not waited for (``operations``: its end enqueues the node, whose next pass settles it),
   within the shared cloud's one mutation budget (``cloud_access``).
4. Status (``status``): networkContainers[0], assignedIPCount, the scaler, the reconcile status
   and a ``Ready`` condition; problems (bad spec, requestedIPCount above the node's maximum, node
   without providerID, NIC missing) set ``Error``, the condition and a Warning Event, never a
   crash loop. Then the ``nodewright_ipam_*`` figures (``metrics``).
A pass comes back after ``resyncPeriodSeconds`` (+-10 %) at the latest, or sooner when a retry,
a settling release or a grace period is due; a NIC changed behind our back comes in through the
NIC watcher, so a cluster at rest costs neither a pass nor a read per node per minute.

State: one ``NicBook`` (it alone holds the lock) and one ``SubnetBook``. The client and the stores
are the controller's own (``builder.client``, ``builder.cache``): a pass before the watch catches
up reads our last write, not the cache's older copy (#962). Side effects: Kubernetes and ARM
writes, Events, metrics.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodewright.api.acn.v1alpha import (
    NETWORK_CONTAINER_STATUS_FAILED,
    NETWORK_CONTAINER_STATUS_SUBNET_FULL,
    NodeNetworkConfig,
)
from nodewright.api.base import ValidationError
from nodewright.cloud.backoff import BackingOffError
from nodewright.cloud.errors import (
    CloudError,
    LimitExceededError,
    NotFoundError,
    SubnetFullError,
    is_terminal,
)
from nodewright.cloud.models import NicInfo, SubnetInfo
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_provider_id
from nodewright.controllers.node_network_config.cloud import NetworkOperations, NicLocator
from nodewright.controllers.node_network_config.demand import DemandSide, SpecDecision, incoming_pods
from nodewright.controllers.node_network_config.lifecycle import Lifecycle
from nodewright.controllers.node_network_config.metrics import IpamMetrics, NodeFigures, node_pool_of
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.operations import (
    STALE_OPERATION_SECONDS,
    NicOperation,
    NicWrites,
    landed,
    with_add_count,
)
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.pass_rules import (
    NodeNetworkConfigStores,
    check_requested,
    ignore_request,
    resync_jitter,
    usable_maximum,
)
from nodewright.controllers.node_network_config.resources import (
    FINALIZER,
    NETWORK_INTERFACE_ANNOTATION,
    NODE_NETWORK_CONFIG,
    node_pods,
    provider_id_of,
)
from nodewright.controllers.node_network_config.spec_writer import SpecWriter, spec_applier
from nodewright.controllers.node_network_config.status import (
    EventSink,
    Outcome,
    StatusWriter,
    build_container,
    primary_subnet_id,
    refused_container_status,
)
from nodewright.controllers.node_network_config.subnets import SubnetBook
from nodewright.ipam import (
    BLOCK_PREFIX_LENGTH,
    MAX_SECONDARY_IPS_PER_NIC,
    AllocationPlan,
    NicIpConfiguration,
    address_count,
    addresses_of,
    blocks_for,
    blocks_in_use,
    demand_with_incoming,
    plan_allocation,
    status_assignments,
)
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.kinds import NODE, POD
from nodewright.runtime.logs import get_logger
from nodewright.runtime.objects import add_finalizer
from nodewright.runtime.reconcile import Request, Result
from nodewright.runtime.times import now_text, parse_time

__all__ = ["POD_NODE_INDEX", "EventSink", "NodeNetworkConfigReconciler", "NodeNetworkConfigStores"]

log = get_logger(__name__)

POD_NODE_INDEX = "spec.nodeName"
PENDING_REQUEUE_SECONDS = 0.5
Object = dict[str, Any]


@dataclass(frozen=True)
class _View:
    """What one reconcile read: immutable for the decide step."""

    raw: Object
    config: NodeNetworkConfig
    node: Object
    nic_id: str
    nic: NicInfo
    subnet_id: str | None
    subnet: SubnetInfo | None
    exhausted: bool
    demand: int
    in_use: frozenset[str]
    now: float
    ended: NicOperation | None = None  # the NIC write that ended since the last pass

    @property
    def name(self) -> str:
        return str(self.raw["metadata"]["name"])

    @property
    def accounted(self) -> set[str]:
        listed = {a.name for c in self.config.status.network_containers[:1] for a in c.ip_assignments}
        return listed | landed(self.ended)


class NodeNetworkConfigReconciler:
    """Reconciles ``<namespace>/<node>`` keys (see the module docstring)."""

    def __init__(
        self,
        *,
        client: Client,
        stores: NodeNetworkConfigStores,
        network: NetworkOperations,
        locator: NicLocator,
        events: EventSink,
        settings: NodeNetworkConfigSettings,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], str] = now_text,
        new_name: Callable[[], str] = lambda: str(uuid.uuid4()),
        jitter: Callable[[], float] = resync_jitter,
        notify: Callable[[Request], None] | None = None,
    ) -> None:
        self._client = client
        self._stores = stores
        self._network = network
        self._locator = locator
        self._events = events
        self.settings = settings
        self._clock = clock
        self._wall_clock = wall_clock
        self._jitter = jitter
        self.book = NicBook(
            backoff_base_seconds=settings.backoff_base_seconds,
            backoff_cap_seconds=settings.backoff_cap_seconds,
            leak_grace_seconds=settings.leak_grace_period_seconds,
        )
        prefix, notify_end = BLOCK_PREFIX_LENGTH if settings.prefix_blocks else None, notify or ignore_request
        self._writes = NicWrites(network, self.book, settings.namespace, notify_end, new_name, prefix)
        self.subnets = SubnetBook(
            client=client,
            network=network,
            namespace=settings.namespace,
            check_interval_seconds=settings.subnet_check_interval_seconds,
            batch_size=settings.scaler.batch_size,
            wall_clock=wall_clock,
        )
        self._status = StatusWriter(patch=self._patch, events=events, scaler=settings.scaler)
        self.spec_writer = SpecWriter(
            apply=spec_applier(client, settings.namespace),
            patch_status=lambda name, fields: self._patch(name, {"status": fields}, "status"),
            events=events,
            own_update_managers=(client.field_manager,),
            clock=clock,
        )
        self._demand = DemandSide(settings=settings, book=self.book, spec_writer=self.spec_writer)
        self._lifecycle = Lifecycle(
            client=client,
            network=network,
            book=self.book,
            events=events,
            namespace=settings.namespace,
            fresh_pod_addresses=self._fresh_pod_addresses,
            patch=self._patch,
        )
        self.metrics = IpamMetrics(self.subnets.exhaustion_forecasts, self.subnets.exhaustion_states)

    # -- entry point ------------------------------------------------------------------------

    def reconcile(self, request: Request) -> Result:
        namespace = self.settings.namespace
        if request.namespace != namespace:
            return Result()
        node = self._node(request.name)
        raw = self._stores.node_network_configs.get(f"{namespace}/{request.name}")
        if raw is None:
            if node is not None and node is not _UNSELECTED:
                self._lifecycle.create(node)
            return Result()
        raw = copy.deepcopy(raw)
        if node is _UNSELECTED:
            return Result()
        if node is None or raw["metadata"].get("deletionTimestamp"):
            self.metrics.forget(request.name)
            self.spec_writer.forget(request.name)
            return self._lifecycle.finalize(raw, node)
        return self._reconcile_live(raw, node)

    def _node(self, name: str) -> Object | None:
        """The selected Node; ``_UNSELECTED`` when it exists but the selector leaves it out; None
        only when an uncached read confirms it is gone."""
        node = self._stores.nodes.get(name)
        if node is not None:
            return node
        try:
            self._client.get(NODE, name)
        except errors.NotFound:
            return None
        return _UNSELECTED

    def _reconcile_live(self, raw: Object, node: Object) -> Result:
        view = self._read(raw, node)
        if isinstance(view, Result):
            return view
        raw, spec = self._demand.decide(
            raw=view.raw,
            config=view.config,
            nic_id=view.nic_id,
            demand=view.demand,
            in_use=set(view.in_use),
            exhausted=view.exhausted,
            now=view.now,
        )
        view = dataclasses.replace(view, raw=raw)
        outcome = Outcome()
        if view.ended is not None:
            self._writes.settle(view.raw, view.nic_id, view.ended, view.nic, view.now, self._events)
        requested, problem = check_requested(spec.requested, usable_maximum(self.settings))
        if problem is not None:
            outcome.problems.append(problem)
        plan, nic = self._plan(view, requested, spec)
        self._report_findings(view, plan, outcome)
        nic, added = self._apply(view, nic, plan, outcome)
        assignments = self._account(view, nic, plan, added, spec, requested, outcome)
        container = build_container(
            previous=view.config.status.network_containers[0]
            if view.config.status.network_containers
            else None,
            nic_id=view.nic_id,
            nic=nic,
            subnet=view.subnet,
            assignments=assignments,
            container_status=outcome.container_status,
            blocks=self.settings.prefix_blocks,
        )
        self._status.write(view.raw, view.config, container, outcome)
        self._record_metrics(view, spec, assignments)
        if self.book.operation(view.nic_id) is not None:
            return Result(requeue_after=STALE_OPERATION_SECONDS)  # the write's end enqueues this node
        return Result(requeue_after=self._next_visit(view, outcome, spec.listed, assignments))

    # -- read -----------------------------------------------------------------------------------

    def _read(self, raw: Object, node: Object) -> _View | Result:
        """The view of one node, or the Result to return when something stops the pass."""
        found = self._read_object(raw, node)
        if isinstance(found, Result):
            return found
        raw, config, nic_id = found
        now = self._clock()
        if self._writes.in_flight(nic_id, now):
            return Result(requeue_after=STALE_OPERATION_SECONDS)  # one writer per NIC; its end enqueues us
        ended = self.book.take_ended_operation(nic_id)
        nic = self._read_nic(raw, config, nic_id, now, fresh=ended is not None)
        if isinstance(nic, Result):
            return nic
        subnet_id = primary_subnet_id(nic)
        subnet = self.subnets.usage(subnet_id, now) if subnet_id else None
        exhausted = self.subnets.exhausted(subnet_id) if subnet_id else False
        resident, in_use = node_pods(self._stores.pods.by_index(POD_NODE_INDEX, config.name))
        demand = demand_with_incoming(resident, incoming_pods(node, parse_time(self._wall_clock())))
        return _View(
            raw,
            config,
            node,
            nic_id,
            nic,
            subnet_id,
            subnet,
            exhausted,
            demand,
            frozenset(in_use),
            now,
            ended,
        )

    def _read_object(self, raw: Object, node: Object) -> tuple[Object, NodeNetworkConfig, str] | Result:
        """Finalizer, controller reference, parsed model, the node's NIC (annotated on the object)."""
        name = raw["metadata"]["name"]
        if add_finalizer(raw, FINALIZER):
            raw = self._patch(name, {"metadata": {"finalizers": raw["metadata"]["finalizers"]}})
        raw = self._lifecycle.adopt(raw, node)
        try:
            config = NodeNetworkConfig.from_object(raw)
        except ValidationError as error:
            self._events.event(raw, "Warning", "InvalidNodeNetworkConfig", str(error))
            log.info("Skipped invalid NodeNetworkConfig", node=name, error=str(error))
            return Result()
        try:
            machine = parse_provider_id(provider_id_of(node))
        except InvalidResourceIdError:
            message = f"Node {name} has no Azure providerID ({provider_id_of(node) or 'empty'})"
            return self._problem(raw, config, "MissingProviderID", message)
        try:
            nic_id = self._locator.primary_network_interface(machine)
        except NotFoundError as error:
            return self._problem(raw, config, "NetworkInterfaceNotFound", f"{machine}: {error}")
        self.book.track(nic_id, name)
        if (raw["metadata"].get("annotations") or {}).get(NETWORK_INTERFACE_ANNOTATION) != nic_id:
            raw = self._patch(name, {"metadata": {"annotations": {NETWORK_INTERFACE_ANNOTATION: nic_id}}})
            config = NodeNetworkConfig.from_object(raw)
        return raw, config, nic_id

    def _read_nic(
        self, raw: Object, config: NodeNetworkConfig, nic_id: str, now: float, *, fresh: bool
    ) -> NicInfo | Result:
        snapshot, _ = self.book.snapshot(nic_id)
        guard = self.book.guard(nic_id)
        if snapshot is None and not guard.may_write(now):
            # Backed off after a failed read: do not read again before the backoff ends.
            return Result(requeue_after=max(guard.retry_in(now), PENDING_REQUEUE_SECONDS))
        try:
            return self._nic(nic_id, now, fresh=fresh)
        except NotFoundError as error:
            retry_in = self.book.back_off(nic_id, now)
            return self._problem(raw, config, "NetworkInterfaceNotFound", f"NIC {nic_id}: {error}", retry_in)
        except CloudError as error:
            retry_in = self.book.back_off(nic_id, now)
            message = f"Reading NIC {nic_id} failed: {error}"
            return self._problem(raw, config, "CloudError", message, retry_in)

    def _nic(self, nic_id: str, now: float, *, fresh: bool) -> NicInfo:
        snapshot, read_at = self.book.snapshot(nic_id)
        if not fresh and snapshot is not None and now - read_at < self.settings.nic_refresh_seconds:
            return snapshot
        nic = self._network.get_network_interface(nic_id)
        self.book.remember(nic_id, nic, now)
        return nic

    def _fresh_pod_addresses(self, node_name: str) -> set[str]:
        """Addresses pods on the node report, read from the API server (not the cache)."""
        pods = self._client.list(POD, field_selector=f"spec.nodeName={node_name}").items
        return node_pods(pods)[1]

    # -- decide ---------------------------------------------------------------------------------

    def _plan(self, view: _View, requested: int | None, spec: SpecDecision) -> tuple[AllocationPlan, NicInfo]:
        """Plan against the NIC; if a change is due, re-plan against a fresh NIC read and, before
        any release, against a fresh (uncached) list of the node's pods."""
        nic, in_use = view.nic, set(view.in_use)
        plan = self._plan_on(view, nic, in_use, requested, spec)
        _, read_at = self.book.snapshot(view.nic_id)
        if plan.changes_nic and read_at < view.now:
            nic = self._nic(view.nic_id, view.now, fresh=True)
            plan = self._plan_on(view, nic, in_use, requested, spec)
        if plan.removals:
            in_use |= self._fresh_pod_addresses(view.name)
            plan = self._plan_on(view, nic, in_use, requested, spec)
        return plan, nic

    def _plan_on(
        self, view: _View, nic: NicInfo, in_use: set[str], requested: int | None, spec: SpecDecision
    ) -> AllocationPlan:
        secondary = [NicIpConfiguration(c.name, c.address) for c in nic.secondary_ip_configurations]
        names_on_nic = {c.name for c in secondary}
        # requestedIPCount counts the IPs kept besides ipsNotInUse; names listed but not released
        # in this pass (still settling) are on the NIC on top of it.
        held_back = len([n for n in spec.listed if n in names_on_nic and n not in spec.releasable])
        accounted = view.accounted
        wanted = None if requested is None else requested + held_back
        if self.settings.prefix_blocks:
            # Plan in blocks: a block is in use when a pod holds any of its addresses.
            in_use = blocks_in_use([c.address for c in secondary if c.address], in_use)
            wanted = None if wanted is None else blocks_for(wanted)
        unaccounted = [c.name for c in secondary if c.name not in accounted and c.address not in in_use]
        return plan_allocation(
            requested=wanted,
            ips_not_in_use=spec.releasable,
            nic=secondary,
            accounted=accounted,
            in_use_addresses=in_use,
            collectable=self.book.observe_leaks(view.nic_id, unaccounted, view.now),
            add_limit=self.book.guard(view.nic_id).limit(MAX_SECONDARY_IPS_PER_NIC),
        )

    def _report_findings(self, view: _View, plan: AllocationPlan, outcome: Outcome) -> None:
        released_lately = self.book.recently_released(view.nic_id, view.now)
        unknown = sorted(n for n in plan.unknown if n not in released_lately)
        if unknown:
            message = f"ipsNotInUse names IPs this node does not hold: {', '.join(unknown)}"
            if not self.settings.computes_demand:
                outcome.problems.append(("UnknownIPsNotInUse", message))
            else:
                self._events.event(view.raw, "Warning", "UnknownIPsNotInUse", message)
        if plan.refused:
            message = f"Kept IPs listed in ipsNotInUse that pods use: {', '.join(sorted(plan.refused))}"
            self._events.event(view.raw, "Warning", "ReleaseRefused", message)

    # -- apply ----------------------------------------------------------------------------------

    def _apply(
        self, view: _View, nic: NicInfo, plan: AllocationPlan, outcome: Outcome
    ) -> tuple[NicInfo, list[str]]:
        """Start the plan's one NIC write (unless backed off; additions first, removals wait a pass),
        or take the failure of the write ended since the last pass; returns the NIC and no names."""
        failed = view.ended.error if view.ended is not None else None
        if not plan.changes_nic and failed is None:
            return nic, []
        outcome.refusal = self.book.refusal(view.nic_id)  # said until a write goes through
        if outcome.refusal is not None:
            outcome.container_status = refused_container_status(outcome.refusal[0])
        guard = self.book.guard(view.nic_id)
        if failed is None and not guard.may_write(view.now):
            outcome.complete = False
            outcome.retry_in = guard.retry_in(view.now)
            return nic, []
        try:
            if failed is not None and view.ended is not None:
                plan = with_add_count(plan, view.ended)
                raise failed
            self._writes.start(view.name, view.nic_id, plan, view.subnet_id, view.now)
            outcome.complete = False
            return nic, []
        except BackingOffError as error:  # not sent: the NIC backs off after a failed write
            outcome.complete = False
            outcome.retry_in = error.retry_after
            if error.terminal:
                outcome.container_status = refused_container_status(error.code)
                self._refused(view, outcome, (error.code or "", error.last_message))
            return nic, []
        except (SubnetFullError, LimitExceededError) as error:
            self._on_capacity_error(view, plan, outcome, error)
        except NotFoundError as error:
            outcome.retry_in = self.book.back_off(view.nic_id, view.now)
            outcome.problems.append(("NetworkInterfaceNotFound", f"NIC {view.nic_id}: {error}"))
            return nic, []
        except CloudError as error:
            outcome.retry_in = max(self.book.back_off(view.nic_id, view.now), error.retry_after or 0.0)
            outcome.complete = False
            outcome.container_status = NETWORK_CONTAINER_STATUS_FAILED
            if is_terminal(error):  # a condition, and an Event when it starts (StatusWriter)
                self._refused(view, outcome, (error.code or "", error.message))
            else:
                message = f"Changing NIC {view.nic_id} failed: {error}"
                self._events.event(view.raw, "Warning", "CloudError", message)
        try:
            return self._nic(view.nic_id, view.now, fresh=True), []
        except CloudError:
            return nic, []

    def _on_capacity_error(
        self, view: _View, plan: AllocationPlan, outcome: Outcome, error: CloudError
    ) -> None:
        guard = self.book.guard(view.nic_id).after_capacity_error(plan.add_count, view.now)
        self.book.set_guard(view.nic_id, guard)
        outcome.complete = False
        outcome.container_status = NETWORK_CONTAINER_STATUS_SUBNET_FULL
        # The cloud layer backs the NIC off (2 s doubling to minutes): come back when it ends.
        outcome.retry_in = max(guard.retry_in(view.now), error.retry_after or 0.0) or PENDING_REQUEUE_SECONDS
        self._refused(view, outcome, (error.code or "SubnetIsFull", error.message))
        if guard.exhausted and view.subnet_id:
            self.subnets.mark_exhausted(view.subnet_id)
        log.info("Adding IPs refused by ARM", node=view.name, requested=plan.add_count, **error.log_fields())

    def _refused(self, view: _View, outcome: Outcome, refusal: tuple[str, str]) -> None:
        """ARM refused the NIC's write with a terminal answer: the condition says so until a
        write goes through."""
        outcome.refusal = refusal
        self.book.note_refusal(view.nic_id, refusal)

    # -- status ---------------------------------------------------------------------------------

    def _account(  # noqa: PLR0917 - one call site, each argument a distinct step's result
        self,
        view: _View,
        nic: NicInfo,
        plan: AllocationPlan,
        added: list[str],
        spec: SpecDecision,
        requested: int | None,
        outcome: Outcome,
    ) -> list[tuple[str, str]]:
        """The status assignments after the pass: what the NIC really holds decides (a removal or
        an add that failed leaves names as they were). Updates the book's leak and release memory."""
        on_nic = {c.name for c in nic.secondary_ip_configurations}
        accounted = (view.accounted | set(plan.adopt) | set(added)) & on_nic
        self.book.observe_leaks(view.nic_id, [n for n in plan.unaccounted if n not in accounted], view.now)
        removed = plan.removals if not plan.add_count else ()
        self.book.after_removal(view.nic_id, removed, on_nic, view.now)
        if plan.short_by or (plan.add_count and plan.removals):
            outcome.complete = False
        secondary = [NicIpConfiguration(c.name, c.address) for c in nic.secondary_ip_configurations]
        assignments = status_assignments(secondary, accounted)
        present = dict(assignments)
        present_listed = {n for n in spec.listed if n in present}
        if (
            requested is not None
            and address_count(a for n, a in assignments if n not in present_listed) < requested
        ):
            outcome.complete = False
        return assignments

    def _record_metrics(self, view: _View, spec: SpecDecision, assignments: list[tuple[str, str]]) -> None:
        present = dict(assignments)
        held = [address for entry in present.values() for address in addresses_of(entry)]
        figures = NodeFigures(
            pool=node_pool_of(view.node),
            allocated=len(held),
            available=len([a for a in held if a not in view.in_use]),
            requested=spec.requested,
            pending_release=len([n for n in spec.listed if n in present]),
        )
        self.metrics.record(view.name, figures)

    def _problem(
        self, raw: Object, config: NodeNetworkConfig, reason: str, message: str, retry_in: float | None = None
    ) -> Result:
        self._status.report_problem(raw, config, reason, message)
        return Result(requeue_after=retry_in if retry_in else self._resync())

    def _resync(self) -> float:
        return self.settings.resync_period_seconds * self._jitter()

    def _patch(self, name: str, body: Object, subresource: str | None = None) -> Object:
        """Merge-patch our NodeNetworkConfig (side effect). Spec (on the demand side) and status
        are ours alone, so no resourceVersion precondition: a stale cache cannot make it fail."""
        return self._client.patch(
            NODE_NETWORK_CONFIG, name, body, self.settings.namespace, subresource=subresource
        )

    def _next_visit(
        self, view: _View, outcome: Outcome, listed: tuple[str, ...], assignments: list[tuple[str, str]]
    ) -> float:
        delays = [self._resync()]
        if outcome.retry_in is not None:
            delays.append(max(outcome.retry_in, PENDING_REQUEUE_SECONDS))
        elif not outcome.complete:
            delays.append(PENDING_REQUEUE_SECONDS)
        present = dict(assignments)
        pending = [n for n in listed if n in present]
        settle = self.settings.release_settle_seconds
        surplus_due = self.book.surplus_due(view.nic_id, self.settings.scale_down_delay_seconds)
        # A surplus already past its time waits for demand to change.
        dues = [self.book.next_leak_due(view.nic_id)]
        if surplus_due and surplus_due > view.now:
            dues.append(surplus_due)
        if pending:
            dues.append(min(self.book.settling_until(view.nic_id, pending, settle), default=view.now))
        delays += [max(due - view.now, PENDING_REQUEUE_SECONDS) for due in dues if due is not None]
        return min(delays)


_UNSELECTED: Object = {"metadata": {"name": ""}}
"""Marker: the Node exists but the selector leaves it out (leave its NodeNetworkConfig alone)."""
