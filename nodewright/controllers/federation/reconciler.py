"""The workload identity federation reconciler: one pass per user-assigned identity (requests are
keyed by its lowercased resource ID), so the identity's 20-credential limit is decided in one
place and its credential writes never run concurrently (Azure refuses concurrent writes).

A pass reads the ServiceAccounts that ask for the identity (``IDENTITY_ANNOTATION``: an
AzureIdentity's name in their namespace, or the identity's resource ID) or that hold a credential
nodewright made on it (``RECORD_ANNOTATION``); LISTs the identity's credentials (one ARM call);
asks ``decisions.plan_identity``; deletes nodewright's credentials no account wants any more (then
drops the record and finalizer); for each credential to write, records it on the account with a
finalizer *before* the PUT (so a restart leaves no orphan); and writes each account's Federated
condition (``STATUS_ANNOTATION``), the ``azure.workload.identity/client-id`` (and ``tenant-id``)
annotations once the credential has had ``propagationDelay`` to propagate, and a Warning Event
when an account is refused. Cloud failures raise (the controller retries with backoff).

Side effects: ServiceAccount patches, Events, ARM calls through ``FederationCloud``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from nodewright.cloud.errors import NotFoundError
from nodewright.cloud.models import IdentityInfo
from nodewright.cloud.msi import FederatedCredential
from nodewright.cloud.resource_ids import InvalidResourceIdError, parse_user_assigned_identity_id
from nodewright.controllers.federation.decisions import (
    CLIENT_ID_ANNOTATION,
    FINALIZER,
    IDENTITY_ANNOTATION,
    RECORD_ANNOTATION,
    STATUS_ANNOTATION,
    TENANT_ID_ANNOTATION,
    AccountInfo,
    AccountOutcome,
    IdentityPlan,
    plan_identity,
)
from nodewright.controllers.federation.options import FederationOptions
from nodewright.controllers.identity.options import AZURE_IDENTITY
from nodewright.runtime import Cache, Client, EventRecorder, Kind, Result, errors, get_logger, parse_time

__all__ = ["SERVICE_ACCOUNT", "FederationCloud", "FederationReconciler", "IdentityKey", "status_of"]

log = get_logger(__name__)

SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")


@dataclass(frozen=True, order=True, slots=True)
class IdentityKey:
    """This controller's request key: a user-assigned identity's lowercased resource ID."""

    resource_id: str

    def log_fields(self) -> dict[str, str]:
        return {"identity": self.resource_id}

    def __str__(self) -> str:
        return self.resource_id


class FederationCloud(Protocol):
    """The cloud operations this reconciler needs (``IdentityService`` provides them)."""

    def get_identity(self, identity: str) -> IdentityInfo: ...

    def list_federated_credentials(self, identity: str) -> list[FederatedCredential]: ...

    def put_federated_credential(
        self, identity: str, name: str, *, issuer: str, subject: str
    ) -> FederatedCredential: ...

    def delete_federated_credential(self, identity: str, name: str) -> None: ...


def _now() -> datetime:
    return datetime.now(UTC)


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _record_of(obj: dict[str, Any]) -> tuple[str, str] | None:
    value = _annotations(obj).get(RECORD_ANNOTATION, "")
    identity, _, name = value.partition("#")
    return (identity.lower(), name) if identity and name else None


def status_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    try:
        parsed = json.loads(_annotations(obj).get(STATUS_ANNOTATION, ""))
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class FederationReconciler:
    """Keeps each identity's federated credentials following the ServiceAccounts that ask for it."""

    def __init__(
        self,
        client: Client,
        cache: Cache,
        cloud: FederationCloud,
        recorder: EventRecorder,
        options: FederationOptions,
        *,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.client = client
        self.cloud = cloud
        self.recorder = recorder
        self.options = options
        self.clock = clock
        self.accounts = cache.informer(SERVICE_ACCOUNT)
        self.azure_identities = cache.informer(AZURE_IDENTITY)
        self._client_ids: dict[str, str] = {}

    # --- map functions ----------------------------------------------------------------------------

    def wanted_identity(self, account: dict[str, Any]) -> str:
        """The lowercased resource ID an account asks for ("" when none or not resolvable)."""
        value = _annotations(account).get(IDENTITY_ANNOTATION, "").strip()
        if not value:
            return ""
        if value.lower().startswith("/subscriptions/"):
            try:
                return parse_user_assigned_identity_id(value).key
            except InvalidResourceIdError:
                return ""
        namespace = str((account.get("metadata") or {}).get("namespace") or "")
        identity = self.azure_identities.store.get(f"{namespace}/{value}")
        resource_id = str(((identity or {}).get("spec") or {}).get("resourceID") or "")
        try:
            return parse_user_assigned_identity_id(resource_id).key if resource_id else ""
        except InvalidResourceIdError:
            return ""

    def requests_for_account(self, account: dict[str, Any]) -> list[IdentityKey]:
        keys = {self.wanted_identity(account), (_record_of(account) or ("", ""))[0]} - {""}
        return [IdentityKey(key) for key in sorted(keys)]

    def requests_for_azure_identity(self, identity: dict[str, Any]) -> list[IdentityKey]:
        metadata = identity.get("metadata") or {}
        requests: dict[IdentityKey, None] = {}
        for account in self.accounts.store.by_index("namespace", str(metadata.get("namespace") or "")):
            if _annotations(account).get(IDENTITY_ANNOTATION) == metadata.get("name"):
                for request in self.requests_for_account(account):
                    requests.setdefault(request, None)
        return list(requests)

    # --- the pass ---------------------------------------------------------------------------------

    def _read_accounts(self, identity: str) -> tuple[list[AccountInfo], dict[str, dict[str, Any]]]:
        infos: list[AccountInfo] = []
        objects: dict[str, dict[str, Any]] = {}
        for account in self.accounts.store.list():
            wanted, record = self.wanted_identity(account), _record_of(account)
            if wanted != identity and (record is None or record[0] != identity):
                continue
            metadata = account.get("metadata") or {}
            status = status_of(account) or {}
            propagating = status.get("reason") == "Propagating"
            since = parse_time(status.get("lastTransitionTime")) if propagating else None
            info = AccountInfo(
                namespace=str(metadata.get("namespace") or ""),
                name=str(metadata.get("name") or ""),
                wanted=wanted,
                record=record,
                deleting=bool(metadata.get("deletionTimestamp")),
                created=str(metadata.get("creationTimestamp") or ""),
                federated_since=since,
            )
            infos.append(info)
            objects[info.key] = account
        return infos, objects

    def reconcile(self, request: IdentityKey) -> Result:
        identity = request.resource_id
        accounts, objects = self._read_accounts(identity)
        if not accounts:
            return Result()
        try:
            existing = self.cloud.list_federated_credentials(identity)
        except NotFoundError:
            self._identity_gone(identity, accounts, objects)
            return Result()
        plan = plan_identity(
            identity,
            accounts,
            existing,
            issuer=self.options.issuer,
            now=self.clock(),
            propagation=timedelta(seconds=self.options.propagation_delay),
        )
        self._apply(identity, plan, objects)
        self._write_status(identity, plan, objects)
        if plan.propagating_for is not None:
            return Result(requeue_after=max(0.05, plan.propagating_for))
        return Result()

    def _apply(self, identity: str, plan: IdentityPlan, objects: dict[str, dict[str, Any]]) -> None:
        """Deletes first (they free slots), then intent + PUT for each credential, one at a time."""
        for account, name in plan.delete:
            self.cloud.delete_federated_credential(identity, name)
            log.info(
                "Deleted federated credential", identity=identity, name=name, service_account=account.key
            )
            self._forget(objects[account.key], drop_client_id=account.wanted == "")
        for account, credential in plan.put:
            objects[account.key] = self._record(objects[account.key], identity, credential.name)
            self.cloud.put_federated_credential(
                identity, credential.name, issuer=credential.issuer, subject=credential.subject
            )
            log.info(
                "Wrote federated credential",
                identity=identity,
                name=credential.name,
                service_account=account.key,
            )

    def _patch_account(self, account: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
        current = account.get("metadata") or {}
        body = {"metadata": {**metadata, "resourceVersion": current.get("resourceVersion")}}
        return self.client.patch(SERVICE_ACCOUNT, str(current["name"]), body, str(current["namespace"]))

    def _record(self, account: dict[str, Any], identity: str, name: str) -> dict[str, Any]:
        finalizers = list((account.get("metadata") or {}).get("finalizers") or [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
        record = f"{identity}#{name}"
        if _annotations(account).get(RECORD_ANNOTATION) == record and FINALIZER in (
            (account.get("metadata") or {}).get("finalizers") or []
        ):
            return account
        return self._patch_account(
            account, {"finalizers": finalizers, "annotations": {RECORD_ANNOTATION: record}}
        )

    def _forget(self, account: dict[str, Any], *, drop_client_id: bool) -> None:
        finalizers = [f for f in ((account.get("metadata") or {}).get("finalizers") or []) if f != FINALIZER]
        annotations: dict[str, Any] = {RECORD_ANNOTATION: None, STATUS_ANNOTATION: None}
        if drop_client_id:
            annotations.update({CLIENT_ID_ANNOTATION: None, TENANT_ID_ANNOTATION: None})
        try:
            self._patch_account(account, {"finalizers": finalizers, "annotations": annotations})
        except errors.NotFound:
            return

    def _client_id(self, identity: str) -> str:
        if identity not in self._client_ids:
            self._client_ids[identity] = str(self.cloud.get_identity(identity).client_id or "")
        return self._client_ids[identity]

    def _write_status(self, identity: str, plan: IdentityPlan, objects: dict[str, dict[str, Any]]) -> None:
        ready = {account.key for account in plan.ready}
        for key, outcome in plan.outcomes.items():
            account = objects[key]
            if account.get("metadata", {}).get("deletionTimestamp"):
                continue
            annotations: dict[str, str] = {}
            if key in ready:
                annotations[CLIENT_ID_ANNOTATION] = self._client_id(identity)
                if self.options.tenant_id:
                    annotations[TENANT_ID_ANNOTATION] = self.options.tenant_id
            previous = status_of(account)
            annotations[STATUS_ANNOTATION] = outcome.to_annotation(self.clock(), previous)
            if all(_annotations(account).get(k) == v for k, v in annotations.items()):
                continue
            self._announce(account, outcome, previous)
            objects[key] = self._patch_account(account, {"annotations": annotations})

    def _announce(
        self, account: dict[str, Any], outcome: AccountOutcome, previous: dict[str, Any] | None
    ) -> None:
        if previous is not None and (previous.get("reason"), previous.get("message")) == (
            outcome.reason,
            outcome.message,
        ):
            return
        subject = {**account, "apiVersion": "v1", "kind": "ServiceAccount"}
        if outcome.status == "False" and outcome.reason != "Propagating":
            log.warning("Refused federated credential", reason=outcome.reason, detail=outcome.message)
            self.recorder.event(subject, "Warning", outcome.reason, outcome.message)
        elif outcome.reason == "Ready":
            self.recorder.event(subject, "Normal", "Federated", outcome.message)

    def _identity_gone(
        self, identity: str, accounts: list[AccountInfo], objects: dict[str, dict[str, Any]]
    ) -> None:
        """The identity does not exist: its credentials went with it; accounts asking say why."""
        outcome = AccountOutcome(
            "False", "IdentityNotFound", f"user-assigned identity {identity} does not exist"
        )
        for account in accounts:
            if (
                account.record is not None
                and account.record[0] == identity
                and (account.deleting or account.wanted != identity)
            ):
                self._forget(objects[account.key], drop_client_id=account.wanted == "")
            elif account.wanted == identity and not account.deleting:
                previous = status_of(objects[account.key])
                self._announce(objects[account.key], outcome, previous)
                self._patch_account(
                    objects[account.key],
                    {"annotations": {STATUS_ANNOTATION: outcome.to_annotation(self.clock(), previous)}},
                )
