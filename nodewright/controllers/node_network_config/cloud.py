"""The cloud operations the node_network_config reconciler needs, as narrow protocols.

Owns ``NetworkOperations`` (``NetworkService`` satisfies it: read a NIC, add and remove its
secondary IP configurations, waiting for the write or, ``begin_``, leaving its operation to the
cloud layer's tracker, read a subnet's usage) and ``NicLocator`` (which NIC of a machine
carries the node's pool: its primary one). ``MachineNicLocator`` answers through
``ComputeService.get_primary_network_interface`` and remembers the answer, since a machine's
NICs do not change over its life. Side effects: ARM reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from nodewright.cloud.factory import Cloud
from nodewright.cloud.models import NicInfo, SubnetInfo
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import MachineId

__all__ = ["MachineNicLocator", "NetworkOperations", "NicLocator"]


class NetworkOperations(Protocol):
    """NIC and subnet operations (``nodewright.cloud.network.NetworkService``)."""

    def get_network_interface(self, nic: str) -> NicInfo: ...

    def add_secondary_ip_configurations(
        self, nic: str, names: Sequence[str], subnet_id: str | None = None, prefix_length: int | None = None
    ) -> NicInfo: ...

    def remove_secondary_ip_configurations(self, nic: str, names: Sequence[str]) -> NicInfo: ...

    def begin_add_secondary_ip_configurations(
        self,
        nic: str,
        names: Sequence[str],
        subnet_id: str | None = None,
        prefix_length: int | None = None,
        *,
        on_done: Callable[[OperationOutcome], None],
    ) -> bool: ...

    def begin_remove_secondary_ip_configurations(
        self, nic: str, names: Sequence[str], *, on_done: Callable[[OperationOutcome], None]
    ) -> bool: ...

    def get_subnet(self, subnet: str) -> SubnetInfo: ...


class NicLocator(Protocol):
    """The ARM ID of the NIC whose secondary IPs form a machine's pool."""

    def primary_network_interface(self, machine: MachineId) -> str: ...


class MachineNicLocator:
    """Finds a machine's primary NIC from its model (VM or uniform scale-set instance) and
    remembers it: a machine's NICs do not change over its life."""

    def __init__(self, cloud: Cloud) -> None:
        self._cloud = cloud
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def primary_network_interface(self, machine: MachineId) -> str:
        """Raises ``NotFoundError`` when the machine is gone or has no NIC."""
        with self._lock:
            known = self._known.get(machine.key)
        if known is not None:
            return known
        nic_id = self._cloud.compute.get_primary_network_interface(machine)
        with self._lock:
            self._known[machine.key] = nic_id
        return nic_id

    def forget(self, machine: MachineId) -> None:
        with self._lock:
            self._known.pop(machine.key, None)
