"""The read stage of a node_network_config pass: one immutable ``PassView`` of a node.

Owns ``PassView`` (what the plan stage reads: the NodeNetworkConfig, the Node, the NIC, the
subnet, the node's pods and a copy of the book's memory of the NIC), ``Halt`` (what stops a pass
before it plans, and what to say about it) and ``PassReader``, which reads:

- the NodeNetworkConfig, taken hold of first (our finalizer, the Node as its controller:
  ``lifecycle``; the NIC's ID annotated on it: these writes come before the view, which holds the
  stored object after them);
- the NIC (tracked in the book for the NIC watcher, ``nic_watch``, whose lists keep its snapshot
  fresh; read with a GET only when the snapshot is older than ``nicRefreshSeconds`` or a write
  ended since the last pass, which the book then absorbs: ``NicWrites.absorb``; with no snapshot
  at all, a Uniform instance's NIC is taken from its scale set's listing, ``scope_listings``,
  when that shows it);
- the subnet's usage (``subnets``) and the node's pods (``spec.nodeName`` index), plus the pods
  the Node's ``nodewright.io/incoming-pods`` annotation says are about to arrive.

Also the two reads a plan may ask for again: the NIC afresh (``nic``) and the node's pods
uncached (``resources.fresh_pod_addresses``). Side effects: metadata patches, ARM reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.base import ValidationError
from nodewright.cloud.errors import CloudError, NotFoundError, kept_back
from nodewright.cloud.models import NicInfo, SubnetInfo
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_provider_id
from nodewright.controllers.node_network_config.cloud import NetworkOperations, NicLocator
from nodewright.controllers.node_network_config.config_writes import ConfigWrites
from nodewright.controllers.node_network_config.demand import incoming_pods
from nodewright.controllers.node_network_config.lifecycle import Lifecycle
from nodewright.controllers.node_network_config.nic_book import NicBook, NicMemory
from nodewright.controllers.node_network_config.operations import (
    STALE_OPERATION_SECONDS,
    NicOperation,
    NicWrites,
    landed,
)
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.pass_rules import NodeNetworkConfigStores
from nodewright.controllers.node_network_config.resources import (
    FINALIZER,
    NETWORK_INTERFACE_ANNOTATION,
    fresh_pod_addresses,
    node_pods,
    provider_id_of,
)
from nodewright.controllers.node_network_config.scope_listings import ScaleSetListings
from nodewright.controllers.node_network_config.status import primary_subnet_id
from nodewright.controllers.node_network_config.subnets import SubnetBook
from nodewright.ipam import demand_with_incoming
from nodewright.runtime import NODE, Client, Result, add_finalizer, errors, get_logger, parse_time

__all__ = ["PENDING_REQUEUE_SECONDS", "POD_NODE_INDEX", "UNSELECTED", "Halt", "PassReader", "PassView"]

log = get_logger(__name__)

POD_NODE_INDEX = "spec.nodeName"
PENDING_REQUEUE_SECONDS = 0.5
Object = dict[str, Any]

UNSELECTED: Object = {"metadata": {"name": ""}}
"""Marker: the Node exists but the selector leaves it out (leave its NodeNetworkConfig alone)."""


@dataclass(frozen=True)
class PassView:
    """What one pass read: immutable for the plan stage."""

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
    memory: NicMemory
    """The book's memory of the NIC, after absorbing the write that ended (if any)."""
    released_lately: frozenset[str] = frozenset()
    ended: NicOperation | None = None  # the NIC write that ended since the last pass

    @property
    def name(self) -> str:
        return str(self.raw["metadata"]["name"])

    @property
    def assignments(self) -> list[tuple[str, str]]:
        """The status's ``(name, address)`` pairs, oldest first."""
        return [(a.name, a.ip) for c in self.config.status.network_containers[:1] for a in c.ip_assignments]

    @property
    def accounted(self) -> set[str]:
        """The names the pool holds: the status's, and those the ended write added."""
        return {name for name, _ in self.assignments} | landed(self.ended)


@dataclass(frozen=True)
class Halt:
    """What stops a pass before it plans: a ``problem`` (reason, message) to report, coming back
    after ``retry_in`` (else a resync); a ``warning`` Event; or just a ``result``."""

    raw: Object
    config: NodeNetworkConfig | None = None
    result: Result | None = None
    problem: tuple[str, str] | None = None
    retry_in: float | None = None
    warning: tuple[str, str] | None = None


class PassReader:
    """Reads a node's view (see the module docstring)."""

    def __init__(  # noqa: PLR0917 - the wiring of one reconciler
        self,
        client: Client,
        stores: NodeNetworkConfigStores,
        network: NetworkOperations,
        locator: NicLocator,
        parts: tuple[NicBook, SubnetBook, NicWrites, ConfigWrites, Lifecycle],
        settings: NodeNetworkConfigSettings,
        clocks: tuple[Callable[[], float], Callable[[], str]],
        *,
        listings: ScaleSetListings | None = None,
    ) -> None:
        self._client, self._stores, self._network, self._locator = client, stores, network, locator
        self._listings = listings
        self._book, self._subnets, self._writes, self._configs, self._lifecycle = parts
        self._settings = settings
        self._clock, self._wall_clock = clocks

    def node(self, name: str) -> Object | None:
        """The selected Node; ``UNSELECTED`` when it exists but the selector leaves it out; None
        only when an uncached read confirms it is gone."""
        node = self._stores.nodes.get(name)
        if node is not None:
            return node
        try:
            self._client.get(NODE, name)
        except errors.NotFound:
            return None
        return UNSELECTED

    def read(self, raw: Object, node: Object) -> PassView | Halt:
        """The view of one node, or what stops the pass."""
        found = self._take_hold(raw, node)
        if isinstance(found, Halt):
            return found
        raw, config, nic_id = found
        now = self._clock()
        if self._writes.in_flight(nic_id, now):  # one writer per NIC; its end enqueues us
            return Halt(raw, result=Result(requeue_after=STALE_OPERATION_SECONDS))
        ended = self._book.take_ended_operation(nic_id)
        nic = self._read_nic(raw, config, nic_id, now, fresh=ended is not None)
        if isinstance(nic, Halt):
            return nic
        if ended is not None:
            self._writes.absorb(nic_id, ended, nic, now)
        subnet_id = primary_subnet_id(nic)
        resident, in_use = node_pods(self._stores.pods.by_index(POD_NODE_INDEX, config.name))
        return PassView(
            raw=raw,
            config=config,
            node=node,
            nic_id=nic_id,
            nic=nic,
            subnet_id=subnet_id,
            subnet=self._subnets.usage(subnet_id, now) if subnet_id else None,
            exhausted=self._subnets.exhausted(subnet_id) if subnet_id else False,
            demand=demand_with_incoming(resident, incoming_pods(node, parse_time(self._wall_clock()))),
            in_use=frozenset(in_use),
            now=now,
            memory=self._book.memory(nic_id),
            released_lately=frozenset(self._book.recently_released(nic_id, now)),
            ended=ended,
        )

    def nic(self, nic_id: str, now: float, *, fresh: bool, newer_than: float | None = None) -> NicInfo:
        """The NIC: the book's snapshot while young enough; with none (a node's first pass),
        its scale set's listing when that shows it (remembered with the listing's time, so a
        plan may write from it while young: ``reconciler._plan_nic``); ``fresh`` with
        ``newer_than`` (a re-read before a write), a listing sent after that while young
        (``ScaleSetListings.newer_nic``); else a GET. Remembered in the book."""
        snapshot, read_at = self._book.snapshot(nic_id)
        if not fresh and snapshot is not None and now - read_at < self._settings.nic_refresh_seconds:
            return snapshot
        listed = self._listings.nic(nic_id) if not fresh and snapshot is None and self._listings else None
        if fresh and newer_than is not None and self._listings is not None:
            listed = self._listings.newer_nic(nic_id, newer_than)
        if listed is not None and listed[1] > read_at:  # newer than anything the book knew
            self._book.remember(nic_id, *listed)
            return listed[0]
        nic = self._network.get_network_interface(nic_id)
        self._book.remember(nic_id, nic, now)
        return nic

    def fresh_pod_addresses(self, node_name: str) -> set[str]:
        """Addresses pods on the node report, read from the API server (not the cache)."""
        return fresh_pod_addresses(self._client, node_name)

    def _take_hold(self, raw: Object, node: Object) -> tuple[Object, NodeNetworkConfig, str] | Halt:
        """Finalizer, controller reference, parsed model, the node's NIC (annotated on the object)."""
        name = raw["metadata"]["name"]
        if add_finalizer(raw, FINALIZER):
            raw = self._configs.patch(name, {"metadata": {"finalizers": raw["metadata"]["finalizers"]}})
        raw = self._lifecycle.adopt(raw, node)
        try:
            config = NodeNetworkConfig.from_object(raw)
        except ValidationError as error:
            log.info("Skipped invalid NodeNetworkConfig", node=name, error=str(error))
            return Halt(raw, result=Result(), warning=("InvalidNodeNetworkConfig", str(error)))
        try:
            machine = parse_provider_id(provider_id_of(node))
        except InvalidResourceIdError:
            message = f"Node {name} has no Azure providerID ({provider_id_of(node) or 'empty'})"
            return Halt(raw, config, problem=("MissingProviderID", message))
        try:
            nic_id = self._locator.primary_network_interface(machine)
        except NotFoundError as error:
            return Halt(raw, config, problem=("NetworkInterfaceNotFound", f"{machine}: {error}"))
        self._book.track(nic_id, name)
        if (raw["metadata"].get("annotations") or {}).get(NETWORK_INTERFACE_ANNOTATION) != nic_id:
            body = {"metadata": {"annotations": {NETWORK_INTERFACE_ANNOTATION: nic_id}}}
            raw = self._configs.patch(name, body)
            config = NodeNetworkConfig.from_object(raw)
        return raw, config, nic_id

    def _read_nic(
        self, raw: Object, config: NodeNetworkConfig, nic_id: str, now: float, *, fresh: bool
    ) -> NicInfo | Halt:
        snapshot, _ = self._book.snapshot(nic_id)
        guard = self._book.guard(nic_id)
        if snapshot is None and not guard.may_write(now):
            # Backed off after a failed read: do not read again before the backoff ends.
            return Halt(raw, result=Result(requeue_after=max(guard.retry_in(now), PENDING_REQUEUE_SECONDS)))
        try:
            return self.nic(nic_id, now, fresh=fresh)
        except NotFoundError as error:
            retry_in = self._book.back_off(nic_id, now)
            return Halt(
                raw, config, problem=("NetworkInterfaceNotFound", f"NIC {nic_id}: {error}"), retry_in=retry_in
            )
        except CloudError as error:
            if kept_back(error):  # our budget kept the read back: the NIC did not fail
                return Halt(raw, result=Result(requeue_after=error.retry_after or PENDING_REQUEUE_SECONDS))
            retry_in = self._book.back_off(nic_id, now)
            problem = ("CloudError", f"Reading NIC {nic_id} failed: {error}")
            return Halt(raw, config, problem=problem, retry_in=retry_in)
