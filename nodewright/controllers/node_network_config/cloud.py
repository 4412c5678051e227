"""The cloud operations the node_network_config reconciler needs, as narrow protocols.

Owns ``NetworkOperations`` (``NetworkService`` satisfies it: read a NIC, add and remove its
secondary IP configurations, waiting for the write or, ``begin_``, leaving its operation to the
cloud layer's tracker, read a subnet's usage), ``ComputeOperations`` (``ComputeService``
satisfies it: a machine's primary NIC, read from its model) and ``NicLocator`` (which NIC of a
machine carries the node's pool: its primary one). The one ``NicLocator`` the reconciler uses,
``scope_listings.MachineNicLocator``, asks its scale set's listing first and ``ComputeOperations``
after. ``WriteBudget`` (``NetworkService`` satisfies it too; a network without it is never asked)
takes a NIC write's share of ARM's budget before the pass reads what only that write needs. No
side effects here: protocols only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from nodewright.cloud.models import NicInfo, SubnetInfo
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import MachineId

__all__ = ["ComputeOperations", "NetworkOperations", "NicLocator", "WriteBudget"]


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


class ComputeOperations(Protocol):
    """The machine read the locator falls back to (``nodewright.cloud.compute.ComputeService``)."""

    def get_primary_network_interface(self, machine: MachineId) -> str: ...


class NicLocator(Protocol):
    """The ARM ID of the NIC whose secondary IPs form a machine's pool."""

    def primary_network_interface(self, machine: MachineId) -> str: ...


@runtime_checkable
class WriteBudget(Protocol):
    """The ARM budget of a write of the NIC's IP configurations, taken for a block of the calling
    thread: yields 0.0 when taken, else the seconds until it could be (nothing taken)."""

    def reserved_write(self, nic: str) -> AbstractContextManager[float]: ...
