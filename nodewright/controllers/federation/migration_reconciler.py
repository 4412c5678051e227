"""The shadow-migration reconciler, keyed by AzureIdentityBinding (``<namespace>/<name>``); the
stages and rules are in ``migration``.

A pass reads the binding, its identity and the pods it selects from the cache; annotates their
ServiceAccounts to ask for the identity (the federation reconciler then makes the credentials);
once each account's credential is Ready, asks the API server for the account's token (TokenRequest,
audience ``api://AzureADTokenExchange``) and exchanges it at Entra (``cloud.entra``), remembering
each success; with ``cutover`` labels the pods' owners (``owners``); and writes the binding's
``WorkloadIdentityMigration`` condition, with an Event when its reason changes. A failed exchange
is retried with a capped exponential backoff per binding, so one identity never holds up another.

Side effects: ServiceAccount and workload patches, TokenRequests, token exchanges, the binding's
status, Events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from nodewright.api.aadpodidentity.v1 import POD_LABEL
from nodewright.cloud.entra import TokenExchange, TokenExchangeError
from nodewright.cloud.msi import FEDERATION_AUDIENCE
from nodewright.controllers.federation.decisions import CLIENT_ID_ANNOTATION, IDENTITY_ANNOTATION
from nodewright.controllers.federation.migration import (
    CONDITION_MIGRATION,
    MIGRATED_BY_ANNOTATION,
    MIGRATION_ANNOTATION,
    Account,
    MigrationMode,
    Stage,
    accounts_of,
    migration_stage,
    parse_mode,
)
from nodewright.controllers.federation.owners import OwnerLabels
from nodewright.controllers.federation.reconciler import SERVICE_ACCOUNT, status_of
from nodewright.controllers.identity.options import AZURE_IDENTITY, AZURE_IDENTITY_BINDING
from nodewright.controllers.identity.watches import BINDING_LABEL_INDEX, pod_binding_label_index
from nodewright.runtime import (
    POD,
    Cache,
    Client,
    EventRecorder,
    Request,
    Result,
    errors,
    get_condition,
    get_logger,
    retry_on_conflict,
    set_condition,
)

__all__ = ["MigrationReconciler"]

log = get_logger(__name__)

BACKOFF_BASE_SECONDS = 5.0
BACKOFF_CAP_SECONDS = 300.0
WAIT_SECONDS = 2.0
"""How soon a pass waiting on a credential or a rollout looks again (events usually come first)."""


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _request(obj: dict[str, Any]) -> Request:
    metadata = obj.get("metadata") or {}
    return Request(str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


def _key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


class MigrationReconciler:
    """Moves each opted-in binding's pods from pod identity to workload identity, in stages."""

    def __init__(
        self,
        client: Client,
        cache: Cache,
        exchange: TokenExchange,
        recorder: EventRecorder,
        *,
        tenant_id: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.exchange = exchange
        self.recorder = recorder
        self.tenant_id = tenant_id
        self.clock = clock
        self.bindings = cache.informer(AZURE_IDENTITY_BINDING)
        self.identities = cache.informer(AZURE_IDENTITY)
        self.accounts = cache.informer(SERVICE_ACCOUNT)
        self.pods = cache.informer(POD, label_selector=POD_LABEL)
        self.owners = OwnerLabels(client)
        self._verified: set[tuple[str, str, str]] = set()
        """(account uid, identity, client ID) whose token exchange succeeded."""
        self._failures: dict[str, int] = {}

    def add_indexers(self) -> None:
        """The pods-by-binding-label index (shared with the identity reconciler if it runs)."""
        self.pods.ensure_indexer(BINDING_LABEL_INDEX, pod_binding_label_index)

    # --- map functions ----------------------------------------------------------------------------

    def _migrating(self) -> list[dict[str, Any]]:
        return [
            b
            for b in self.bindings.store.list()
            if MIGRATION_ANNOTATION in _annotations(b)
            or get_condition((b.get("status") or {}).get("conditions"), CONDITION_MIGRATION)
        ]

    def requests_for_pod(self, pod: dict[str, Any]) -> list[Request]:
        label = str(((pod.get("metadata") or {}).get("labels") or {}).get(POD_LABEL) or "")
        return [
            _request(b) for b in self._migrating() if label and (b.get("spec") or {}).get("selector") == label
        ]

    def requests_for_account(self, account: dict[str, Any]) -> list[Request]:
        metadata = account.get("metadata") or {}
        keys = {_annotations(account).get(MIGRATED_BY_ANNOTATION, "")} - {""}
        for binding in self._migrating():
            if (metadata.get("namespace"), metadata.get("name")) in accounts_of(self._selected(binding)):
                keys.add(_key(binding))
        return [Request(*key.split("/", 1)) for key in sorted(keys)]

    # --- the pass ---------------------------------------------------------------------------------

    def _selected(self, binding: dict[str, Any]) -> list[dict[str, Any]]:
        """Active pods whose aadpodidbinding label is the binding's selector."""
        selector = str((binding.get("spec") or {}).get("selector") or "")
        if not selector:
            return []
        return [
            p
            for p in self.pods.store.by_index(BINDING_LABEL_INDEX, selector)
            if (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def _identity(self, binding: dict[str, Any]) -> tuple[str, str] | None:
        """(resource ID, client ID) of the AzureIdentity the binding names."""
        metadata = binding.get("metadata") or {}
        name = str((binding.get("spec") or {}).get("azureIdentity") or "")
        identity = self.identities.store.get(f"{metadata.get('namespace') or ''}/{name}")
        spec = (identity or {}).get("spec") or {}
        resource_id, client_id = str(spec.get("resourceID") or ""), str(spec.get("clientID") or "")
        return (resource_id, client_id) if resource_id else None

    def reconcile(self, request: Request) -> Result:
        binding = self.bindings.store.get(request.key)
        if binding is None:
            return Result()
        mode = parse_mode(_annotations(binding))
        if mode is None:
            value = _annotations(binding).get(MIGRATION_ANNOTATION, "")
            message = f"{MIGRATION_ANNOTATION} is {value!r}; expected shadow or cutover"
            self._report(binding, Stage("False", "InvalidMigrationMode", message))
            return Result()
        previous = get_condition((binding.get("status") or {}).get("conditions"), CONDITION_MIGRATION)
        if mode is MigrationMode.OFF and previous is None:
            return Result()  # never opted in (or already taken back): nothing to read or write
        selected = self._selected(binding)
        if mode is MigrationMode.OFF:
            self._undo(request.key, selected)
            self._clear(binding)
            return Result()
        identity = self._identity(binding)
        if identity is None:
            name = (binding.get("spec") or {}).get("azureIdentity")
            self._report(binding, Stage("False", "IdentityNotFound", f"AzureIdentity {name} not found"))
            return Result(requeue_after=WAIT_SECONDS * 5)
        return self._migrate(request.key, binding, mode, identity, selected)

    def _migrate(
        self,
        key: str,
        binding: dict[str, Any],
        mode: MigrationMode,
        identity: tuple[str, str],
        selected: list[dict[str, Any]],
    ) -> Result:
        accounts = [
            self._ask(key, binding, namespace, name, identity[0]) for namespace, name in accounts_of(selected)
        ]
        verified, failures = self._verify(accounts, identity[0])
        stage = migration_stage(mode, identity[0], accounts, verified=verified, failures=failures)
        if mode is MigrationMode.CUTOVER and stage.status == "True":  # verified: switch the owners
            unlabelled, unowned = self.owners.cut_over(key, selected)
            stage = migration_stage(
                mode,
                identity[0],
                accounts,
                verified=verified,
                failures=failures,
                unlabelled=unlabelled,
                unowned=unowned,
            )
        elif mode is MigrationMode.SHADOW and _was_cut_over(binding):
            self.owners.undo(key, selected)  # back from cutover: only then are owners read
        self._report(binding, stage)
        return self._next(key, stage)

    def _next(self, key: str, stage: Stage) -> Result:
        if stage.reason != "VerificationFailed":
            self._failures.pop(key, None)
        if stage.reason == "VerificationFailed":
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            return Result(requeue_after=min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1)))
        if stage.reason in ("Federating", "Verifying", "CuttingOver"):
            return Result(requeue_after=WAIT_SECONDS)
        return Result()

    def _ask(self, key: str, binding: dict[str, Any], namespace: str, name: str, identity: str) -> Account:
        """The account as it stands, after asking for ``identity`` on it if nothing else is asked.
        An account that names the binding's AzureIdentity (same namespace) asks for ``identity``."""
        account = self.accounts.store.get(f"{namespace}/{name}")
        if account is None:
            return Account(namespace, name, exists=False)
        annotations = _annotations(account)
        if not annotations.get(IDENTITY_ANNOTATION):
            body = {"metadata": {"annotations": {IDENTITY_ANNOTATION: identity, MIGRATED_BY_ANNOTATION: key}}}
            account = self.client.patch(SERVICE_ACCOUNT, name, body, namespace)
            annotations = _annotations(account)
            log.info("Asked for a federated credential", service_account=f"{namespace}/{name}", binding=key)
        asks_for = annotations.get(IDENTITY_ANNOTATION, "")
        metadata, spec = binding.get("metadata") or {}, binding.get("spec") or {}
        if namespace == metadata.get("namespace") and asks_for == spec.get("azureIdentity"):
            asks_for = identity
        status = status_of(account) or {}
        return Account(
            namespace,
            name,
            asks_for=asks_for,
            migrated_by=annotations.get(MIGRATED_BY_ANNOTATION, ""),
            federation=(
                str(status.get("status", "")),
                str(status.get("reason", "")),
                str(status.get("message", "")),
            ),
            client_id=annotations.get(CLIENT_ID_ANNOTATION, ""),
            uid=str((account.get("metadata") or {}).get("uid") or ""),
        )

    def _verify(self, accounts: list[Account], identity: str) -> tuple[set[str], dict[str, str]]:
        """Exchange a token for each account federated with ``identity`` and not verified yet (one
        TokenRequest and one exchange each); returns the verified keys and the refusals."""
        verified: set[str] = set()
        failures: dict[str, str] = {}
        for account in accounts:
            if account.federation[1] != "Ready" or not account.client_id:
                continue
            if account.asks_for.lower() != identity.lower():
                continue  # federated with another identity: a conflict, reported by the stage
            memo = (account.uid, identity.lower(), account.client_id)
            if memo not in self._verified:
                refusal = self._exchange(account)
                if refusal:
                    failures[account.key] = refusal
                    continue
                self._verified.add(memo)
                log.info("Verified workload identity", service_account=account.key)
            verified.add(account.key)
        return verified, failures

    def _exchange(self, account: Account) -> str:
        """One TokenRequest and one exchange; the refusal, or "" when a token was granted."""
        try:
            token = self.client.service_account_token(account.name, account.namespace, [FEDERATION_AUDIENCE])
            self.exchange.exchange(self.tenant_id, account.client_id, token)
        except TokenExchangeError as error:
            log.info("Token exchange refused", service_account=account.key, code=error.code)
            return str(error)
        except errors.ApiError as error:
            log.info("TokenRequest failed", service_account=account.key, error=str(error))
            return f"TokenRequest failed: {error}"
        return ""

    def _undo(self, key: str, selected: list[dict[str, Any]]) -> None:
        """Take back what this binding's migration wrote: account requests and owner labels."""
        self.owners.undo(key, selected)  # owners are read only for a binding that migrated
        for account in self.accounts.store.list():
            if _annotations(account).get(MIGRATED_BY_ANNOTATION) != key:
                continue
            metadata = account.get("metadata") or {}
            body = {"metadata": {"annotations": {IDENTITY_ANNOTATION: None, MIGRATED_BY_ANNOTATION: None}}}
            try:
                self.client.patch(SERVICE_ACCOUNT, str(metadata["name"]), body, str(metadata["namespace"]))
            except errors.NotFound:
                continue
            log.info("Withdrew a federated credential request", service_account=_key(account), binding=key)

    # --- status -----------------------------------------------------------------------------------

    def _report(self, binding: dict[str, Any], stage: Stage) -> None:
        """Set the condition on the stored binding (re-read: another reconciler writes its own
        condition there); an Event when the reason changes."""
        metadata = binding.get("metadata") or {}
        name, namespace = str(metadata["name"]), str(metadata["namespace"])
        changed: list[str] = []

        def attempt() -> None:
            fresh = self.client.get(AZURE_IDENTITY_BINDING, name, namespace)
            conditions = list((fresh.get("status") or {}).get("conditions") or [])
            before = get_condition(conditions, CONDITION_MIGRATION) or {}
            if not set_condition(conditions, CONDITION_MIGRATION, stage.status, stage.reason, stage.message):
                return
            fresh["status"] = {**(fresh.get("status") or {}), "conditions": conditions}
            self.client.update_status(AZURE_IDENTITY_BINDING, fresh)
            if before.get("reason") != stage.reason:
                changed.append(stage.reason)

        try:
            retry_on_conflict(attempt)
        except errors.NotFound:
            return
        if changed:
            kind: Literal["Normal", "Warning"] = (
                "Warning" if stage.status == "False" and stage.reason not in _PROGRESS else "Normal"
            )
            self.recorder.event(binding, kind, stage.reason, stage.message)
            log.info("Migration stage", binding=f"{namespace}/{name}", reason=stage.reason)

    def _clear(self, binding: dict[str, Any]) -> None:
        """Remove the condition once the migration is switched off and undone."""
        if get_condition((binding.get("status") or {}).get("conditions"), CONDITION_MIGRATION) is None:
            return
        metadata = binding.get("metadata") or {}

        def attempt() -> None:
            fresh = self.client.get(AZURE_IDENTITY_BINDING, str(metadata["name"]), str(metadata["namespace"]))
            conditions = [
                c
                for c in (fresh.get("status") or {}).get("conditions") or []
                if c.get("type") != CONDITION_MIGRATION
            ]
            fresh["status"] = {**(fresh.get("status") or {}), "conditions": conditions}
            self.client.update_status(AZURE_IDENTITY_BINDING, fresh)

        try:
            retry_on_conflict(attempt)
        except errors.NotFound:
            return


def _was_cut_over(binding: dict[str, Any]) -> bool:
    condition = get_condition((binding.get("status") or {}).get("conditions"), CONDITION_MIGRATION) or {}
    return condition.get("reason") in ("CutOver", "CuttingOver")


_PROGRESS = ("Federating", "Verifying", "CuttingOver", "NoPods")
