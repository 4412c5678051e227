"""``SubnetBook``: what the node_network_config reconciler knows about each pod subnet, and the
ClusterSubnetState it publishes for it.

Per subnet: the last usage read (every ``subnetCheckIntervalSeconds``), whether it is exhausted
(``ipam.subnet_exhausted``, with hysteresis; or marked so after a capacity error), and what was
last published. Exhaustion is written to the subnet's ClusterSubnetState, which Azure CNS watches
to drop to batch 1. It also keeps a short history of usage for the time-to-exhaustion metric.
One read per subnet at a time: a pass that finds the usage due while another pass reads it goes
on with the last usage (or, before the first read, waits for that read), so a cold start of many
nodes sharing one subnet does not send one read per worker. One lock guards the memory. Side
effects: ARM subnet reads, ClusterSubnetState writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from nodewright.cloud.errors import CloudError
from nodewright.cloud.models import SubnetInfo
from nodewright.cloud.resource_ids import parse_subnet_id
from nodewright.controllers.node_network_config.cloud import NetworkOperations
from nodewright.controllers.node_network_config.resources import (
    CLUSTER_SUBNET_STATE,
    cluster_subnet_state_name,
)
from nodewright.ipam import subnet_exhausted
from nodewright.runtime import Client, errors, get_logger

__all__ = ["SubnetBook", "time_to_exhaustion"]

log = get_logger(__name__)

READ_WAIT_SECONDS = 30.0
"""How long a pass waits for another pass's first read of a subnet (then it goes on without)."""


@dataclass
class _Memory:
    info: SubnetInfo | None = None
    checked_at: float = float("-inf")
    exhausted: bool = False
    published: bool | None = None
    first: tuple[float, int] | None = None
    """(when, available) at the first read: the baseline of the consumption rate."""
    reading: threading.Event | None = None
    """Set when the read in flight ends (``None``: no read in flight)."""


def time_to_exhaustion(first: tuple[float, int] | None, now: float, available: int) -> float | None:
    """Seconds until the subnet runs out at the average consumption rate since ``first`` (None:
    not consuming, or too little history). Pure."""
    if first is None or now - first[0] < 1.0:
        return None
    consumed = first[1] - available
    if consumed <= 0:
        return None
    return available / (consumed / (now - first[0]))


class SubnetBook:
    """Subnet usage, exhaustion and ClusterSubnetState (see the module docstring)."""

    def __init__(
        self,
        *,
        client: Client,
        network: NetworkOperations,
        namespace: str,
        check_interval_seconds: float,
        batch_size: int,
        wall_clock: Callable[[], str],
    ) -> None:
        self._client = client
        self._network = network
        self._namespace = namespace
        self._interval = check_interval_seconds
        self._batch_size = batch_size
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._memory: dict[str, _Memory] = {}

    def _entry(self, subnet_id: str) -> _Memory:
        return self._memory.setdefault(subnet_id.lower(), _Memory())

    def usage(self, subnet_id: str, now: float) -> SubnetInfo | None:
        """The subnet's usage, read from ARM at most every check interval and by one pass at a
        time (side effect: a read)."""
        with self._lock:
            memory = self._entry(subnet_id)
            if memory.info is not None and now - memory.checked_at < self._interval:
                return memory.info
            reading = memory.reading
            if reading is not None and memory.info is not None:
                return memory.info  # another pass reads it now
            if reading is None:
                memory.reading = threading.Event()
        if reading is not None:
            reading.wait(READ_WAIT_SECONDS)  # the first read, by another pass
            with self._lock:
                return memory.info
        try:
            return self._read(subnet_id, memory, now)
        finally:
            with self._lock:
                done, memory.reading = memory.reading, None
            if done is not None:
                done.set()

    def _read(self, subnet_id: str, memory: _Memory, now: float) -> SubnetInfo | None:
        try:
            info = self._network.get_subnet(subnet_id)
        except CloudError as error:
            log.info("Could not read subnet usage", subnet=subnet_id, error=str(error))
            with self._lock:
                return memory.info
        with self._lock:
            memory.info, memory.checked_at = info, now
            if memory.first is None:
                memory.first = (now, info.available)
            memory.exhausted = subnet_exhausted(
                available=info.available, batch_size=self._batch_size, was_exhausted=memory.exhausted
            )
        return info

    def exhaustion_forecasts(self, now: float) -> dict[str, float]:
        """Subnet name -> seconds to exhaustion, for subnets that are being consumed."""
        with self._lock:
            entries = list(self._memory.items())
        forecasts: dict[str, float] = {}
        for key, memory in entries:
            if memory.info is None:
                continue
            seconds = time_to_exhaustion(memory.first, now, memory.info.available)
            if seconds is not None:
                forecasts[key.rsplit("/", 1)[-1]] = seconds
        return forecasts

    def exhaustion_states(self) -> dict[str, bool]:
        """Subnet name -> whether it counts as exhausted, for every subnet read or marked."""
        with self._lock:
            return {key.rsplit("/", 1)[-1]: memory.exhausted for key, memory in self._memory.items()}

    def exhausted(self, subnet_id: str) -> bool:
        """Whether the subnet is exhausted; publishes the state when it changed (side effect)."""
        with self._lock:
            memory = self._entry(subnet_id)
            exhausted, published = memory.exhausted, memory.published
        if published is not exhausted:
            self._publish(subnet_id, exhausted)
        return exhausted

    def mark_exhausted(self, subnet_id: str) -> None:
        with self._lock:
            self._entry(subnet_id).exhausted = True
        self._publish(subnet_id, True)

    def _publish(self, subnet_id: str, exhausted: bool) -> None:
        """Write the subnet's ClusterSubnetState (side effect); a failure is retried next time."""
        name = cluster_subnet_state_name(parse_subnet_id(subnet_id).name)
        namespace = self._namespace
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
            self._entry(subnet_id).published = exhausted
