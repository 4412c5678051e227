"""The values one identity pass hands from step to step: ``TargetView`` (what the read step found
and decided for a VM or scale set), ``CloudPlan`` (what the plan step decided to send),
``CloudOutcome`` (what the apply step did) and ``RecordPlan`` (the status writes and deletes the
record step carries out). Pure data, no side effects; the steps are ``reading`` (read),
``pass_plan`` (plan), ``cloud_update`` (apply) and ``assigned_writes`` (record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nodewright.api.aadpodidentity.v1 import AzureAssignedIdentity, IdentityType
from nodewright.cloud.models import ResourceIdentities
from nodewright.controllers.identity.decisions import AssignmentChanges, DesiredAssignment, IdentityTarget
from nodewright.controllers.identity.targets import (
    AssignmentOutcome,
    AssignmentRecord,
    IdentityNeed,
    Rejection,
)

__all__ = ["CloudOutcome", "CloudPlan", "OutcomeWrite", "RecordPlan", "ReleaseWrite", "TargetView"]


@dataclass(frozen=True)
class TargetView:
    """What one pass over a target read and decided (the read step's result)."""

    key: str
    target: IdentityTarget
    has_nodes: bool
    desired: list[DesiredAssignment]
    changes: AssignmentChanges
    records_here: list[AssignmentRecord]
    released: dict[tuple[str, str], AssignmentRecord | None]

    @property
    def needs(self) -> list[IdentityNeed]:
        return [
            IdentityNeed(wanted.resource_key, wanted.client_id, wanted.key)
            for wanted in self.desired
            if wanted.identity_type is IdentityType.USER_ASSIGNED_MSI
        ]

    @property
    def touches_cloud(self) -> bool:
        return bool(self.needs) or any(
            record is not None and record.identity_type is IdentityType.USER_ASSIGNED_MSI
            for record in self.released.values()
        )


@dataclass(frozen=True)
class CloudOutcome:
    """What the cloud step did: identities on the target after it (None: unknown), what it tried
    to add, what it held back, ARM's refusals on this target, released identities kept (and why),
    whether the target is gone, and the failure to raise once statuses are written."""

    landed: frozenset[str] | None = frozenset()
    attempt: frozenset[str] = frozenset()
    held: frozenset[str] = frozenset()
    rejections: Mapping[str, Rejection] = field(default_factory=dict)
    retained: Mapping[str, str] = field(default_factory=dict)
    target_gone: bool = False
    failure: Exception | None = None
    untouched: frozenset[str] | None = None
    """After a failure that left ``landed`` unknown: the identities the pass read on the target
    and neither added nor removed (still there as far as anyone knows)."""

    @property
    def seen(self) -> frozenset[str] | None:
        """What an assignment's outcome may count as on the target."""
        return self.landed if self.landed is not None else self.untouched


@dataclass(frozen=True)
class CloudPlan:
    """What a pass sends to a target, planned from ``current`` (what the target holds as last
    read): identities to add (``add``; ARM's recent refusals are ``held`` back), to remove, the
    released ones kept (and why), the additions that repair drift, and whether the target is gone."""

    current: ResourceIdentities
    add: frozenset[str]
    remove: frozenset[str]
    held: frozenset[str]
    rejections: Mapping[str, Rejection]
    retained: Mapping[str, str]
    repairs: frozenset[str]
    target_gone: bool = False

    @property
    def sends(self) -> bool:
        """Whether the plan needs a PATCH."""
        return bool(self.add or self.remove)

    def outcome(self) -> CloudOutcome:
        """The outcome when nothing is sent (or before the PATCH answers)."""
        return CloudOutcome(
            landed=self.current.user_assigned,
            attempt=self.add,
            held=self.held,
            rejections=self.rejections,
            retained=self.retained,
            target_gone=self.target_gone,
        )


@dataclass(frozen=True)
class OutcomeWrite:
    """An assignment's outcome to write into its object's status (``None``: the object is new)."""

    wanted: DesiredAssignment
    assigned_object: AzureAssignedIdentity | None
    outcome: AssignmentOutcome


@dataclass(frozen=True)
class ReleaseWrite:
    """A released object, to delete once its identity is off the target (``record``: what it
    recorded there; ``None`` when it recorded nothing)."""

    assigned_object: AzureAssignedIdentity
    record: AssignmentRecord | None


@dataclass(frozen=True)
class RecordPlan:
    """The record step of a pass: outcomes to write and releases to finish (independent objects,
    written together), the assignments a failed update left waiting (announced once per binding
    with ``failure``), and what the cloud step left on the target, which decides each release."""

    target: str
    outcomes: list[OutcomeWrite] = field(default_factory=list)
    releases: list[ReleaseWrite] = field(default_factory=list)
    waiting: list[DesiredAssignment] = field(default_factory=list)
    failure: str = ""
    landed: frozenset[str] | None = None
    retained: Mapping[str, str] = field(default_factory=dict)
    target_gone: bool = False
