"""Pure rules of identity info: when to look an AzureIdentity's clientId and principalId up in
Azure again, and the status a lookup leads to (ARO-HCP's rules, plus the ClientIDCurrent condition
of aad-pod-identity #521). No I/O; ``identity_info`` does the lookups and writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from nodewright.api.aadpodidentity.v1 import (
    CONDITION_CLIENT_ID_CURRENT,
    CONDITION_RESOLVED,
    AzureIdentity,
    AzureIdentityStatus,
    IdentityType,
)
from nodewright.controllers.identity.conditions import ConditionStatus, with_condition
from nodewright.runtime import format_time, parse_time

__all__ = [
    "RECHECK_INTERVAL",
    "RETRIEVAL_ERROR_LIMIT",
    "IdentityLookup",
    "identity_info_due",
    "identity_info_status",
    "next_recheck_time",
    "truncate_retrieval_error",
]

RECHECK_INTERVAL = timedelta(hours=12)
"""ARO-HCP rechecks an identity's clientId/principalId every 12 h x (1 + 0.5 x jitter)."""
RETRIEVAL_ERROR_LIMIT = 1024
"""ARO-HCP keeps the first 1024 characters of a lookup error."""


def truncate_retrieval_error(message: str) -> str:
    """The first 1024 characters of a lookup error (ARO-HCP's RetrievalError)."""
    return message[:RETRIEVAL_ERROR_LIMIT]


def next_recheck_time(now: datetime, jitter: float) -> datetime:
    """now + 12 h x (1 + 0.5 x jitter), jitter in [0, 1): identities recreated in Azure are
    noticed within a day, and lookups of many identities spread out instead of bursting."""
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    return now + RECHECK_INTERVAL * (1 + 0.5 * jitter)


def identity_info_due(identity: AzureIdentity, now: datetime) -> bool:
    """Whether to look the identity up in Azure now: type 0 only; when the spec changed since the
    last lookup, when no recheck time is set (never looked up, or the last lookup failed), or
    when the recheck time has come."""
    if identity.spec.identity_type is not IdentityType.USER_ASSIGNED_MSI:
        return False
    status = identity.status
    if status.observed_generation != int(identity.metadata.get("generation") or 0):
        return True
    recheck = parse_time(status.next_recheck_time)
    return recheck is None or now >= recheck


_LOOKUP_REASONS = {"not_found": "NotFound", "failed": "RetrievalFailed", "invalid": "InvalidResourceID"}


@dataclass(frozen=True)
class IdentityLookup:
    """The outcome of one GET of a user-assigned identity: found (with its IDs), not found,
    failed (any other error), or invalid (the resourceID could not even be parsed)."""

    outcome: Literal["found", "not_found", "failed", "invalid"]
    client_id: str = ""
    principal_id: str = ""
    error: str = ""


def identity_info_status(
    identity: AzureIdentity, lookup: IdentityLookup, now: datetime, jitter: float
) -> AzureIdentityStatus:
    """The AzureIdentity status after a lookup (ARO-HCP's rules, plus the #521 condition).

    Found: clientID and principalID set, error cleared, next recheck in 12-18 h. Any error:
    both IDs cleared (never left stale) and the first 1024 characters of the error kept. Not
    found is not fatal (the identity may be created later): recheck at the usual interval.
    Other failures leave the recheck time unset, so the next pass retries (with the controller's
    backoff). Invalid resourceID: no recheck until the spec changes. ``ClientIDCurrent`` is False
    when spec.clientID is not the identity's real clientId (or is not set), Unknown while the
    real one is not known. Upstream's fields are kept as they were.
    """
    generation = int(identity.metadata.get("generation") or 0)
    old = identity.status
    conditions = list(old.conditions)

    def set_condition(condition_type: str, status: ConditionStatus, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = with_condition(
            conditions,
            condition_type,
            status=status,
            reason=reason,
            message=message,
            now=now,
            observed_generation=generation,
        )

    client_id = principal_id = retrieval_error = next_recheck = ""
    if lookup.outcome == "found":
        client_id, principal_id = lookup.client_id, lookup.principal_id
        next_recheck = format_time(next_recheck_time(now, jitter))
        set_condition(CONDITION_RESOLVED, "True", "Found", "clientId and principalId read from Azure")
    else:
        retrieval_error = truncate_retrieval_error(lookup.error or lookup.outcome)
        if lookup.outcome == "not_found":
            next_recheck = format_time(next_recheck_time(now, jitter))
        set_condition(CONDITION_RESOLVED, "False", _LOOKUP_REASONS[lookup.outcome], retrieval_error)
    set_condition(CONDITION_CLIENT_ID_CURRENT, *_client_id_current(identity.spec.client_id, client_id))
    return AzureIdentityStatus(
        metadata=old.metadata,
        available_replicas=old.available_replicas,
        client_id=client_id,
        principal_id=principal_id,
        retrieval_error=retrieval_error,
        next_recheck_time=next_recheck,
        observed_generation=generation,
        conditions=conditions,
    )


def _client_id_current(spec_client_id: str, client_id: str) -> tuple[ConditionStatus, str, str]:
    """The ClientIDCurrent condition's status, reason and message: whether spec.clientID is the
    identity's real clientId (``client_id``, empty while it is not known)."""
    if not client_id:
        return "Unknown", "NotResolved", "the identity's clientId in Azure is not known"
    if not spec_client_id:
        return "False", "NotSet", f"spec.clientID is empty; the identity's clientId is {client_id}"
    if spec_client_id.lower() != client_id.lower():
        return (
            "False",
            "Differs",
            f"spec.clientID {spec_client_id} differs from the identity's clientId {client_id} in Azure "
            "(was it deleted and recreated under the same name?); token requests for the old one fail",
        )
    return "True", "Matches", "spec.clientID is current"
