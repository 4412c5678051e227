"""Where an AzureAssignedIdentity carries nodewright's ownership intent before its first status.

A pass records, before its PATCH, which target an assignment's identity goes to and whether
nodewright is the one adding it (``status.target``, ``status.addedByNodewright``), so a crash
after the PATCH cannot leave an identity nodewright added without a record that lets it remove it
later. A new object gets that record in the same request that creates it, as two annotations
(the status subresource ignores a status sent with a create): one write per new assignment
instead of two. Once anything has written the object's status, the status alone is the record
and the annotations are ignored.

Owns the annotation names, ``intent_annotations`` (what a create carries), ``recorded_target``
(status, else the intent of an object with no status yet) and ``with_recorded_intent`` (the
object as the passes read it). Pure; no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "INTENDED_TARGET_ANNOTATION",
    "INTENDS_TO_ADD_ANNOTATION",
    "intent_annotations",
    "recorded_target",
    "with_recorded_intent",
]

INTENDED_TARGET_ANNOTATION = "nodewright.io/intended-target"
"""The lowercased ARM ID of the VM or scale set the identity was to be put on at creation."""
INTENDS_TO_ADD_ANNOTATION = "nodewright.io/intends-to-add"
"""``"true"`` when nodewright was adding the identity to that target at creation."""


def intent_annotations(target: str, adding: bool) -> dict[str, str]:
    """The annotations a new object is created with."""
    return {INTENDED_TARGET_ANNOTATION: target, INTENDS_TO_ADD_ANNOTATION: "true" if adding else "false"}


def _intent(assigned: Mapping[str, Any]) -> tuple[str, bool] | None:
    """The creation-time intent of an object whose status was never written, else None."""
    if assigned.get("status"):
        return None
    annotations = (assigned.get("metadata") or {}).get("annotations") or {}
    target = str(annotations.get(INTENDED_TARGET_ANNOTATION) or "").lower()
    if not target:
        return None
    return target, annotations.get(INTENDS_TO_ADD_ANNOTATION) == "true"


def recorded_target(assigned: Mapping[str, Any]) -> str:
    """The target the object records (lowercased; "" when none, as MIC wrote them)."""
    intent = _intent(assigned)
    if intent is not None:
        return intent[0]
    return str((assigned.get("status") or {}).get("target") or "").lower()


def with_recorded_intent(assigned: dict[str, Any]) -> dict[str, Any]:
    """The object with a status-less object's intent in ``status`` (a copy; else unchanged)."""
    intent = _intent(assigned)
    if intent is None:
        return assigned
    filled = copy.copy(assigned)
    filled["status"] = {"target": intent[0], "addedByNodewright": intent[1]}
    return filled
