"""The identity assignment controller's request keys (its declared key type, ``IdentityWork``):
a VM or scale set, by its lowercased ARM ID (``TargetKey``), or the one key for pods whose node is
missing or names no VM or scale set (``UNRESOLVED_PODS``). Pure values; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UNRESOLVED_PODS", "IdentityWork", "TargetKey", "UnresolvedPods", "target_key"]


class IdentityWork:
    """What one identity assignment pass works on."""

    __slots__ = ()

    def log_fields(self) -> dict[str, str]:
        raise NotImplementedError


@dataclass(frozen=True, order=True, slots=True)
class TargetKey(IdentityWork):
    """A VM or uniform scale set (its ARM ID, lowercased)."""

    arm_id: str

    def log_fields(self) -> dict[str, str]:
        return {"target": self.arm_id}

    def __str__(self) -> str:
        return self.arm_id


@dataclass(frozen=True, slots=True)
class UnresolvedPods(IdentityWork):
    """The pods whose node is missing or names no Azure VM or scale set."""

    def log_fields(self) -> dict[str, str]:
        return {"target": "unresolved"}

    def __str__(self) -> str:
        return "unresolved"


UNRESOLVED_PODS = UnresolvedPods()


def target_key(arm_id: str) -> IdentityWork:
    """The key for a target's lowercased ARM ID, or ``UNRESOLVED_PODS`` when there is none."""
    return TargetKey(arm_id) if arm_id else UNRESOLVED_PODS
