"""Pure decisions of the shadow migration off pod identity, per AzureIdentityBinding (opt-in with
``MIGRATION_ANNOTATION`` on the binding: ``shadow`` or ``cutover``).

The stages, reported in the binding's ``WorkloadIdentityMigration`` condition:

1. **Federating**: the ServiceAccounts of the pods the binding selects are annotated to ask for
   the binding's identity (``IDENTITY_ANNOTATION``, marked ``MIGRATED_BY_ANNOTATION``), so the
   federation reconciler makes their credentials. Pod identity keeps working.
2. **Verified**: for every such ServiceAccount a real token (TokenRequest, audience
   ``api://AzureADTokenExchange``) was exchanged at Entra for the identity's token.
3. **CutOver** (only with ``cutover``, only once verified): the pods' owners (Deployment,
   StatefulSet, DaemonSet) carry ``azure.workload.identity/use: "true"`` in their pod template.
   The identity reconciler stops assigning the identity for pods with that label, so the normal
   in-use rules remove it from a VM or scale set once no pod without it needs it there.

Going back (``shadow`` after ``cutover``, or no annotation) undoes only what the migration wrote,
found by ``MIGRATED_BY_ANNOTATION``. No I/O; ``migration_reconciler`` reads and writes.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodewright.api.aadpodidentity.v1 import (
    CONDITION_WORKLOAD_IDENTITY_MIGRATION,
    MIGRATION_CUT_OVER,
    WORKLOAD_IDENTITY_LABEL,
)
from nodewright.controllers.federation.decisions import IDENTITY_ANNOTATION

__all__ = [
    "CONDITION_MIGRATION",
    "MIGRATED_BY_ANNOTATION",
    "MIGRATION_ANNOTATION",
    "WORKLOAD_IDENTITY_LABEL",
    "Account",
    "MigrationMode",
    "Owner",
    "Stage",
    "accounts_of",
    "is_cut_over",
    "migration_stage",
    "parse_mode",
]

MIGRATION_ANNOTATION = "nodewright.io/workload-identity-migration"
"""On an AzureIdentityBinding: ``shadow`` (federate and verify) or ``cutover`` (then switch)."""
MIGRATED_BY_ANNOTATION = "nodewright.io/migrated-by"
"""On a ServiceAccount or pod owner the migration changed: ``<namespace>/<binding>``."""
CONDITION_MIGRATION = CONDITION_WORKLOAD_IDENTITY_MIGRATION
CUT_OVER = MIGRATION_CUT_OVER


class MigrationMode(enum.Enum):
    OFF = ""
    SHADOW = "shadow"
    CUTOVER = "cutover"


def parse_mode(annotations: Mapping[str, str]) -> MigrationMode | None:
    """The binding's mode; None when the annotation holds something else."""
    value = str(annotations.get(MIGRATION_ANNOTATION, "")).strip().lower()
    try:
        return MigrationMode(value)
    except ValueError:
        return None


@dataclass(frozen=True, order=True)
class Owner:
    """A pod's controlling workload whose template the cutover labels."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Account:
    """One ServiceAccount the binding's pods run as, and where it stands."""

    namespace: str
    name: str
    exists: bool = True
    asks_for: str = ""
    """Its ``IDENTITY_ANNOTATION`` (as written)."""
    migrated_by: str = ""
    federation: tuple[str, str, str] = ("", "", "")
    """The federation reconciler's condition on it: (status, reason, message)."""
    client_id: str = ""
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def accounts_of(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(namespace, ServiceAccount) of each pod, sorted, once each."""
    found = {
        (
            str((pod.get("metadata") or {}).get("namespace") or ""),
            str((pod.get("spec") or {}).get("serviceAccountName") or "default"),
        )
        for pod in pods
    }
    return sorted(found)


def is_cut_over(conditions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a binding's conditions say its pods were switched to workload identity."""
    return any(
        c.get("type") == CONDITION_MIGRATION and c.get("status") == "True" and c.get("reason") == CUT_OVER
        for c in conditions
    )


@dataclass(frozen=True)
class Stage:
    """The binding's migration condition."""

    status: Literal["True", "False"]
    reason: str
    message: str


def _names(accounts: Iterable[Account]) -> str:
    return ", ".join(sorted(a.key for a in accounts))


def migration_stage(
    mode: MigrationMode,
    identity: str,
    accounts: Sequence[Account],
    *,
    verified: Iterable[str],
    failures: Mapping[str, str],
    unlabelled: Sequence[Owner] = (),
    unowned: Sequence[str] = (),
) -> Stage:
    """Where the migration stands (pure). ``identity`` is the identity's resource ID;
    ``verified`` the account keys whose exchange succeeded; ``failures`` Entra's refusal per key;
    ``unlabelled`` owners the cutover has still to label; ``unowned`` pods with no owner to label."""
    if not accounts:
        return Stage("False", "NoPods", "No pod uses this binding; nothing to migrate")
    missing = [a for a in accounts if not a.exists]
    if missing:
        return Stage("False", "ServiceAccountMissing", f"ServiceAccounts not found: {_names(missing)}")
    taken = [a for a in accounts if a.asks_for and a.asks_for.lower() != identity.lower()]
    if taken:
        message = f"ServiceAccounts ask for another identity ({IDENTITY_ANNOTATION}): {_names(taken)}"
        return Stage("False", "ServiceAccountConflict", message)
    refused = [a for a in accounts if a.federation[0] == "False" and a.federation[1] != "Propagating"]
    if refused:
        details = "; ".join(f"{a.key}: {a.federation[1]} {a.federation[2]}".strip() for a in refused)
        return Stage("False", "FederationRefused", details)
    waiting = [a for a in accounts if a.federation[1] != "Ready" or not a.client_id]
    if waiting:
        return Stage("False", "Federating", f"Waiting for federated credentials: {_names(waiting)}")
    done = set(verified)
    failed = {key: text for key, text in failures.items() if key not in done}
    if failed:
        details = "; ".join(f"{key}: {text}" for key, text in sorted(failed.items()))
        return Stage("False", "VerificationFailed", f"Token exchange refused: {details}")
    unverified = [a for a in accounts if a.key not in done]
    if unverified:
        return Stage("False", "Verifying", f"Exchanging tokens for {_names(unverified)}")
    if mode is not MigrationMode.CUTOVER:
        message = f"Tokens exchanged for {_names(accounts)}; pod identity still assigned (shadow)"
        return Stage("True", "Verified", message)
    if unowned:
        message = "Pods without an owner to label (recreate them with the label): " + ", ".join(unowned)
        return Stage("False", "CuttingOver", message)
    if unlabelled:
        return Stage("False", "CuttingOver", "Labelling " + ", ".join(str(o) for o in unlabelled))
    return Stage("True", CUT_OVER, f"Pods of {_names(accounts)} use workload identity")
