"""The AzureIdentity reconciler: resolves each user-assigned identity's clientId and principalId
from Azure and keeps them fresh (ARO-HCP's pattern), and flags a spec.clientID that is not the
identity's real one (aad-pod-identity #521: an identity deleted and recreated under the same
name gets a new clientId, and token requests for the old one fail with "Identity not found").

A pass reads the AzureIdentity from the cache; when ``decisions.identity_info_due`` says so it
GETs the identity (one ARM read), and writes ``identity_info_status`` to the status subresource
when anything changed. Warning Events: IdentityNotFound, InvalidResourceID, ClientIDMismatch.
Not-found is not an error (the identity may be created later); other lookup failures are
recorded, then raised so the controller retries with backoff. The pass comes back at the next
recheck time (12 h x (1 + 0.5 x jitter)).

Side effects: a status merge patch, Events, ARM reads through ``IdentityLookupService``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from nodewright.api.aadpodidentity.v1 import CONDITION_CLIENT_ID_CURRENT, AzureIdentity, IdentityType
from nodewright.api.base import ValidationError
from nodewright.cloud.errors import CloudError, NotFoundError
from nodewright.cloud.models import IdentityInfo
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_user_assigned_identity_id
from nodewright.controllers.identity.identity_info_rules import (
    IdentityLookup,
    identity_info_due,
    identity_info_status,
)
from nodewright.controllers.identity.options import AZURE_IDENTITY
from nodewright.runtime import (
    Cache,
    Client,
    EventRecorder,
    Request,
    Result,
    TerminalError,
    errors,
    get_logger,
    parse_time,
)

__all__ = ["AzureIdentityReconciler", "IdentityLookupService"]

log = get_logger(__name__)


class IdentityLookupService(Protocol):
    """The cloud read this reconciler needs (``IdentityService`` provides it)."""

    def get_identity(self, identity: str) -> IdentityInfo: ...


def _now() -> datetime:
    return datetime.now(UTC)


class AzureIdentityReconciler:
    """Keeps ``status.clientID``, ``principalID``, ``retrievalError``, ``nextRecheckTime`` and the
    Resolved / ClientIDCurrent conditions of every type-0 AzureIdentity up to date."""

    def __init__(
        self,
        client: Client,
        cache: Cache,
        identities: IdentityLookupService,
        recorder: EventRecorder,
        *,
        clock: Callable[[], datetime] = _now,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.lookups = identities
        self.recorder = recorder
        self.clock = clock
        self.jitter = jitter
        self.informer = cache.informer(AZURE_IDENTITY)

    def reconcile(self, request: Request) -> Result:
        obj = self.informer.store.get(request.key)
        if obj is None:
            return Result()
        try:
            identity = AzureIdentity.from_object(obj)
        except ValidationError as error:
            self.recorder.event(obj, "Warning", "InvalidSpec", str(error))
            raise TerminalError(f"AzureIdentity {request.key} is invalid: {error}") from error
        if identity.spec.identity_type is not IdentityType.USER_ASSIGNED_MSI:
            return Result()
        now = self.clock()
        if not identity_info_due(identity, now):
            return self._come_back(identity, now)
        lookup, failure = self._look_up(identity)
        status = identity_info_status(identity, lookup, now, self.jitter())
        if status.to_dict() != identity.status.to_dict():
            try:
                self.client.patch(
                    AZURE_IDENTITY,
                    identity.name,
                    {"status": status.to_dict()},
                    identity.namespace,
                    subresource="status",
                )
            except errors.NotFound:
                return Result()
            self._report(identity, obj, lookup, status)
        if failure is not None:
            raise failure
        identity.status = status
        return self._come_back(identity, now)

    def _look_up(self, identity: AzureIdentity) -> tuple[IdentityLookup, Exception | None]:
        try:
            resource_id = parse_user_assigned_identity_id(identity.spec.resource_id)
        except InvalidResourceIdError as error:
            return IdentityLookup("invalid", error=str(error)), None
        try:
            info = self.lookups.get_identity(str(resource_id))
        except NotFoundError as error:
            return IdentityLookup("not_found", error=error.message or str(error)), None
        except CloudError as error:
            return IdentityLookup("failed", error=error.message or str(error)), error
        return IdentityLookup(
            "found", client_id=info.client_id or "", principal_id=info.principal_id or ""
        ), None

    def _report(
        self, identity: AzureIdentity, obj: dict[str, Any], lookup: IdentityLookup, status: Any
    ) -> None:
        if lookup.outcome == "found":
            log.info(
                "Resolved identity",
                identity=f"{identity.namespace}/{identity.name}",
                client_id=lookup.client_id,
            )
        elif lookup.outcome == "not_found":
            self.recorder.event(obj, "Warning", "IdentityNotFound", status.retrieval_error)
        elif lookup.outcome == "invalid":
            self.recorder.event(obj, "Warning", "InvalidResourceID", status.retrieval_error)
        else:
            log.warning(
                "Failed to look up identity",
                identity=f"{identity.namespace}/{identity.name}",
                error=status.retrieval_error,
            )
        current = next((c for c in status.conditions if c.type == CONDITION_CLIENT_ID_CURRENT), None)
        if current is not None and current.status == "False":
            self.recorder.event(obj, "Warning", "ClientIDMismatch", current.message)

    def _come_back(self, identity: AzureIdentity, now: datetime) -> Result:
        due = parse_time(identity.status.next_recheck_time)
        if due is None:
            return Result()
        return Result(requeue_after=max(1.0, (due - now).total_seconds()))
