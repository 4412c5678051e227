"""The status half of a node_network_config reconcile: what a NodeNetworkConfig's status says, and
writing it.

Owns ``Outcome`` (what one pass found), ``build_container`` (pure: networkContainers[0] with a
stable id from the NIC's ARM ID, ipAssignments in NIC order, gateway and subnet facts, a version
bumped on every change) and ``StatusWriter``, which patches status only when it differs, reports
problems as status ``Error`` + a ``Ready`` condition + a Warning Event, reports a terminal ARM
answer to the NIC's write (``Outcome.refusal``) as a ``Ready`` condition naming ARM's code and
message with one Warning Event when it starts (not one per retry), and notices once when the
CRD (Azure CNS's own) prunes ``status.conditions``. Side effects: status patches, Events.
"""

from __future__ import annotations

import copy
import ipaddress
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from nodewright.api.acn.v1alpha import (
    ASSIGNMENT_MODE_DYNAMIC,
    ASSIGNMENT_MODE_STATIC,
    NETWORK_CONTAINER_STATUS_FAILED,
    NETWORK_CONTAINER_STATUS_SUBNET_FULL,
    NETWORK_CONTAINER_STATUS_SUCCESS,
    NETWORK_CONTAINER_TYPE_VNET,
    NETWORK_CONTAINER_TYPE_VNET_BLOCK,
    STATUS_ERROR,
    STATUS_UPDATED,
    STATUS_UPDATING,
    IPAssignment,
    NetworkContainer,
    NetworkContainerStatus,
    NodeNetworkConfig,
    ReconcileStatus,
    Scaler,
)
from nodewright.cloud.errors import LIMIT_CODES, SUBNET_FULL_CODES
from nodewright.cloud.models import NicInfo, SubnetInfo
from nodewright.cloud.resource_ids import parse_subnet_id
from nodewright.ipam import PoolScaler, address_count
from nodewright.runtime import get_logger, set_condition

__all__ = [
    "READY",
    "EventSink",
    "Outcome",
    "StatusWriter",
    "build_container",
    "container_id",
    "primary_subnet_id",
    "refused_container_status",
]

log = get_logger(__name__)

READY = "Ready"
Object = dict[str, Any]


class EventSink(Protocol):
    """Where Events go (``runtime.events.EventRecorder``)."""

    def event(self, obj: Object, type: Any, reason: str, message: str) -> None: ...


@dataclass
class Outcome:
    """What one allocation pass found, for the status and the requeue."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    container_status: NetworkContainerStatus = NETWORK_CONTAINER_STATUS_SUCCESS
    complete: bool = True
    retry_in: float | None = None
    refusal: tuple[str, str] | None = None
    """ARM's code and message when it refused the NIC's write with a terminal answer (a full
    subnet, a limit, an invalid request): the Ready condition names them while it lasts."""
    warnings: list[tuple[str, str]] = field(default_factory=list)
    """Warning Events (reason, message) to send, apart from the status."""


def refused_container_status(code: str | None) -> NetworkContainerStatus:
    """The network container status while ARM refuses the NIC's writes with ``code``: SubnetFull
    for a capacity answer (a full subnet, a NIC's limit), else Failed."""
    if (code or "").lower() in SUBNET_FULL_CODES | LIMIT_CODES:
        return NETWORK_CONTAINER_STATUS_SUBNET_FULL
    return NETWORK_CONTAINER_STATUS_FAILED


def container_id(nic_id: str) -> str:
    """A network container ID that stays the same for a NIC across restarts."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "nodewright:" + nic_id.lower()))


def default_gateway(cidr: str | None) -> str:
    """Azure's gateway of a subnet: its first host address."""
    if not cidr:
        return ""
    network = ipaddress.ip_network(cidr, strict=False)
    return str(network.network_address + 1) if network.num_addresses > 2 else ""


def primary_subnet_id(nic: NicInfo) -> str | None:
    """The subnet of the NIC's primary IP configuration (else of any that names one)."""
    for configuration in nic.ip_configurations:
        if configuration.primary and configuration.subnet_id:
            return configuration.subnet_id
    for configuration in nic.ip_configurations:
        if configuration.subnet_id:
            return configuration.subnet_id
    return None


def build_container(
    *,
    previous: NetworkContainer | None,
    nic_id: str,
    nic: NicInfo,
    subnet: SubnetInfo | None,
    assignments: list[tuple[str, str]],
    container_status: NetworkContainerStatus,
    blocks: bool = False,
) -> NetworkContainer:
    """networkContainers[0] for the NIC as it is now; the version moves only on a change. Pure.
    With ``blocks`` (experimental /28 prefix mode) it is a ``vnetblock`` container, each
    ipAssignment naming one IP configuration and its block (``"a.b.c.d/28"``)."""
    container = NetworkContainer(
        id=container_id(nic_id),
        assignment_mode=ASSIGNMENT_MODE_STATIC if blocks else ASSIGNMENT_MODE_DYNAMIC,
        type=NETWORK_CONTAINER_TYPE_VNET_BLOCK if blocks else NETWORK_CONTAINER_TYPE_VNET,
        primary_ip=nic.primary_ip or "",
        node_ip=nic.primary_ip or "",
        ip_assignments=[IPAssignment(name=n, ip=a) for n, a in assignments],
        default_gateway=default_gateway(subnet.cidr if subnet else None),
        subnet_address_space=(subnet.cidr or "") if subnet else "",
        status=container_status,
    )
    subnet_id = primary_subnet_id(nic)
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
        comparable.assignment_mode = comparable.assignment_mode or container.assignment_mode
        comparable.type = comparable.type or container.type
        if comparable.to_dict() != container.to_dict():
            container.version = previous.version + 1
    return container


def _summary(outcome: Outcome, count: int) -> tuple[ReconcileStatus, Literal["True", "False"], str, str]:
    if outcome.problems:
        message = "; ".join(text for _, text in outcome.problems)
        return STATUS_ERROR, "False", outcome.problems[0][0], message
    if outcome.refusal is not None:
        code, text = outcome.refusal
        message = f"{count} IPs on the NIC; ARM refused more: {code}: {text} (retried with backoff)"
        return STATUS_UPDATING, "False", code, message
    if not outcome.complete:
        return STATUS_UPDATING, "False", "Allocating", f"{count} IPs on the NIC; allocation in progress"
    return STATUS_UPDATED, "True", "Allocated", f"{count} IPs on the NIC"


def _ready_reason(config: NodeNetworkConfig) -> str:
    """The reason of the stored Ready condition ("" when none)."""
    return next((c.reason for c in config.status.conditions if c.type == READY), "")


class StatusWriter:
    """Writes NodeNetworkConfig status (see the module docstring)."""

    def __init__(
        self, *, patch: Callable[[str, Object, str | None], Object], events: EventSink, scaler: PoolScaler
    ) -> None:
        self._patch = patch
        self._events = events
        self._scaler = scaler
        self._conditions_supported = True

    def write(
        self, raw: Object, config: NodeNetworkConfig, container: NetworkContainer, outcome: Outcome
    ) -> None:
        """The full status after an allocation pass (side effects: a patch if changed, Events)."""
        count = address_count(a.ip for a in container.ip_assignments)
        state, ready, reason, message = _summary(outcome, count)
        for problem_reason, text in outcome.problems:
            self._events.event(raw, "Warning", problem_reason, text)
        if outcome.refusal is not None and not outcome.problems and _ready_reason(config) != reason:
            self._events.event(raw, "Warning", reason, message)  # once per change, not per retry
        status = copy.deepcopy(config.status)
        status.network_containers = [container]
        status.assigned_ip_count = count
        status.scaler = Scaler(
            batch_size=self._scaler.batch_size,
            release_threshold_percent=self._scaler.release_threshold_percent,
            request_threshold_percent=self._scaler.request_threshold_percent,
            max_ip_count=self._scaler.max_ip_count,
        )
        status.status = state
        conditions = [condition.to_dict() for condition in status.conditions]
        set_condition(conditions, READY, ready, reason, message)
        self.write_body(raw, {**status.to_dict(), "conditions": conditions})

    def report_problem(self, raw: Object, config: NodeNetworkConfig, reason: str, message: str) -> None:
        """Status Error with the condition and a Warning Event (never a crash loop). Only those two
        fields are patched: ``raw`` may be a cache that lags our last write, and writing its
        networkContainers back would hand Azure CNS addresses already released from the NIC."""
        self._events.event(raw, "Warning", reason, message)
        conditions = [condition.to_dict() for condition in config.status.conditions]
        set_condition(conditions, READY, "False", reason, message)
        self.write_fields(raw, {"status": STATUS_ERROR, "conditions": conditions})
        log.info("Reported a problem", node=raw["metadata"]["name"], reason=reason, detail=message)

    def write_fields(self, raw: Object, fields: Object) -> None:
        """Merge-patch these status fields, leaving the others as stored (side effect), if any
        differs from ``raw``."""
        if not self._conditions_supported:
            fields = {key: value for key, value in fields.items() if key != "conditions"}
        stored = raw.get("status") or {}
        if all(stored.get(key) == value for key, value in fields.items()):
            return
        self._patch_status(raw, fields)

    def write_body(self, raw: Object, status: Object) -> None:
        """Patch the status if it differs from the stored one (side effect). Against a CRD that
        does not know our ``conditions`` (Azure CNS's own), the server prunes them: that is
        noticed once and conditions are left out from then on, so the comparison settles instead
        of patching forever."""
        if not self._conditions_supported:
            status = {key: value for key, value in status.items() if key != "conditions"}
        if status == (raw.get("status") or {}):
            return
        self._patch_status(raw, status)

    def _patch_status(self, raw: Object, fields: Object) -> None:
        stored = self._patch(raw["metadata"]["name"], {"status": fields}, "status")
        if "conditions" in fields and "conditions" not in (stored.get("status") or {}):
            log.info("The NodeNetworkConfig CRD prunes status.conditions; leaving them out")
            self._conditions_supported = False
