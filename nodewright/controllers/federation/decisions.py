"""Pure decisions of workload identity federation: which ServiceAccounts want a federated identity
credential (FIC) on which user-assigned identity, what each credential is called and says, which
credentials nodewright owns, and the plan for one identity: what to create or update, what to
delete, who is refused because the identity would pass Azure's 20 credentials, and who is ready.

Ownership: nodewright owns exactly the credentials recorded on a ServiceAccount
(``RECORD_ANNOTATION``, written with a finalizer *before* the PUT), so a restart at any point
leaves no orphan and a credential someone else made (a *foreign* one) is never changed or deleted.
A foreign credential that already trusts the ServiceAccount's subject is used as it is.
No I/O; ``reconciler`` reads, calls ``plan_identity`` and writes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nodewright.cloud.msi import FEDERATION_AUDIENCE, MAX_FEDERATED_CREDENTIALS, FederatedCredential
from nodewright.runtime import format_time

__all__ = [
    "CLIENT_ID_ANNOTATION",
    "FINALIZER",
    "IDENTITY_ANNOTATION",
    "RECORD_ANNOTATION",
    "STATUS_ANNOTATION",
    "TENANT_ID_ANNOTATION",
    "AccountInfo",
    "AccountOutcome",
    "IdentityPlan",
    "credential_name",
    "plan_identity",
    "subject_of",
]

IDENTITY_ANNOTATION = "nodewright.io/azure-identity"
"""On a ServiceAccount: an AzureIdentity's name (in the ServiceAccount's namespace) or a
user-assigned identity's resource ID."""
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
TENANT_ID_ANNOTATION = "azure.workload.identity/tenant-id"
RECORD_ANNOTATION = "nodewright.io/federated-credential"
"""``<identity resource ID>#<credential name>``: the credential nodewright made for this account."""
STATUS_ANNOTATION = "nodewright.io/federation-status"
"""A JSON condition (type Federated) saying where the account's credential stands."""
FINALIZER = "nodewright.io/federated-credential"
_NAME_LIMIT = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def subject_of(namespace: str, name: str) -> str:
    """The subject a ServiceAccount's projected token carries."""
    return f"system:serviceaccount:{namespace}:{name}"


def credential_name(namespace: str, name: str) -> str:
    """``nodewright-<namespace>-<name>``, made of the characters Azure allows, at most 120 long
    (then cut, with a hash of the full name)."""
    plain = _UNSAFE.sub("-", f"nodewright-{namespace}-{name}")
    if len(plain) <= _NAME_LIMIT:
        return plain
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    return f"{plain[: _NAME_LIMIT - 11]}-{digest}"


@dataclass(frozen=True)
class AccountInfo:
    """What the plan needs of one ServiceAccount."""

    namespace: str
    name: str
    wanted: str = ""
    """The lowercased resource ID of the identity it asks for ("" when none or unresolvable)."""
    record: tuple[str, str] | None = None
    """(identity resource ID lowercased, credential name) nodewright made for it."""
    deleting: bool = False
    created: str = ""
    federated_since: datetime | None = None
    """When its credential was last written (from its status), for propagation."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def subject(self) -> str:
        return subject_of(self.namespace, self.name)


@dataclass(frozen=True)
class AccountOutcome:
    """The Federated condition of one account after the pass."""

    status: str
    reason: str
    message: str

    def to_annotation(self, now: datetime, previous: Mapping[str, Any] | None) -> str:
        same = (
            previous is not None
            and previous.get("status") == self.status
            and previous.get("reason") == self.reason
        )
        since = str(previous.get("lastTransitionTime")) if same and previous else format_time(now)
        condition = {
            "type": "Federated",
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": since,
        }
        return json.dumps(condition, sort_keys=True)


@dataclass
class IdentityPlan:
    """One identity's pass: credentials to PUT (with their account), names to delete (nodewright's
    own only), and each account's outcome."""

    put: list[tuple[AccountInfo, FederatedCredential]] = field(default_factory=list)
    delete: list[tuple[AccountInfo, str]] = field(default_factory=list)
    outcomes: dict[str, AccountOutcome] = field(default_factory=dict)
    ready: list[AccountInfo] = field(default_factory=list)
    propagating_for: float | None = None


def _limit_message(identity: str, holders: Sequence[str], foreign: int, waiting: Sequence[str]) -> str:
    held = ", ".join(holders) or "none"
    return (
        f"identity {identity} has {MAX_FEDERATED_CREDENTIALS} federated credentials "
        f"(ServiceAccounts: {held}; foreign: {foreign}); no credential for: {', '.join(waiting)}"
    )


def plan_identity(
    identity: str,
    accounts: Iterable[AccountInfo],
    existing: Sequence[FederatedCredential],
    *,
    issuer: str,
    now: datetime,
    propagation: timedelta,
) -> IdentityPlan:
    """Plan one identity (see the module docstring). Accounts that keep or hold a credential come
    first for the 20 slots, then the others by creation time and name; the rest are refused with
    a condition that names the accounts involved."""
    plan = IdentityPlan()
    by_name = {credential.name.lower(): credential for credential in existing}
    accounts = sorted(accounts, key=lambda a: (a.record is None, a.created, a.namespace, a.name))
    owned = {a.record[1].lower() for a in accounts if a.record is not None and a.record[0] == identity}
    foreign = [c for c in existing if c.name.lower() not in owned]
    wanting = [a for a in accounts if a.wanted == identity and not a.deleting]
    for account in accounts:
        if account.record is not None and account.record[0] == identity and account not in wanting:
            plan.delete.append((account, account.record[1]))
    slots = MAX_FEDERATED_CREDENTIALS - len(foreign)
    holders: list[str] = []
    refused: list[AccountInfo] = []
    for account in wanting:
        if account.record is not None and account.record[0] != identity:
            slots -= 1  # moving here: its old credential goes first (one record per account)
            plan.outcomes[account.key] = AccountOutcome(
                "False", "Moving", f"waiting for credential {account.record[1]} on {account.record[0]} to go"
            )
            continue
        trusted_by_foreign = any(c.issuer == issuer and c.subject == account.subject for c in foreign)
        if trusted_by_foreign:
            plan.ready.append(account)
            plan.outcomes[account.key] = AccountOutcome(
                "True",
                "FederatedByForeignCredential",
                "a credential nodewright did not make trusts this ServiceAccount",
            )
            continue
        if slots <= 0:
            refused.append(account)
            continue
        slots -= 1
        holders.append(account.key)
        _plan_account(plan, identity, account, by_name, issuer=issuer, now=now, propagation=propagation)
    for account in refused:
        message = _limit_message(identity, holders, len(foreign), [a.key for a in refused])
        plan.outcomes[account.key] = AccountOutcome("False", "CredentialLimitReached", message)
    return plan


def _plan_account(
    plan: IdentityPlan,
    identity: str,
    account: AccountInfo,
    by_name: Mapping[str, FederatedCredential],
    *,
    issuer: str,
    now: datetime,
    propagation: timedelta,
) -> None:
    name = (
        account.record[1]
        if account.record is not None and account.record[0] == identity
        else credential_name(account.namespace, account.name)
    )
    wanted = FederatedCredential(name, issuer, account.subject, (FEDERATION_AUDIENCE,))
    current = by_name.get(name.lower())
    if current is None or (current.issuer, current.subject, tuple(current.audiences)) != (
        wanted.issuer,
        wanted.subject,
        wanted.audiences,
    ):
        plan.put.append((account, wanted))
        plan.outcomes[account.key] = AccountOutcome(
            "False", "Propagating", f"credential {name} written; waiting for it to propagate"
        )
        plan.propagating_for = max(plan.propagating_for or 0.0, propagation.total_seconds())
        return
    since = account.federated_since
    if since is not None and now < since + propagation:
        remaining = (since + propagation - now).total_seconds()
        plan.propagating_for = max(plan.propagating_for or 0.0, remaining)
        plan.outcomes[account.key] = AccountOutcome(
            "False", "Propagating", f"credential {name} written; waiting for it to propagate"
        )
        return
    plan.ready.append(account)
    plan.outcomes[account.key] = AccountOutcome("True", "Ready", f"credential {name} on {identity}")
