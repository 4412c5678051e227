"""The AzureIdentityBinding reconciler: says on each binding whether the AzureIdentity it names
exists and is usable (condition IdentityFound, a Warning Event when not), so a binding to a
missing or invalid identity is visible where users look instead of only in a log.

A pass reads the binding and the identities of its namespace from the cache, asks
``decisions.validate`` and writes the condition when it changed. Side effects: a status merge
patch and Events.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nodewright.api.aadpodidentity.v1 import CONDITION_IDENTITY_FOUND, AzureIdentity, AzureIdentityBinding
from nodewright.api.base import ValidationError
from nodewright.controllers.identity.conditions import (
    with_condition,
)
from nodewright.controllers.identity.options import AZURE_IDENTITY, AZURE_IDENTITY_BINDING
from nodewright.controllers.identity.validation import (
    validate,
)
from nodewright.runtime import errors
from nodewright.runtime.cache import Cache
from nodewright.runtime.client import Client
from nodewright.runtime.events import EventRecorder
from nodewright.runtime.reconcile import Request, Result, TerminalError

__all__ = ["AzureIdentityBindingReconciler", "bindings_naming"]


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


class AzureIdentityBindingReconciler:
    """Keeps each binding's IdentityFound condition true to what exists."""

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
        problems = [p for p in validate(identities, [binding]) if p.kind == "AzureIdentityBinding"]
        if problems:
            status, reason, message = "False", problems[0].reason, problems[0].message
        else:
            status, reason, message = (
                "True",
                "Found",
                f"AzureIdentity {binding.namespace}/{binding.spec.azure_identity} exists",
            )
        previous = next((c for c in binding.status.conditions if c.type == CONDITION_IDENTITY_FOUND), None)
        if previous is not None and (previous.status, previous.reason, previous.message) == (
            status,
            reason,
            message,
        ):
            return Result()
        conditions = with_condition(
            binding.status.conditions,
            CONDITION_IDENTITY_FOUND,
            status="True" if status == "True" else "False",
            reason=reason,
            message=message,
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
        if status == "False":
            self.recorder.event(obj, "Warning", reason, message)
        return Result()
