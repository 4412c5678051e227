"""The values one identity pass hands from step to step: ``TargetView`` (what the read step found
and decided for a VM or scale set) and ``CloudOutcome`` (what the cloud step did). Pure data, no
side effects; the reconciler is ``assignment``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nodewright.api.aadpodidentity.v1 import IdentityType
from nodewright.controllers.identity.decisions import AssignmentChanges, DesiredAssignment, IdentityTarget
from nodewright.controllers.identity.targets import AssignmentRecord, IdentityNeed, Rejection

__all__ = ["CloudOutcome", "TargetView"]


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
