"""``BootPools``: each Uniform scale set's model carries the pool its nodes usually hold, so a new
instance boots with its IPs (issue 32).

A new node's pool used to be one PUT of its instance, which cannot start before the instance's
create has ended (Compute runs one operation on an instance at a time) and is heard done at ARM's
``Retry-After``: pods that landed on the node first waited for their addresses, and a rollout's
surge slot spent 9.6 s of its 32.7 s cycle on it. Azure builds a new instance's NICs from the
scale set's model (``cloud.boot_pools``), so IP configurations there are on the machine with
addresses when it boots, and the node's first pass adopts them into its pool with no write
(``ipam.allocation``: unaccounted configurations are adopted before new ones are added). A node
that needs more gets the rest by a PUT as before; one that needs fewer leaves the rest
unaccounted, and the leak grace period gives them back.

Rules (``boot_pool_size``, pure): the size is the median of the pools (secondary IP
configurations) of the scale set's nodes' NICs that have one, rounded up to the scaler's batch
and capped by its maximum; nothing is decided until a tenth of the NICs (at least one) have a
pool, so a cold start decides early, from its first filled pools. Azure takes a new machine's boot pool
from the subnet when it creates the machine, and fails the scale-out if the subnet cannot hold
it: so the model carries none while the subnet has fewer free addresses than ``ROOM_MACHINES``
machines' boot pools (``within_room``), and new nodes get their IPs by PUT as before.

The pools are learnt without reads of their own: ``observe`` hears each NIC a pass read (the
``NicBook``'s ``on_remember``), ``listed`` each Uniform scale set's NICs as the NIC watcher
listed them (which replaces what was learnt of that scale set: gone NICs go). ``decide_due``,
called by the watcher after each list, decides every scale set that is due: a scale set never
decided at once (a cold start's models are written while it fills the pools, not in the steady
state after it), then at most every ``CHECK_LISTS`` NIC list periods (5 minutes by default: the
median moves slowly, a model write is rare). The model is read (one GET) only when the decided
size differs from what it was last seen to carry, or that sight is older than ``REREAD_LISTS``
periods (30 minutes); it is written (one PATCH, If-Match) only when it differs. A scale set
whose model reaches its instances (upgrade policy Automatic or Rolling) is never written: one
log line says so. A read or write our own ARM budget keeps back is not a failure: it is tried
again when the budget allows (the write with no new read), with no log line. A failed read or
write logs one line and is tried at the next decision. Side
effects: ARM reads and writes (through ``BootPoolModels``), log lines, on the watcher's thread;
``observe`` and ``listed`` only remember.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from nodewright.cloud.boot_pools import ScaleSetBootPool
from nodewright.cloud.errors import CloudError, kept_back
from nodewright.cloud.models import NicInfo
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import ScaleSetId
from nodewright.controllers.node_network_config.scope_listings import scale_set_instance_of
from nodewright.ipam import MAX_SECONDARY_IPS_PER_NIC, PoolScaler
from nodewright.runtime import get_logger

__all__ = [
    "CHECK_LISTS",
    "REREAD_LISTS",
    "ROOM_MACHINES",
    "SAMPLE_DIVISOR",
    "BootPoolModels",
    "BootPools",
    "boot_pool_size",
    "within_room",
]

log = get_logger(__name__)

CHECK_LISTS = 5
"""A scale set's boot pool is decided at most once in this many NIC list periods."""
REREAD_LISTS = 30
"""The model is read again at least once in this many periods (someone else may write it)."""
SAMPLE_DIVISOR = 10
"""A scale set is decided once a tenth of its nodes (at least one) have a pool."""
ROOM_MACHINES = 10
"""The subnet must have room for this many new machines' boot pools, or the model carries none."""


@runtime_checkable
class BootPoolModels(Protocol):
    """A scale set's boot pool, read and written (``nodewright.cloud.compute.ComputeService``)."""

    def get_scale_set_boot_pool(self, scale_set: ScaleSetId) -> ScaleSetBootPool: ...

    def begin_set_scale_set_boot_pool(
        self, pool: ScaleSetBootPool, count: int, on_done: Callable[[OperationOutcome], None]
    ) -> None: ...


def boot_pool_size(pools: Sequence[int], scaler: PoolScaler) -> int | None:
    """The boot pool for nodes whose pools are ``pools``: the median of those that have one (0 is
    a node not sized yet), rounded up to the batch, at most the scaler's maximum; None until a
    tenth of them (at least one) have one. Pure."""
    sized = [pool for pool in pools if pool > 0]
    if not sized or len(sized) < len(pools) // SAMPLE_DIVISOR:
        return None
    median = statistics.median_low(sized)
    batch = max(1, scaler.batch_size)
    return min(-(-median // batch) * batch, scaler.max_ip_count)


def within_room(size: int, available: int | None) -> int:
    """``size``, or 0 when the subnet's ``available`` addresses (None: not known yet) cannot hold
    ``ROOM_MACHINES`` new machines' boot pools and primary addresses. Pure."""
    if available is not None and available < ROOM_MACHINES * (size + 1):
        return 0
    return size


def _pool(nic: NicInfo) -> int:
    return sum(1 for configuration in nic.ip_configurations if not configuration.primary)


@dataclass
class _Seen:
    checked_at: float = float("-inf")
    read_at: float = float("-inf")
    count: int | None = None
    """What the model was last seen (or written) to carry; None: not known."""
    refused: bool = False
    subnet: str | None = None
    """The subnet of the model's primary IP configuration, from its last read."""
    kept: tuple[ScaleSetBootPool, int] | None = None
    """A write our own budget kept back (never sent): the model as read and the size, sent again
    when the budget allows, with no new read."""
    writing_since: float | None = None
    """When our write in flight started (its end clears it; one lost is forgotten at a re-read)."""


class BootPools:
    """See the module docstring."""

    def __init__(
        self,
        models: BootPoolModels,
        scaler: PoolScaler,
        list_period: float,
        clock: Callable[[], float],
        available: Callable[[str], int | None] = lambda _subnet: None,
    ) -> None:
        """``available``: a subnet's free addresses as last read (None: not known)."""
        self._models, self._scaler, self._clock, self._available = models, scaler, clock, available
        self._check, self._reread = CHECK_LISTS * list_period, REREAD_LISTS * list_period
        self._seen: dict[str, _Seen] = {}
        self._pools: dict[str, dict[str, int]] = {}
        """Per scale set (its lowercased ID), each NIC's pool as last read or listed."""
        self._scale_sets: dict[str, ScaleSetId] = {}
        self._lock = threading.Lock()

    def observe(self, nic: NicInfo) -> None:
        """A NIC a pass read: remember its pool (no I/O)."""
        instance = scale_set_instance_of(nic.id)
        if instance is not None:
            with self._lock:
                self._scale_sets[instance.scale_set.key] = instance.scale_set
                self._pools.setdefault(instance.scale_set.key, {})[nic.id.lower()] = _pool(nic)

    def listed(self, nics: Sequence[NicInfo]) -> None:
        """One Uniform scale set's tracked NICs as just listed: they replace what was learnt."""
        scale_set = _scale_set_of(nics)
        if scale_set is not None:
            with self._lock:
                self._scale_sets[scale_set.key] = scale_set
                self._pools[scale_set.key] = {nic.id.lower(): _pool(nic) for nic in nics}

    def writes_in_flight(self) -> int:
        """Model writes whose operation has not ended."""
        with self._lock:
            return sum(1 for seen in self._seen.values() if seen.writing_since is not None)

    def decide_due(self) -> None:
        """Decide every scale set that is due (see the module docstring); I/O."""
        with self._lock:
            keys = list(self._pools)
        for key in keys:
            self._decide(key)

    def _decide(self, key: str) -> None:
        now = self._clock()
        with self._lock:
            seen = self._seen.setdefault(key, _Seen())
            writing = seen.writing_since is not None and now - seen.writing_since < self._reread
            if writing or now - seen.checked_at < self._check:
                return
            wanted = boot_pool_size(list(self._pools.get(key, {}).values()), self._scaler)
            if wanted is None:
                return
            seen.checked_at = now
            scale_set, subnet, fresh = self._scale_sets[key], seen.subnet, now - seen.read_at < self._reread
            kept, seen.kept = seen.kept, None
        if kept is not None:
            self._write(*kept, seen)
            return
        if subnet is not None:
            wanted = within_room(wanted, self._available(subnet))
        if fresh and (seen.refused or seen.count == wanted):
            return
        self._reconcile(scale_set, seen, wanted, now)

    def _reconcile(self, scale_set: ScaleSetId, seen: _Seen, wanted: int, now: float) -> None:
        try:
            pool = self._models.get_scale_set_boot_pool(scale_set)
        except CloudError as error:
            if kept_back(error):  # our read budget: no answer, nothing failed; come back then
                self._retry_in(seen, error.retry_after)
            else:
                log.warning("Reading a scale set's model failed", scale_set=str(scale_set), error=str(error))
            return
        seen.read_at, seen.count, seen.subnet = now, pool.count, pool.subnet_id
        if not pool.writable:
            if not seen.refused:
                log.info(
                    "Not keeping a boot pool: the scale set's model reaches its instances",
                    scale_set=str(scale_set),
                    upgrade_mode=pool.upgrade_mode,
                )
            seen.refused = True
            return
        seen.refused = False
        if pool.subnet_id is not None:
            wanted = within_room(wanted, self._available(pool.subnet_id))
        wanted = min(wanted, _room(pool))
        if pool.count == wanted:
            return
        self._write(pool, wanted, seen)

    def _retry_in(self, seen: _Seen, seconds: float | None) -> None:
        """Make the scale set due again in ``seconds`` (1 s when ARM's budget named none)."""
        with self._lock:
            seen.checked_at = self._clock() + (seconds or 1.0) - self._check

    def _write(self, pool: ScaleSetBootPool, wanted: int, seen: _Seen) -> None:
        def on_done(outcome: OperationOutcome) -> None:
            with self._lock:
                seen.writing_since = None
                seen.count = wanted if outcome.succeeded else None
            if not outcome.succeeded:
                log.warning("Writing a scale set's boot pool failed", scale_set=str(pool.scale_set))

        seen.writing_since = self._clock()
        try:
            self._models.begin_set_scale_set_boot_pool(pool, wanted, on_done)
        except CloudError as error:
            with self._lock:
                seen.writing_since = None
                if kept_back(error):  # never sent: the same write when our budget allows
                    seen.kept = (pool, wanted)
                else:
                    seen.count = None
            if kept_back(error):
                self._retry_in(seen, error.retry_after)
                return
            log.warning(
                "Writing a scale set's boot pool failed", scale_set=str(pool.scale_set), error=str(error)
            )
            return
        log.info(
            "Setting a scale set's boot pool", scale_set=str(pool.scale_set), before=pool.count, ips=wanted
        )


def _room(pool: ScaleSetBootPool) -> int:
    """Ours that fit beside the primary and the user's own on one NIC (256 at most)."""
    return max(0, MAX_SECONDARY_IPS_PER_NIC - pool.foreign)


def _scale_set_of(nics: Sequence[NicInfo]) -> ScaleSetId | None:
    for nic in nics:
        instance = scale_set_instance_of(nic.id)
        if instance is not None:
            return instance.scale_set
    return None
