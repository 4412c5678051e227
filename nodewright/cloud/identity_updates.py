"""Pure planning of user-assigned identity updates on a VM or scale set.

ARM takes a PATCH of only ``identity`` with a delta map: an identity to add maps to ``{}``, one to
remove maps to ``null``, at most 150 entries per request. The identity ``type`` must describe
what remains after the request: with user-assigned identities left, ``UserAssigned`` or
``SystemAssigned, UserAssigned``; with none left, ``SystemAssigned`` or ``None`` (and no map is
sent, since ARM rejects a user-assigned map on those types). A system-assigned identity is
always kept. ``compute`` performs the requests planned here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodewright.cloud.models import ResourceIdentities

MAX_IDENTITIES_PER_REQUEST = 150


@dataclass(frozen=True)
class IdentityPatch:
    """One PATCH request: the identity type after it, and the delta (ID -> add True / remove False)."""

    type: str
    changes: tuple[tuple[str, bool], ...]

    def body(self) -> dict[str, Any]:
        """The JSON ``identity`` object of the request."""
        identity: dict[str, Any] = {"type": self.type}
        if "UserAssigned" in self.type:
            identity["userAssignedIdentities"] = {
                identity_id: ({} if add else None) for identity_id, add in self.changes
            }
        return identity

    @property
    def added(self) -> frozenset[str]:
        return frozenset(identity_id for identity_id, add in self.changes if add)

    @property
    def removed(self) -> frozenset[str]:
        return frozenset(identity_id for identity_id, add in self.changes if not add)


def identity_type(system_assigned: bool, has_user_assigned: bool) -> str:
    """The ARM identity type for a combination of system- and user-assigned identities."""
    if has_user_assigned:
        return "SystemAssigned, UserAssigned" if system_assigned else "UserAssigned"
    return "SystemAssigned" if system_assigned else "None"


def identity_delta(
    current: Iterable[str], add: Iterable[str], remove: Iterable[str]
) -> tuple[tuple[str, bool], ...]:
    """The changes needed (lowercased IDs, removals first, each list sorted): add what is missing,
    remove what is present. An ID both added and removed is added."""
    present = {identity_id.lower() for identity_id in current}
    wanted = {identity_id.lower() for identity_id in add}
    unwanted = {identity_id.lower() for identity_id in remove} - wanted
    removals = sorted(unwanted & present)
    additions = sorted(wanted - present)
    return tuple((identity_id, False) for identity_id in removals) + tuple(
        (identity_id, True) for identity_id in additions
    )


def plan_identity_patches(
    current: ResourceIdentities,
    add: Iterable[str],
    remove: Iterable[str],
    max_per_request: int = MAX_IDENTITIES_PER_REQUEST,
) -> list[IdentityPatch]:
    """Split the delta into requests of at most ``max_per_request`` entries, each with the type
    that describes the state after it. Empty when nothing changes."""
    changes = identity_delta(current.user_assigned, add, remove)
    remaining = set(current.user_assigned)
    patches: list[IdentityPatch] = []
    for start in range(0, len(changes), max_per_request):
        chunk = changes[start : start + max_per_request]
        for identity_id, is_addition in chunk:
            if is_addition:
                remaining.add(identity_id)
            else:
                remaining.discard(identity_id)
        patches.append(
            IdentityPatch(type=identity_type(current.system_assigned, bool(remaining)), changes=chunk)
        )
    return patches


def apply_patch(current: ResourceIdentities, patch: IdentityPatch) -> ResourceIdentities:
    """The identities expected after a successful patch (pure; used to carry state between chunks)."""
    remaining = (set(current.user_assigned) - patch.removed) | patch.added
    return ResourceIdentities(
        type=patch.type, system_assigned=current.system_assigned, user_assigned=frozenset(remaining)
    )
