"""PendingNode: a machine on its way into the cluster (goal Join) or out of it (goal Leave),
followed at the cloud until it gets there or its deadline passes.

Constellation's PendingNode in our group ``nodewright.io``. The NodeImage reconciler creates
them (a Join for every machine it scales out, a Leave for every machine it removes) and owns
them; the PendingNode reconciler records the machine's cloud state, deletes a machine whose join
timed out (turning the record into a Leave), and deletes the record once a Leave is done.
Cluster-scoped.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Self

from nodewright.api.base import Model, PrinterColumn, Resource, field
from nodewright.api.nodewright.v1alpha1._validation import child_path, parse_date_time

__all__ = ["CloudNodeState", "PendingNode", "PendingNodeGoal", "PendingNodeSpec", "PendingNodeStatus"]


class PendingNodeGoal(enum.Enum):
    """Where the machine is going."""

    JOIN = "Join"
    LEAVE = "Leave"


class CloudNodeState(enum.Enum):
    """The machine's state as the cloud reports it (``status.cspState`` on the wire)."""

    UNKNOWN = "Unknown"
    CREATING = "Creating"
    READY = "Ready"
    STOPPED = "Stopped"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"
    FAILED = "Failed"


@dataclass(kw_only=True)
class PendingNodeSpec(Model):
    """Which machine, in which scale set, under which node name, going where, by when."""

    provider_id: str = field(
        json="providerID",
        description="The node's providerID (azure:///subscriptions/...).",
        schema={"minLength": 1},
    )
    group_id: str = field(
        json="groupID",
        description=(
            "The ScalingGroup's groupID: the scale set's ARM resource ID, or a standalone group's "
            "resource group ID."
        ),
    )
    node_name: str = field(description="The name the machine's Node has (or will have).")
    goal: PendingNodeGoal = field(description="Join: become a Ready node. Leave: be terminated.")
    deadline: str | None = field(
        default=None,
        description=(
            "When the goal must be reached. A join that misses it is deleted and becomes a leave; a "
            "leave that misses it has its deletion requested again."
        ),
        schema={"format": "date-time"},
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "") -> Self:
        spec = super().from_dict(data, path=path)
        if spec.deadline is not None:
            parse_date_time(child_path(path, "deadline"), spec.deadline)
        return spec

    @property
    def deadline_time(self) -> datetime | None:
        """``deadline`` as a timezone-aware datetime (``None`` when unset)."""
        return None if self.deadline is None else parse_date_time("deadline", self.deadline)


@dataclass(kw_only=True)
class PendingNodeStatus(Model):
    """The machine's cloud state and whether the goal is reached."""

    cloud_state: CloudNodeState = field(
        json="cspState", default=CloudNodeState.UNKNOWN, description="The machine's state at the cloud."
    )
    reached_goal: bool = field(default=False, description="Whether the goal is reached.")


@dataclass(kw_only=True)
class PendingNode(Resource):
    """A machine joining or leaving the cluster, with a deadline."""

    API_VERSION: ClassVar[str] = "nodewright.io/v1alpha1"
    KIND: ClassVar[str] = "PendingNode"
    PLURAL: ClassVar[str] = "pendingnodes"
    NAMESPACED: ClassVar[bool] = False
    CATEGORIES: ClassVar[tuple[str, ...]] = ("nodewright",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Node", ".spec.nodeName"),
        PrinterColumn("Goal", ".spec.goal"),
        PrinterColumn("Cloud-State", ".status.cspState", description="The machine's state at the cloud"),
        PrinterColumn("Reached-Goal", ".status.reachedGoal", type="boolean"),
        PrinterColumn("Deadline", ".spec.deadline", type="date"),
        PrinterColumn("Group-ID", ".spec.groupID", priority=1),
        PrinterColumn("Provider-ID", ".spec.providerID", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: PendingNodeSpec
    status: PendingNodeStatus = field(default_factory=PendingNodeStatus)
