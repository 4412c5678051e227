"""Whether a heir's machine holds the identities its donor's pods use (pure), read from the
AzureAssignedIdentities the identity reconciler publishes (their ``status``), never from its code.

The donor's pods need the user-assigned identities (type 0) of the AzureAssignedIdentities
recorded on the donor (``spec.nodename``, not being deleted). The heir's machine holds an identity
when an AzureAssignedIdentity of it says ``Assigned`` with ``status.target`` naming the heir's
target: its scale set for a scale-set instance (the identity reconciler puts identities on the
scale set, so a heir in the donor's scale set holds them once they are Assigned there), its VM for
a standalone or flexible-orchestration VM. Until every identity is held, the donor is not
cordoned (a VM heir only for ``heirReadyTimeout`` after it registered: the identity reconciler puts
identities on a VM once a pod using them runs there, so waiting longer could wait forever; the
donor then goes on with a Warning Event). Identities are compared by resource ID,
case-insensitively. Neighbour: ``replacement``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["ASSIGNED", "heir_identities_missing"]

ASSIGNED = "Assigned"
"""The AzureAssignedIdentity state in which the identity is on the target."""


def _resource_id(assigned: Mapping[str, Any]) -> str | None:
    """The user-assigned identity's resource ID (lower case); ``None`` for service principals."""
    identity = (assigned.get("spec") or {}).get("azureIdentityRef") or {}
    spec = identity.get("spec") or {}
    if int(spec.get("type") or 0) != 0 or not spec.get("resourceID"):
        return None
    return str(spec["resourceID"]).lower()


def heir_identities_missing(
    assigned_identities: Iterable[Mapping[str, Any]], *, donor: str, heir_target: str
) -> list[str]:
    """The identities the donor's pods use that the heir's target does not hold yet, sorted."""
    needed: set[str] = set()
    held: set[str] = set()
    for assigned in assigned_identities:
        resource_id = _resource_id(assigned)
        if resource_id is None:
            continue
        if (assigned.get("metadata") or {}).get("deletionTimestamp"):
            continue
        if (assigned.get("spec") or {}).get("nodename") == donor:
            needed.add(resource_id)
        status = assigned.get("status") or {}
        if status.get("status") == ASSIGNED and str(status.get("target", "")).lower() == heir_target.lower():
            held.add(resource_id)
    return sorted(needed - held)
