"""Helpers for the parts of an object every controller touches: owner references,
finalizers and status conditions (metav1.Condition shape).

The pure helpers change the dictionary they are given and say whether anything changed; the
client-backed ``ensure_finalizer`` and ``drop_finalizer`` patch the API server with
``retry_on_conflict``. Used by reconcilers and by the owner-reference event handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.kube.retry import retry_on_conflict
from nodewright.runtime.kube.times import now_text

__all__ = [
    "add_finalizer",
    "condition_is_true",
    "controller_of",
    "drop_finalizer",
    "ensure_finalizer",
    "get_condition",
    "has_finalizer",
    "owner_key",
    "remove_finalizer",
    "replace_status",
    "set_condition",
    "set_controller_reference",
]

ConditionStatus = Literal["True", "False", "Unknown"]


# ---- owner references ---------------------------------------------------------------------
def set_controller_reference(
    owner: dict[str, Any], obj: dict[str, Any], *, block_owner_deletion: bool = True
) -> bool:
    """Make ``owner`` the controller of ``obj`` (in place); returns whether ``obj`` changed.

    Raises ValueError if another object already controls ``obj`` or if a namespaced owner
    would own an object in another namespace (the garbage collector would delete it).
    """
    owner_meta, meta = owner["metadata"], obj.setdefault("metadata", {})
    owner_namespace = owner_meta.get("namespace")
    if owner_namespace and meta.get("namespace") not in (None, owner_namespace):
        raise ValueError("a namespaced owner cannot own an object in another namespace")
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner_meta["name"],
        "uid": owner_meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }
    references: list[dict[str, Any]] = meta.setdefault("ownerReferences", [])
    current = controller_of(obj)
    if current is not None and current.get("uid") != reference["uid"]:
        raise ValueError(f"{meta.get('name')} is already controlled by {current['kind']} {current['name']}")
    for index, existing in enumerate(references):
        if existing.get("uid") == reference["uid"]:
            if existing == reference:
                return False
            references[index] = reference
            return True
    references.append(reference)
    return True


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The owner reference with ``controller: true``, or None."""
    for reference in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if reference.get("controller"):
            return dict(reference)
    return None


def owner_key(obj: dict[str, Any], owner_kind: str | None = None) -> str | None:
    """The work-queue key (``namespace/name``) of ``obj``'s controller, or None.

    Owners of namespaced objects share their namespace; a cluster-scoped owner is named
    alone when ``obj`` has no namespace. With ``owner_kind`` only that kind counts.
    """
    reference = controller_of(obj)
    if reference is None or (owner_kind and reference.get("kind") != owner_kind):
        return None
    namespace = (obj.get("metadata") or {}).get("namespace")
    return f"{namespace}/{reference['name']}" if namespace else str(reference["name"])


# ---- finalizers ---------------------------------------------------------------------------
def has_finalizer(obj: dict[str, Any], finalizer: str) -> bool:
    return finalizer in ((obj.get("metadata") or {}).get("finalizers") or [])


def add_finalizer(obj: dict[str, Any], finalizer: str) -> bool:
    """Add ``finalizer`` to ``obj`` in place; returns whether it was missing."""
    finalizers = obj.setdefault("metadata", {}).setdefault("finalizers", [])
    if finalizer in finalizers:
        return False
    finalizers.append(finalizer)
    return True


def remove_finalizer(obj: dict[str, Any], finalizer: str) -> bool:
    """Remove ``finalizer`` from ``obj`` in place; returns whether it was there."""
    finalizers = (obj.get("metadata") or {}).get("finalizers") or []
    if finalizer not in finalizers:
        return False
    obj["metadata"]["finalizers"] = [item for item in finalizers if item != finalizer]
    return True


def _patch_finalizers(
    client: Client, kind: Kind, name: str, namespace: str | None, finalizer: str, *, add: bool
) -> dict[str, Any] | None:
    def attempt() -> dict[str, Any] | None:
        current = client.get(kind, name, namespace)
        before = list(current["metadata"].get("finalizers") or []) or None
        changed = add_finalizer(current, finalizer) if add else remove_finalizer(current, finalizer)
        if not changed:
            return current
        # A JSON patch whose first op tests the finalizer list as read: only a concurrent change
        # of the finalizers themselves makes it fail, not unrelated writes to the object (a
        # resourceVersion precondition would conflict with every status or data update). A
        # missing list tests equal to null.
        operations = [
            {"op": "test", "path": "/metadata/finalizers", "value": before},
            {"op": "add", "path": "/metadata/finalizers", "value": current["metadata"]["finalizers"]},
        ]
        try:
            return client.patch(kind, name, operations, namespace, patch_type="json")
        except errors.Invalid as error:
            # A failed test op answers 422 like a validation error: tell them apart by re-reading.
            latest = client.get(kind, name, namespace)
            if (list(latest["metadata"].get("finalizers") or []) or None) != before:
                raise errors.Conflict(
                    f"finalizers of {kind.kind} {name} changed concurrently", code=409, reason="Conflict"
                ) from error
            raise

    try:
        return retry_on_conflict(attempt)
    except errors.NotFound:
        if add:
            raise
        return None


def ensure_finalizer(
    client: Client, kind: Kind, name: str, finalizer: str, namespace: str | None = None
) -> dict[str, Any]:
    """Make sure the stored object carries ``finalizer``; returns the object as stored.

    Side effect: patches the API server (retrying conflicts). Raises ``errors.NotFound``.
    """
    result = _patch_finalizers(client, kind, name, namespace, finalizer, add=True)
    assert result is not None
    return result


def drop_finalizer(
    client: Client, kind: Kind, name: str, finalizer: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """Remove ``finalizer`` from the stored object; returns it, or None if it is gone (the
    removal may have let the deletion finish). Side effect: patches the API server."""
    return _patch_finalizers(client, kind, name, namespace, finalizer, add=False)


def replace_status(client: Client, kind: Kind, obj: dict[str, Any], status: dict[str, Any]) -> bool:
    """Write ``status`` as the whole status of the object ``obj`` was read from, through the
    status subresource: re-read it, give up if it is gone or was replaced by another object of
    the same name (another uid), retry conflicts. Returns whether it wrote. Side effect: API
    writes."""
    metadata = obj["metadata"]
    name, namespace, uid = metadata["name"], metadata.get("namespace"), metadata.get("uid")

    def attempt() -> bool:
        fresh = client.get(kind, name, namespace)
        if fresh["metadata"].get("uid") != uid:
            return False
        fresh["status"] = status
        client.update_status(kind, fresh)
        return True

    try:
        return retry_on_conflict(attempt)
    except errors.NotFound:
        return False


# ---- conditions ---------------------------------------------------------------------------
def get_condition(conditions: list[dict[str, Any]] | None, type: str) -> dict[str, Any] | None:
    """The condition of ``type``, or None."""
    for condition in conditions or []:
        if condition.get("type") == type:
            return condition
    return None


def condition_is_true(obj: Mapping[str, Any] | None, type: str = "Ready") -> bool:
    """Whether ``obj``'s ``status.conditions`` has ``type`` with status "True" (None: False)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == type and c.get("status") == "True" for c in conditions)


def set_condition(  # noqa: PLR0917 - positional like apimachinery's SetStatusCondition fields
    conditions: list[dict[str, Any]],
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
) -> bool:
    """Set a metav1.Condition in ``conditions`` (in place); returns whether anything changed.

    ``lastTransitionTime`` moves only when the status changes, as in apimachinery's
    ``meta.SetStatusCondition``; reason, message and observedGeneration are updated in place.
    """
    existing = get_condition(conditions, type)
    if existing is None:
        condition: dict[str, Any] = {
            "type": type,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_text(),
        }
        if observed_generation is not None:
            condition["observedGeneration"] = observed_generation
        conditions.append(condition)
        return True
    changed = False
    if existing.get("status") != status:
        existing["status"] = status
        existing["lastTransitionTime"] = now_text()
        changed = True
    for field, value in (("reason", reason), ("message", message)):
        if existing.get(field) != value:
            existing[field] = value
            changed = True
    if observed_generation is not None and existing.get("observedGeneration") != observed_generation:
        existing["observedGeneration"] = observed_generation
        changed = True
    return changed
