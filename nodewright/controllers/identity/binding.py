"""The AzureIdentityBinding reconciler: says on each binding whether the AzureIdentity it names
exists and is usable (condition IdentityFound) and whether its selector is a label value a pod can
carry (condition SelectorValid), with a Warning Event when one turns false, so a binding that can
never work is visible where users look instead of only in a log.

A pass reads the binding and the identities of its namespace from the cache, asks
``validation.validate`` (through the pure ``binding_conditions``) and writes the conditions when
they changed. Side effects: a status merge patch and Events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodewright.api.aadpodidentity.v1 import (
    CONDITION_IDENTITY_FOUND,
    CONDITION_SELECTOR_VALID,
    AzureIdentity,
    AzureIdentityBinding,
)
from nodewright.api.base import ValidationError
from nodewright.controllers.identity.conditions import ConditionStatus, with_condition
from nodewright.controllers.identity.options import AZURE_IDENTITY, AZURE_IDENTITY_BINDING
from nodewright.controllers.identity.validation import INVALID_SELECTOR, validate
from nodewright.runtime import Cache, Client, EventRecorder, Request, Result, TerminalError, errors

__all__ = ["AzureIdentityBindingReconciler", "BindingCondition", "binding_conditions", "bindings_naming"]


def _now() -> datetime:
    return datetime.now(UTC)


def bindings_naming(bindings: list[dict[str, Any]], identity: dict[str, Any]) -> list[Request]:
    """The bindings in an identity's namespace that name it (to re-check when it changes)."""
    metadata = identity.get("metadata") or {}
    return [
        Request(str(metadata.get("namespace") or ""), str(b["metadata"]["name"]))
        for b in bindings
        if (b.get("metadata") or {}).get("namespace") == metadata.get("namespace")
        and (b.get("spec") or {}).get("azureIdentity") == metadata.get("name")
    ]


@dataclass(frozen=True, slots=True)
class BindingCondition:
    """One condition a binding should carry."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


def binding_conditions(
    binding: AzureIdentityBinding, identities: Iterable[AzureIdentity]
) -> list[BindingCondition]:
    """The IdentityFound and SelectorValid conditions ``binding`` should carry, given the
    identities of its namespace. Pure."""
    problems = [p for p in validate(identities, [binding]) if p.kind == "AzureIdentityBinding"]
    identity = next((p for p in problems if p.reason != INVALID_SELECTOR), None)
    selector = next((p for p in problems if p.reason == INVALID_SELECTOR), None)
    return [
        BindingCondition(CONDITION_IDENTITY_FOUND, "False", identity.reason, identity.message)
        if identity is not None
        else BindingCondition(
            CONDITION_IDENTITY_FOUND,
            "True",
            "Found",
            f"AzureIdentity {binding.namespace}/{binding.spec.azure_identity} exists",
        ),
        BindingCondition(CONDITION_SELECTOR_VALID, "False", selector.reason, selector.message)
        if selector is not None
        else BindingCondition(
            CONDITION_SELECTOR_VALID, "True", "Valid", "spec.selector is a label value pods can carry"
        ),
    ]


class AzureIdentityBindingReconciler:
    """Keeps each binding's IdentityFound and SelectorValid conditions true to what exists."""

    def __init__(
        self, client: Client, cache: Cache, recorder: EventRecorder, *, clock: Callable[[], datetime] = _now
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.clock = clock
        self.bindings = cache.informer(AZURE_IDENTITY_BINDING)
        self.identities = cache.informer(AZURE_IDENTITY)

    def map_identity(self, identity: dict[str, Any]) -> list[Request]:
        return bindings_naming(self.bindings.store.list(), identity)

    def reconcile(self, request: Request) -> Result:
        obj = self.bindings.store.get(request.key)
        if obj is None:
            return Result()
        try:
            binding = AzureIdentityBinding.from_object(obj)
        except ValidationError as error:
            self.recorder.event(obj, "Warning", "InvalidSpec", str(error))
            raise TerminalError(f"AzureIdentityBinding {request.key} is invalid: {error}") from error
        identities: list[AzureIdentity] = []
        for candidate in self.identities.store.by_index("namespace", binding.namespace):
            try:
                identities.append(AzureIdentity.from_object(candidate))
            except ValidationError:
                continue
        current = {c.type: (c.status, c.reason, c.message) for c in binding.status.conditions}
        changed = [
            wanted
            for wanted in binding_conditions(binding, identities)
            if current.get(wanted.type) != (wanted.status, wanted.reason, wanted.message)
        ]
        if not changed:
            return Result()
        conditions = binding.status.conditions
        for wanted in changed:
            conditions = with_condition(
                conditions,
                wanted.type,
                status=wanted.status,
                reason=wanted.reason,
                message=wanted.message,
                now=self.clock(),
                observed_generation=int(binding.metadata.get("generation") or 0) or None,
            )
        try:
            self.client.patch(
                AZURE_IDENTITY_BINDING,
                binding.name,
                {"status": {"conditions": [c.to_dict() for c in conditions]}},
                binding.namespace,
                subresource="status",
            )
        except errors.NotFound:
            return Result()
        for wanted in changed:
            if wanted.status == "False":
                self.recorder.event(obj, "Warning", wanted.reason, wanted.message)
        return Result()
