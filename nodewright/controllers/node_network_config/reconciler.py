"""``NodeNetworkConfigReconciler``: one NodeNetworkConfig per node, its pool of secondary IPs kept
on the node's NIC.

A reconcile of ``<namespace>/<node>`` reads the Node, the NodeNetworkConfig, the node's pods
(through the ``spec.nodeName`` index) and the NIC, asks ``nodewright.ipam`` what to do, and
writes. In order:

1. Lifecycle: a selected Node without a NodeNetworkConfig gets one (with our finalizer); a
   NodeNetworkConfig whose Node is gone (confirmed by an uncached read) is deleted, and one being
   deleted is finalized: its IPs are released from the NIC (named by an annotation, so this works
   after the Node is gone), then the finalizer is dropped. While the Node still exists, IPs a pod
   uses are never released, not even then.
2. Demand side (``demandFromPods``; off when Azure CNS runs on the nodes): spec.requestedIPCount
   and spec.ipsNotInUse from the pods (``ipam.compute_request``), written whenever the count or
   the set of names differs (azure-container-networking #4891 cannot happen).
3. Allocation side: the NIC's secondary IP configurations are made to match the spec
   (``ipam.plan_allocation``): releases only names in ipsNotInUse that no pod uses (checked
   against a fresh, uncached pod list first); a name the demand side has just marked is released
   only after ``releaseSettleSeconds``, so that a node agent which read the previous spec cannot
   hand it out in the meantime; unaccounted IP configurations are adopted when needed, else
   released after the leak grace period; additions go in one NIC write, halved on capacity
   errors, within 255 per NIC. Per-NIC backoff after failures (``ipam.NicGuard``).
4. Subnet: usage every ``subnetCheckIntervalSeconds`` decides exhaustion (with hysteresis), kept
   in the subnet's ClusterSubnetState; exhausted nodes scale by one IP.
5. Status: networkContainers[0] (stable id from the NIC's ARM ID, ipAssignments in NIC order,
   gateway and subnet facts, a version bumped on every change), assignedIPCount, the scaler, the
   reconcile status and a ``Ready`` condition. Problems (bad spec, node without providerID, NIC
   missing) set ``Error``, the condition and a Warning Event, and never crash-loop.

The NIC is read at most every ``nicRefreshSeconds`` unless a change is due (then it is re-read
before acting), which keeps ARM reads per allocated IP low. In-memory state (NIC snapshots,
guards, leak first-seen times, subnet state) is shared by the workers under one lock; the work
queue never runs one node's key twice at once. Side effects: Kubernetes and ARM writes, Events.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import ipaddress
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from nodewright.api.acn.v1alpha import (
    ASSIGNMENT_MODE_DYNAMIC,
    NETWORK_CONTAINER_STATUS_FAILED,
    NETWORK_CONTAINER_STATUS_SUBNET_FULL,
    NETWORK_CONTAINER_STATUS_SUCCESS,
    NETWORK_CONTAINER_TYPE_VNET,
    STATUS_ERROR,
    STATUS_UPDATED,
    STATUS_UPDATING,
    IPAssignment,
    NetworkContainer,
    NetworkContainerStatus,
    NodeNetworkConfig,
    NodeNetworkConfigSpec,
    ReconcileStatus,
    Scaler,
)
from nodewright.api.base import ValidationError
from nodewright.cloud.errors import CloudError, LimitExceededError, NotFoundError, SubnetFullError
from nodewright.cloud.models import NicInfo, SubnetInfo
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_provider_id, parse_subnet_id
from nodewright.controllers.node_network_config.cloud import NetworkOperations, NicLocator
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.resources import (
    CLUSTER_SUBNET_STATE,
    FINALIZER,
    NETWORK_INTERFACE_ANNOTATION,
    NODE_NETWORK_CONFIG,
    cluster_subnet_state_name,
    node_pods,
    provider_id_of,
)
from nodewright.ipam import (
    MAX_SECONDARY_IPS_PER_NIC,
    AllocationPlan,
    LeakTracker,
    NicGuard,
    NicIpConfiguration,
    compute_request,
    plan_allocation,
    status_assignments,
    subnet_exhausted,
    validate_requested_count,
)
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.informer import Store
from nodewright.runtime.kinds import NODE, POD
from nodewright.runtime.logs import get_logger
from nodewright.runtime.objects import add_finalizer, remove_finalizer, set_condition
from nodewright.runtime.reconcile import Request, Result

__all__ = ["POD_NODE_INDEX", "EventSink", "NodeNetworkConfigReconciler", "NodeNetworkConfigStores"]

log = get_logger(__name__)

POD_NODE_INDEX = "spec.nodeName"
READY = "Ready"
PENDING_REQUEUE_SECONDS = 0.5
FINALIZE_RETRY_SECONDS = 10.0
RELEASED_MEMORY_SECONDS = 600.0

Object = dict[str, Any]


class EventSink(Protocol):
    """Where Events go (``runtime.events.EventRecorder``)."""

    def event(self, obj: Object, type: Any, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class NodeNetworkConfigStores:
    """The cached reads: selected Nodes, NodeNetworkConfigs in our namespace, pods indexed by node."""

    nodes: Store
    node_network_configs: Store
    pods: Store


@dataclass
class _NicMemory:
    guard: NicGuard
    snapshot: NicInfo | None = None
    read_at: float = float("-inf")
    marked_at: dict[str, float] = field(default_factory=dict)
    released_at: dict[str, float] = field(default_factory=dict)
    """Names we removed lately: the node may list them a while longer (not 'unknown' to it)."""


@dataclass
class _SubnetMemory:
    info: SubnetInfo | None = None
    checked_at: float = float("-inf")
    exhausted: bool = False
    published: bool | None = None


@dataclass
class _Outcome:
    """What one allocation pass found, for the status and the requeue."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    container_status: NetworkContainerStatus = NETWORK_CONTAINER_STATUS_SUCCESS
    complete: bool = True
    retry_in: float | None = None


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_id(nic_id: str) -> str:
    """A network container ID that stays the same for a NIC across restarts."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "nodewright:" + nic_id.lower()))


def default_gateway(cidr: str | None) -> str:
    """Azure's gateway of a subnet: its first host address."""
    if not cidr:
        return ""
    network = ipaddress.ip_network(cidr, strict=False)
    return str(network.network_address + 1) if network.num_addresses > 2 else ""


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
        wall_clock: Callable[[], str] = _utc_now,
        new_name: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self._client = client
        self._stores = stores
        self._network = network
        self._locator = locator
        self._events = events
        self.settings = settings
        self._clock = clock
        self._wall_clock = wall_clock
        self._new_name = new_name
        self._lock = threading.Lock()
        self._nics: dict[str, _NicMemory] = {}
        self._subnets: dict[str, _SubnetMemory] = {}
        self._leaks = LeakTracker(settings.leak_grace_period_seconds)
        self._conditions_supported = True

    # -- entry point ------------------------------------------------------------------------

    def reconcile(self, request: Request) -> Result:
        namespace = self.settings.namespace
        if request.namespace != namespace:
            return Result()
        name = request.name
        node = self._node(name)
        raw = self._stores.node_network_configs.get(f"{namespace}/{name}")
        if raw is None:
            if node is not None and node is not _UNSELECTED:
                self._create(node)
            return Result()
        raw = copy.deepcopy(raw)
        if node is _UNSELECTED:
            return Result()
        if node is None or raw["metadata"].get("deletionTimestamp"):
            return self._finalize(raw, node)
        return self._reconcile_live(raw, node)

    # -- lifecycle ----------------------------------------------------------------------------

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

    def _create(self, node: Object) -> None:
        name = node["metadata"]["name"]
        body: Object = {
            "metadata": {
                "name": name,
                "namespace": self.settings.namespace,
                "labels": {"managed": "true", "owner": name},
                "finalizers": [FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": name,
                        "uid": node["metadata"].get("uid", ""),
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "spec": NodeNetworkConfigSpec().to_dict(),
        }
        if not body["metadata"]["ownerReferences"][0]["uid"]:
            del body["metadata"]["ownerReferences"]
        try:
            self._client.create(NODE_NETWORK_CONFIG, body, self.settings.namespace)
        except errors.AlreadyExists:
            return
        log.info("Created NodeNetworkConfig", node=name, namespace=self.settings.namespace)

    def _finalize(self, raw: Object, node: Object | None) -> Result:
        name = raw["metadata"]["name"]
        if not raw["metadata"].get("deletionTimestamp"):
            self._client.delete(NODE_NETWORK_CONFIG, name, self.settings.namespace, ignore_not_found=True)
            log.info("Deleted NodeNetworkConfig of a deleted node", node=name)
            return Result()
        nic_id = (raw["metadata"].get("annotations") or {}).get(NETWORK_INTERFACE_ANNOTATION)
        if nic_id and FINALIZER in (raw["metadata"].get("finalizers") or []):
            remaining = self._release_everything(raw, nic_id, node)
            if remaining:
                self._events.event(
                    raw,
                    "Warning",
                    "ReleaseBlocked",
                    f"{len(remaining)} IPs are still used by pods on node {name}; waiting before release",
                )
                return Result(requeue_after=FINALIZE_RETRY_SECONDS)
        if remove_finalizer(raw, FINALIZER):
            metadata = raw["metadata"]
            patch = {
                "metadata": {
                    "finalizers": metadata["finalizers"],
                    "resourceVersion": metadata["resourceVersion"],
                }
            }
            with contextlib.suppress(errors.NotFound):
                self._client.patch(NODE_NETWORK_CONFIG, name, patch, self.settings.namespace)
        with self._lock:
            if nic_id:
                self._nics.pop(nic_id.lower(), None)
                self._leaks.forget(nic_id.lower())
        log.info("Finalized NodeNetworkConfig", node=name)
        return Result()

    def _release_everything(self, raw: Object, nic_id: str, node: Object | None) -> list[str]:
        """Remove every secondary IP configuration of the NIC, except (while the Node exists) those
        a pod uses; returns the names kept back."""
        try:
            nic = self._network.get_network_interface(nic_id)
        except NotFoundError:
            return []
        secondaries = nic.secondary_ip_configurations
        in_use = self._fresh_pod_addresses(raw["metadata"]["name"]) if node is not None else set()
        kept = [c.name for c in secondaries if c.address is not None and c.address in in_use]
        releasable = [c.name for c in secondaries if c.name not in kept]
        if releasable:
            try:
                self._network.remove_secondary_ip_configurations(nic_id, releasable)
            except NotFoundError:
                return []
            log.info("Released IPs of a removed node", node=raw["metadata"]["name"], count=len(releasable))
        return kept

    # -- a live node ----------------------------------------------------------------------------

    def _reconcile_live(self, raw: Object, node: Object) -> Result:
        name = raw["metadata"]["name"]
        if add_finalizer(raw, FINALIZER):
            raw = self._patch(name, {"metadata": {"finalizers": raw["metadata"]["finalizers"]}})
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
            return self._report_problem(raw, config, "MissingProviderID", message)
        try:
            nic_id = self._locator.primary_network_interface(machine)
        except NotFoundError as error:
            return self._report_problem(raw, config, "NetworkInterfaceNotFound", f"{machine}: {error}")
        if (raw["metadata"].get("annotations") or {}).get(NETWORK_INTERFACE_ANNOTATION) != nic_id:
            raw = self._patch(name, {"metadata": {"annotations": {NETWORK_INTERFACE_ANNOTATION: nic_id}}})
            config = NodeNetworkConfig.from_object(raw)
        now = self._clock()
        memory = self._nic_memory(nic_id)
        with self._lock:
            waiting = memory.snapshot is None and not memory.guard.may_write(now)
        if waiting:
            # Backed off after a failed read: do not read again before the backoff ends.
            return Result(requeue_after=max(memory.guard.retry_in(now), PENDING_REQUEUE_SECONDS))
        try:
            nic = self._nic(nic_id, memory, now, fresh=False)
        except NotFoundError as error:
            self._backoff(memory, now)
            return self._report_problem(
                raw,
                config,
                "NetworkInterfaceNotFound",
                f"NIC {nic_id}: {error}",
                retry_in=memory.guard.retry_in(now),
            )
        except CloudError as error:
            self._backoff(memory, now)
            return self._report_problem(
                raw,
                config,
                "CloudError",
                f"Reading NIC {nic_id} failed: {error}",
                retry_in=memory.guard.retry_in(now),
            )
        subnet_id = _primary_subnet_id(nic)
        subnet = self._subnet(subnet_id, now) if subnet_id else None
        exhausted = self._exhausted(subnet_id) if subnet_id else False

        pods = self._stores.pods.by_index(POD_NODE_INDEX, name)
        demand, in_use = node_pods(pods)
        accounted = {
            assignment.name
            for container in config.status.network_containers[:1]
            for assignment in container.ip_assignments
        }
        spec_as_read = config.spec
        releasable_names = list(dict.fromkeys(spec_as_read.ips_not_in_use))
        requested = spec_as_read.requested_ip_count
        if self.settings.demand_from_pods:
            assignments = [
                (a.name, a.ip) for c in config.status.network_containers[:1] for a in c.ip_assignments
            ]
            pool_request = compute_request(
                demand=demand,
                scaler=self.settings.scaler,
                assignments=assignments,
                in_use_addresses=in_use,
                ips_not_in_use=spec_as_read.ips_not_in_use,
                exhausted=exhausted,
            )
            with self._lock:
                for marked in pool_request.newly_marked:
                    memory.marked_at[marked] = now
                for gone in pool_request.released + pool_request.reclaimed:
                    memory.marked_at.pop(gone, None)
            if pool_request.differs_from(spec_as_read.requested_ip_count, spec_as_read.ips_not_in_use):
                spec = {
                    "requestedIPCount": pool_request.requested_ip_count,
                    "ipsNotInUse": list(pool_request.ips_not_in_use),
                }
                raw = self._patch(name, {"spec": spec})
                log.info(
                    "Requested IPs",
                    node=name,
                    demand=demand,
                    requested=pool_request.requested_ip_count,
                    not_in_use=len(pool_request.ips_not_in_use),
                )
            requested = pool_request.requested_ip_count
            listed = set(pool_request.ips_not_in_use)
            settle = self.settings.release_settle_seconds
            with self._lock:
                settled = {n for n in listed if now - memory.marked_at.get(n, float("-inf")) >= settle}
            releasable_names = [n for n in releasable_names if n in settled]
            all_listed = list(pool_request.ips_not_in_use)
        else:
            all_listed = releasable_names

        outcome = _Outcome()
        checked = validate_requested_count(requested, MAX_SECONDARY_IPS_PER_NIC)
        if checked.problem is not None:
            outcome.problems.append(("InvalidRequestedIPCount", checked.problem))
        plan, nic, in_use = self._plan(
            name=name,
            nic_id=nic_id,
            nic=nic,
            memory=memory,
            now=now,
            requested=checked.count,
            releasable=releasable_names,
            listed=all_listed,
            accounted=accounted,
            in_use=in_use,
        )
        with self._lock:
            for name_released, when in list(memory.released_at.items()):
                if now - when > RELEASED_MEMORY_SECONDS:
                    del memory.released_at[name_released]
            unknown = sorted(n for n in plan.unknown if n not in memory.released_at)
        if unknown:
            message = f"ipsNotInUse names IPs this node does not hold: {', '.join(unknown)}"
            if not self.settings.demand_from_pods:
                outcome.problems.append(("UnknownIPsNotInUse", message))
            else:
                self._events.event(raw, "Warning", "UnknownIPsNotInUse", message)
        if plan.refused:
            self._events.event(
                raw,
                "Warning",
                "ReleaseRefused",
                f"Kept IPs listed in ipsNotInUse that pods use: {', '.join(sorted(plan.refused))}",
            )
        nic, added = self._execute(
            raw=raw,
            nic_id=nic_id,
            nic=nic,
            memory=memory,
            plan=plan,
            subnet_id=subnet_id,
            now=now,
            outcome=outcome,
        )
        # What the NIC really holds decides: a removal or an add that failed leaves names as they were.
        accounted = (accounted | set(plan.adopt) | set(added)) & {
            c.name for c in nic.secondary_ip_configurations
        }
        with self._lock:
            self._leaks.observe(nic_id.lower(), [n for n in plan.unaccounted if n not in accounted], now)
            on_nic = {c.name for c in nic.secondary_ip_configurations}
            for removed in plan.removals:
                memory.marked_at.pop(removed, None)
                if removed not in on_nic:
                    memory.released_at[removed] = now
        if plan.short_by:
            outcome.complete = False
        secondary = [NicIpConfiguration(c.name, c.address) for c in nic.secondary_ip_configurations]
        assignments_now = status_assignments(secondary, accounted)
        present_listed = {n for n in all_listed if n in dict(assignments_now)}
        if checked.count is not None and len(assignments_now) - len(present_listed) < checked.count:
            outcome.complete = False
        self._write_status(
            raw=raw,
            config=config,
            nic_id=nic_id,
            nic=nic,
            subnet=subnet,
            assignments=assignments_now,
            outcome=outcome,
        )
        delay = self._next_visit(
            nic_id=nic_id,
            memory=memory,
            now=now,
            outcome=outcome,
            listed=all_listed,
            assignments=assignments_now,
        )
        return Result(requeue_after=delay)

    def _plan(
        self,
        *,
        name: str,
        nic_id: str,
        nic: NicInfo,
        memory: _NicMemory,
        now: float,
        requested: int | None,
        releasable: Sequence[str],
        listed: Sequence[str],
        accounted: set[str],
        in_use: set[str],
    ) -> tuple[AllocationPlan, NicInfo, set[str]]:
        """Plan against the NIC; if a change is due, re-plan against a fresh NIC read and, before
        any release, against a fresh (uncached) list of the node's pods."""

        def plan_on(current: NicInfo, addresses: set[str]) -> AllocationPlan:
            secondary = [NicIpConfiguration(c.name, c.address) for c in current.secondary_ip_configurations]
            names_on_nic = {c.name for c in secondary}
            # requestedIPCount counts the IPs kept besides ipsNotInUse; names listed but not
            # released in this pass (still settling) are on the NIC on top of it.
            held_back = len([n for n in listed if n in names_on_nic and n not in releasable])
            unaccounted = [
                c.name for c in secondary if c.name not in accounted and c.address not in addresses
            ]
            with self._lock:
                collectable = self._leaks.observe(nic_id.lower(), unaccounted, now)
                add_limit = memory.guard.limit(MAX_SECONDARY_IPS_PER_NIC)
            return plan_allocation(
                requested=None if requested is None else requested + held_back,
                ips_not_in_use=releasable,
                nic=secondary,
                accounted=accounted,
                in_use_addresses=addresses,
                collectable=collectable,
                add_limit=add_limit,
            )

        plan = plan_on(nic, in_use)
        if plan.changes_nic and memory.read_at < now:
            nic = self._nic(nic_id, memory, now, fresh=True)
            plan = plan_on(nic, in_use)
        if plan.removals:
            in_use = in_use | self._fresh_pod_addresses(name)
            plan = plan_on(nic, in_use)
        return plan, nic, in_use

    def _execute(
        self,
        *,
        raw: Object,
        nic_id: str,
        nic: NicInfo,
        memory: _NicMemory,
        plan: AllocationPlan,
        subnet_id: str | None,
        now: float,
        outcome: _Outcome,
    ) -> tuple[NicInfo, list[str]]:
        """Carry out the plan on the NIC (unless it is backed off); returns the NIC as read after
        the writes and the names added."""
        if not plan.changes_nic:
            return nic, []
        if not memory.guard.may_write(now):
            outcome.complete = False
            outcome.retry_in = memory.guard.retry_in(now)
            return nic, []
        name = raw["metadata"]["name"]
        added: list[str] = []
        try:
            if plan.removals:
                nic = self._network.remove_secondary_ip_configurations(nic_id, list(plan.removals))
                self._remember(memory, nic, now)
                self._guard(memory, memory.guard.after_success(added=0))
                if plan.release:
                    self._events.event(
                        raw,
                        "Normal",
                        "ReleasedIPs",
                        f"Released {len(plan.release)} IPs listed in ipsNotInUse",
                    )
                if plan.collected:
                    self._events.event(
                        raw,
                        "Normal",
                        "CollectedLeakedIPs",
                        f"Released {len(plan.collected)} unaccounted IP configurations",
                    )
                log.info("Released IPs", node=name, released=len(plan.release), collected=len(plan.collected))
            if plan.add_count:
                names = [self._new_name() for _ in range(plan.add_count)]
                nic = self._network.add_secondary_ip_configurations(nic_id, names, subnet_id)
                self._remember(memory, nic, now)
                self._guard(memory, memory.guard.after_success(added=len(names)))
                added = names
                log.info("Added IPs", node=name, added=len(names))
        except (SubnetFullError, LimitExceededError) as error:
            guard = memory.guard.after_capacity_error(plan.add_count, now)
            self._guard(memory, guard)
            outcome.complete = False
            outcome.container_status = NETWORK_CONTAINER_STATUS_SUBNET_FULL
            outcome.retry_in = guard.retry_in(now) or PENDING_REQUEUE_SECONDS
            if guard.exhausted and subnet_id:
                self._mark_exhausted(subnet_id)
            self._events.event(raw, "Warning", "SubnetFull", f"Adding {plan.add_count} IPs failed: {error}")
            nic = self._nic(nic_id, memory, now, fresh=True)
        except NotFoundError as error:
            self._backoff(memory, now)
            outcome.problems.append(("NetworkInterfaceNotFound", f"NIC {nic_id}: {error}"))
            outcome.retry_in = memory.guard.retry_in(now)
        except CloudError as error:
            self._backoff(memory, now)
            outcome.complete = False
            outcome.container_status = NETWORK_CONTAINER_STATUS_FAILED
            outcome.retry_in = memory.guard.retry_in(now)
            self._events.event(raw, "Warning", "CloudError", f"Changing NIC {nic_id} failed: {error}")
            with contextlib.suppress(CloudError):
                nic = self._nic(nic_id, memory, now, fresh=True)
        return nic, added

    # -- status --------------------------------------------------------------------------------

    def _write_status(
        self,
        *,
        raw: Object,
        config: NodeNetworkConfig,
        nic_id: str,
        nic: NicInfo,
        subnet: SubnetInfo | None,
        assignments: list[tuple[str, str]],
        outcome: _Outcome,
    ) -> None:
        previous = config.status.network_containers[0] if config.status.network_containers else None
        container = NetworkContainer(
            id=container_id(nic_id),
            assignment_mode=ASSIGNMENT_MODE_DYNAMIC,
            type=NETWORK_CONTAINER_TYPE_VNET,
            primary_ip=nic.primary_ip or "",
            node_ip=nic.primary_ip or "",
            ip_assignments=[IPAssignment(name=n, ip=a) for n, a in assignments],
            default_gateway=default_gateway(subnet.cidr if subnet else None),
            subnet_address_space=(subnet.cidr or "") if subnet else "",
            status=outcome.container_status,
        )
        subnet_id = _primary_subnet_id(nic)
        if subnet_id:
            parsed = parse_subnet_id(subnet_id)
            container.subnet_name = parsed.name
            container.subscription_id = parsed.subscription_id
            container.resource_group_id = parsed.resource_group
            container.vnet_id = parsed.virtual_network_name
            container.subnet_id = parsed.name
        if previous is not None:
            container.version = previous.version
            comparable = copy.deepcopy(previous)
            comparable.assignment_mode = comparable.assignment_mode or ASSIGNMENT_MODE_DYNAMIC
            comparable.type = comparable.type or NETWORK_CONTAINER_TYPE_VNET
            if comparable.to_dict() != container.to_dict():
                container.version = previous.version + 1
        state: ReconcileStatus = STATUS_UPDATED
        reason, message = "Allocated", f"{len(assignments)} IPs on the NIC"
        ready: Literal["True", "False"] = "True"
        if outcome.problems:
            state = STATUS_ERROR
            reason = outcome.problems[0][0]
            message = "; ".join(text for _, text in outcome.problems)
            ready = "False"
            for problem_reason, text in outcome.problems:
                self._events.event(raw, "Warning", problem_reason, text)
        elif not outcome.complete:
            state = STATUS_UPDATING
            reason, ready = "Allocating", "False"
            message = f"{len(assignments)} IPs on the NIC; allocation in progress"
        status = copy.deepcopy(config.status)
        status.network_containers = [container]
        status.assigned_ip_count = len(assignments)
        scaler = self.settings.scaler
        status.scaler = Scaler(
            batch_size=scaler.batch_size,
            release_threshold_percent=scaler.release_threshold_percent,
            request_threshold_percent=scaler.request_threshold_percent,
            max_ip_count=scaler.max_ip_count,
        )
        status.status = state
        conditions = [condition.to_dict() for condition in status.conditions]
        set_condition(conditions, READY, ready, reason, message)
        self._write_status_body(raw, {**status.to_dict(), "conditions": conditions})

    def _write_status_body(self, raw: Object, status: Object) -> None:
        """Patch the status if it differs from the stored one (side effect). Against a CRD that
        does not know our ``conditions`` (Azure CNS's own), the server prunes them: that is
        noticed once and conditions are left out from then on, so the comparison settles instead
        of patching forever."""
        if not self._conditions_supported:
            status = {key: value for key, value in status.items() if key != "conditions"}
        if status == (raw.get("status") or {}):
            return
        stored = self._patch(raw["metadata"]["name"], {"status": status}, subresource="status")
        if "conditions" in status and "conditions" not in (stored.get("status") or {}):
            log.info("The NodeNetworkConfig CRD prunes status.conditions; leaving them out")
            self._conditions_supported = False

    def _report_problem(
        self, raw: Object, config: NodeNetworkConfig, reason: str, message: str, retry_in: float | None = None
    ) -> Result:
        """Status Error with the condition, a Warning Event; come back later (never a crash loop)."""
        self._events.event(raw, "Warning", reason, message)
        conditions = [condition.to_dict() for condition in config.status.conditions]
        set_condition(conditions, READY, "False", reason, message)
        self._write_status_body(
            raw, {**config.status.to_dict(), "status": STATUS_ERROR, "conditions": conditions}
        )
        log.info("Reported a problem", node=raw["metadata"]["name"], reason=reason, detail=message)
        return Result(requeue_after=retry_in if retry_in else self.settings.resync_period_seconds)

    # -- helpers ---------------------------------------------------------------------------------

    def _patch(self, name: str, body: Object, subresource: str | None = None) -> Object:
        """Merge-patch our NodeNetworkConfig (side effect). Spec (on the demand side) and status
        are ours alone, so no resourceVersion precondition: a stale cache cannot make it fail."""
        return self._client.patch(
            NODE_NETWORK_CONFIG, name, body, self.settings.namespace, subresource=subresource
        )

    def _next_visit(
        self,
        *,
        nic_id: str,
        memory: _NicMemory,
        now: float,
        outcome: _Outcome,
        listed: Sequence[str],
        assignments: list[tuple[str, str]],
    ) -> float:
        delays = [self.settings.resync_period_seconds]
        if outcome.retry_in is not None:
            delays.append(max(outcome.retry_in, PENDING_REQUEUE_SECONDS))
        elif not outcome.complete:
            delays.append(PENDING_REQUEUE_SECONDS)
        present = dict(assignments)
        with self._lock:
            due = self._leaks.next_due(nic_id.lower())
            settling = [
                memory.marked_at[n] + self.settings.release_settle_seconds
                for n in listed
                if n in present and n in memory.marked_at
            ]
        if due is not None:
            delays.append(max(due - now, PENDING_REQUEUE_SECONDS))
        if any(n in present for n in listed):
            delays.append(max(min(settling, default=now) - now, PENDING_REQUEUE_SECONDS))
        return min(delays)

    def _nic_memory(self, nic_id: str) -> _NicMemory:
        with self._lock:
            memory = self._nics.get(nic_id.lower())
            if memory is None:
                memory = _NicMemory(
                    guard=NicGuard(
                        base_seconds=self.settings.backoff_base_seconds,
                        cap_seconds=self.settings.backoff_cap_seconds,
                    )
                )
                self._nics[nic_id.lower()] = memory
            return memory

    def _nic(self, nic_id: str, memory: _NicMemory, now: float, *, fresh: bool) -> NicInfo:
        with self._lock:
            snapshot, read_at = memory.snapshot, memory.read_at
        if not fresh and snapshot is not None and now - read_at < self.settings.nic_refresh_seconds:
            return snapshot
        nic = self._network.get_network_interface(nic_id)
        self._remember(memory, nic, now)
        return nic

    def _remember(self, memory: _NicMemory, nic: NicInfo, now: float) -> None:
        with self._lock:
            memory.snapshot = nic
            memory.read_at = now

    def _guard(self, memory: _NicMemory, guard: NicGuard) -> None:
        with self._lock:
            memory.guard = guard

    def _backoff(self, memory: _NicMemory, now: float) -> None:
        with self._lock:
            memory.guard = memory.guard.after_failure(now)
            memory.snapshot = None

    def _fresh_pod_addresses(self, node_name: str) -> set[str]:
        """Addresses pods on the node report, read from the API server (not the cache)."""
        pods = self._client.list(POD, field_selector=f"spec.nodeName={node_name}").items
        return node_pods(pods)[1]

    def _subnet(self, subnet_id: str, now: float) -> SubnetInfo | None:
        key = subnet_id.lower()
        with self._lock:
            memory = self._subnets.setdefault(key, _SubnetMemory())
            if (
                memory.info is not None
                and now - memory.checked_at < self.settings.subnet_check_interval_seconds
            ):
                return memory.info
        try:
            info = self._network.get_subnet(subnet_id)
        except CloudError as error:
            log.info("Could not read subnet usage", subnet=subnet_id, error=str(error))
            with self._lock:
                return memory.info
        with self._lock:
            memory.info = info
            memory.checked_at = now
            memory.exhausted = subnet_exhausted(
                available=info.available,
                batch_size=self.settings.scaler.batch_size,
                was_exhausted=memory.exhausted,
            )
        return info

    def _exhausted(self, subnet_id: str) -> bool:
        with self._lock:
            memory = self._subnets.setdefault(subnet_id.lower(), _SubnetMemory())
            exhausted, published = memory.exhausted, memory.published
        if published is not exhausted:
            self._publish_subnet_state(subnet_id, exhausted)
        return exhausted

    def _mark_exhausted(self, subnet_id: str) -> None:
        with self._lock:
            memory = self._subnets.setdefault(subnet_id.lower(), _SubnetMemory())
            memory.exhausted = True
        self._publish_subnet_state(subnet_id, True)

    def _publish_subnet_state(self, subnet_id: str, exhausted: bool) -> None:
        """Write the subnet's ClusterSubnetState (side effect); a failure is retried next time."""
        name = cluster_subnet_state_name(parse_subnet_id(subnet_id).name)
        namespace = self.settings.namespace
        status = {"exhausted": exhausted, "timestamp": self._wall_clock()}
        try:
            try:
                current = self._client.get(CLUSTER_SUBNET_STATE, name, namespace)
            except errors.NotFound:
                current = self._client.create(
                    CLUSTER_SUBNET_STATE, {"metadata": {"name": name, "namespace": namespace}}, namespace
                )
            if (current.get("status") or {}).get("exhausted") is not exhausted or "status" not in current:
                self._client.update_status(CLUSTER_SUBNET_STATE, {**current, "status": status})
                log.info("Updated ClusterSubnetState", subnet=name, exhausted=exhausted)
        except (errors.Conflict, errors.AlreadyExists) as error:
            log.info("ClusterSubnetState changed meanwhile; will retry", subnet=name, error=str(error))
            return
        with self._lock:
            self._subnets.setdefault(subnet_id.lower(), _SubnetMemory()).published = exhausted


_UNSELECTED: Object = {"metadata": {"name": ""}}
"""Marker: the Node exists but the selector leaves it out (leave its NodeNetworkConfig alone)."""


def _primary_subnet_id(nic: NicInfo) -> str | None:
    for configuration in nic.ip_configurations:
        if configuration.primary and configuration.subnet_id:
            return configuration.subnet_id
    for configuration in nic.ip_configurations:
        if configuration.subnet_id:
            return configuration.subnet_id
    return None
