"""What NMAgent tells Azure CNS NodeSubnet about a node's interfaces, as the stand-in's CNS sees it.

Owns the answer's shape (``Interfaces`` of ``Interface`` of ``InterfaceSubnet`` of ``NodeAddress``,
after azure-container-networking's ``nmagent`` package, v1.6.48), its comparison (dataclass
equality: every interface in order, its MAC, its primary flag, every subnet's prefix and every
address with its primary flag in order, as ``nmagent`` ``Interfaces.Equal``), the secondary
addresses CNS takes from it (``secondary_addresses``: the non-primary addresses of the primary
interfaces, as ``cns/nodesubnet`` ``flattenIPListFromResponse``), the answers read from the
in-process ARM emulator's state for every node at once (``answers_in_emulator``; a read of the
emulator's memory, not an ARM call), and NMAgent's lag behind ARM (``LaggedNMAgent``).

Reads of the emulator's state only; no writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodewright.cloud.emulator import EmulatorState
from nodewright.cloud.emulator.network import instance_network_interfaces
from nodewright.ipam import addresses_of

__all__ = [
    "DEFAULT_NMAGENT_LAG_SECONDS",
    "EMPTY_ANSWER",
    "Interface",
    "InterfaceSubnet",
    "Interfaces",
    "LaggedNMAgent",
    "NMAgentUnavailableError",
    "NodeAddress",
    "answers_in_emulator",
    "secondary_addresses",
]

DEFAULT_NMAGENT_LAG_SECONDS = 5.0
"""How long after an ARM write NMAgent reports it. Neither CNS's source nor Azure's documentation
publishes a figure: the change travels from the network resource provider to the host's agent
before NMAgent serves it. 5 s stands for "a few seconds"; it only delays discovery further
(the pessimistic side), and every user of the stand-in can set it."""


class NMAgentUnavailableError(Exception):
    """A fetch from NMAgent failed (the stand-in's tests inject it)."""


@dataclass(frozen=True)
class NodeAddress:
    address: str
    is_primary: bool = False


@dataclass(frozen=True)
class InterfaceSubnet:
    prefix: str
    addresses: tuple[NodeAddress, ...]


@dataclass(frozen=True)
class Interface:
    mac_address: str
    is_primary: bool
    subnets: tuple[InterfaceSubnet, ...]


@dataclass(frozen=True)
class Interfaces:
    """One answer of NMAgent's interface-information call; ``==`` compares it as CNS does."""

    entries: tuple[Interface, ...] = ()


EMPTY_ANSWER = Interfaces()

AnswerSource = Callable[[], dict[str, Interfaces]]
"""Node name -> what NMAgent on that node would answer now (nodes without a machine: absent)."""


def secondary_addresses(answer: Interfaces) -> list[str]:
    """The addresses CNS NodeSubnet takes from an answer, in order: every non-primary address of
    every subnet of every primary interface. Pure."""
    return [
        node_address.address
        for interface in answer.entries
        if interface.is_primary
        for subnet in interface.subnets
        for node_address in subnet.addresses
        if not node_address.is_primary
    ]


def answers_in_emulator(state: EmulatorState) -> AnswerSource:
    """What NMAgent would answer on every node of the in-process emulator (scale-set instances
    and standalone VMs, keyed by computer name), read in one pass under the state's lock."""

    def answers() -> dict[str, Interfaces]:
        found: dict[str, Interfaces] = {}
        with state.locked():
            prefixes: dict[str, str] = {}
            for scale_set in state.scale_sets.values():
                for instance in scale_set.instances.values():
                    nics = instance_network_interfaces(state, scale_set, instance)
                    found[_computer_name(instance.document)] = _answer(state, nics, prefixes)
            for machine in state.virtual_machines.values():
                references = (machine.properties.get("networkProfile") or {}).get("networkInterfaces") or []
                nics = [state.render(str(r.get("id", ""))) or {} for r in references]
                found[_computer_name(machine.document)] = _answer(state, nics, prefixes)
        return found

    return answers


def _computer_name(document: dict[str, Any]) -> str:
    properties = document.get("properties") or {}
    return str((properties.get("osProfile") or {}).get("computerName") or document.get("name", "")).lower()


def _answer(state: EmulatorState, nics: list[dict[str, Any]], prefixes: dict[str, str]) -> Interfaces:
    """NICs in the VM's order; within each, one subnet entry per subnet in the order its first IP
    configuration names it; a /28 block configuration counts as its 16 addresses (an assumption:
    how NMAgent reports a block is not known here)."""
    interfaces = []
    for index, nic in enumerate(nics):
        properties = nic.get("properties") or {}
        by_subnet: dict[str, list[NodeAddress]] = {}
        for configuration in properties.get("ipConfigurations") or []:
            configuration_properties = configuration.get("properties") or {}
            address = configuration_properties.get("privateIPAddress")
            if not address:
                continue
            subnet_id = str((configuration_properties.get("subnet") or {}).get("id", ""))
            primary = bool(configuration_properties.get("primary"))
            by_subnet.setdefault(subnet_id, []).extend(
                NodeAddress(a, primary) for a in addresses_of(str(address))
            )
        subnets = tuple(
            InterfaceSubnet(_prefix(state, subnet_id, prefixes), tuple(found))
            for subnet_id, found in by_subnet.items()
        )
        is_primary = bool(properties.get("primary", index == 0))
        interfaces.append(Interface(str(properties.get("macAddress", "")), is_primary, subnets))
    return Interfaces(tuple(interfaces))


def _prefix(state: EmulatorState, subnet_id: str, prefixes: dict[str, str]) -> str:
    if subnet_id not in prefixes:
        document = state.render(subnet_id) if subnet_id else None
        prefixes[subnet_id] = str(((document or {}).get("properties") or {}).get("addressPrefix", ""))
    return prefixes[subnet_id]


class LaggedNMAgent:
    """NMAgent behind ARM by ``lag`` seconds: ``sample(now)`` records what ARM holds (every node,
    at most every ``sample_seconds``), ``answer(node, now)`` serves the newest state recorded at
    least ``lag`` ago (the first state recorded for a node counts as known since always: a
    machine's NIC exists before its node joins). ``current(node)`` is ARM as last sampled."""

    def __init__(
        self, source: AnswerSource, *, lag: float = DEFAULT_NMAGENT_LAG_SECONDS, sample_seconds: float = 0.2
    ) -> None:
        self._source = source
        self.lag = lag
        self._sample_seconds = sample_seconds
        self._sampled_at = -math.inf
        self._history: dict[str, list[tuple[float, Interfaces]]] = {}

    def sample(self, now: float, *, force: bool = False) -> None:
        """Record ARM's state if the last sample is older than ``sample_seconds`` (or ``force``)."""
        if not force and now - self._sampled_at < self._sample_seconds:
            return
        self._sampled_at = now
        for node, answer in self._source().items():
            history = self._history.setdefault(node, [(-math.inf, answer)])
            if history[-1][1] != answer:
                history.append((now, answer))
            while len(history) > 1 and history[1][0] <= now - self.lag:
                history.pop(0)

    def answer(self, node: str, now: float) -> Interfaces | None:
        """What NMAgent answers on ``node`` at ``now`` (None: no machine known for that node)."""
        history = self._history.get(node)
        if not history:
            return None
        served = history[0][1]
        for recorded_at, answer in history:
            if recorded_at <= now - self.lag:
                served = answer
        return served

    def current(self, node: str) -> set[str]:
        """The secondary addresses ARM holds for ``node`` at the last sample."""
        history = self._history.get(node)
        return set(secondary_addresses(history[-1][1])) if history else set()
