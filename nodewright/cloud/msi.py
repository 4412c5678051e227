"""User-assigned managed identities through azure-mgmt-msi.

Owns a user-assigned identity's GET, returned as ``IdentityInfo`` (client ID, principal ID, tenant
ID; the ID key lowercased, as ARO-HCP keys its identity map), and the identity's federated
identity credentials (list, create or update, delete), returned as ``FederatedCredential``. Does
I/O; raises ``NotFoundError`` for an identity or credential that does not exist and other
``CloudError``s otherwise (``ConflictError`` for concurrent credential writes on one identity,
which Azure refuses; ``ThrottledError`` once the SDK's own retries of 429 are spent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from azure.core.exceptions import AzureError
from azure.mgmt.msi import ManagedServiceIdentityClient

from nodewright.cloud.errors import translate_error
from nodewright.cloud.models import IdentityInfo
from nodewright.cloud.resource_ids import UserAssignedIdentityId, parse_user_assigned_identity_id
from nodewright.cloud.throttle import CallObserver, NullObserver, observe_call

__all__ = ["FEDERATION_AUDIENCE", "MAX_FEDERATED_CREDENTIALS", "FederatedCredential", "IdentityService"]

FEDERATION_AUDIENCE = "api://AzureADTokenExchange"
"""The audience Entra expects in a workload identity's assertion."""
MAX_FEDERATED_CREDENTIALS = 20
"""Azure's limit of federated identity credentials per user-assigned identity."""

T = TypeVar("T")


@dataclass(frozen=True)
class FederatedCredential:
    """One federated identity credential of a user-assigned identity."""

    name: str
    issuer: str
    subject: str
    audiences: tuple[str, ...] = (FEDERATION_AUDIENCE,)


def _credential_from_sdk(model: Any) -> FederatedCredential:
    return FederatedCredential(
        name=str(model.name),
        issuer=str(model.issuer or ""),
        subject=str(model.subject or ""),
        audiences=tuple(str(a) for a in (model.audiences or ())),
    )


def _identity_id(identity: str | UserAssignedIdentityId) -> UserAssignedIdentityId:
    return (
        identity
        if isinstance(identity, UserAssignedIdentityId)
        else parse_user_assigned_identity_id(identity)
    )


class IdentityService:
    """Reads user-assigned identities and manages their federated identity credentials."""

    def __init__(self, msi: ManagedServiceIdentityClient, *, observer: CallObserver | None = None) -> None:
        self._msi = msi
        self._observer: CallObserver = observer or NullObserver()

    def _call(self, operation: str, function: Callable[[], T]) -> T:
        with observe_call(self._observer, operation):
            try:
                return function()
            except AzureError as error:
                raise translate_error(error) from error

    def get_identity(self, identity: str | UserAssignedIdentityId) -> IdentityInfo:
        """GET the identity and return its client and principal IDs."""
        identity_id = _identity_id(identity)
        model = self._call(
            "msi.get_identity",
            lambda: self._msi.user_assigned_identities.get(identity_id.resource_group, identity_id.name),
        )
        return IdentityInfo(
            id=identity_id.key,
            client_id=model.client_id,
            principal_id=model.principal_id,
            tenant_id=model.tenant_id,
        )

    def list_federated_credentials(self, identity: str | UserAssignedIdentityId) -> list[FederatedCredential]:
        """Every federated identity credential of the identity (one paged LIST)."""
        identity_id = _identity_id(identity)
        return self._call(
            "msi.list_federated_credentials",
            lambda: [
                _credential_from_sdk(model)
                for model in self._msi.federated_identity_credentials.list(
                    identity_id.resource_group, identity_id.name
                )
            ],
        )

    def put_federated_credential(
        self,
        identity: str | UserAssignedIdentityId,
        name: str,
        *,
        issuer: str,
        subject: str,
        audiences: Sequence[str] = (FEDERATION_AUDIENCE,),
    ) -> FederatedCredential:
        """Create or update one credential (PUT)."""
        identity_id = _identity_id(identity)
        body = {"properties": {"issuer": issuer, "subject": subject, "audiences": list(audiences)}}
        model = self._call(
            "msi.put_federated_credential",
            lambda: self._msi.federated_identity_credentials.create_or_update(
                identity_id.resource_group, identity_id.name, name, body
            ),
        )
        return _credential_from_sdk(model)

    def delete_federated_credential(self, identity: str | UserAssignedIdentityId, name: str) -> None:
        """Delete one credential; a credential already gone is not an error."""
        identity_id = _identity_id(identity)
        self._call(
            "msi.delete_federated_credential",
            lambda: self._msi.federated_identity_credentials.delete(
                identity_id.resource_group, identity_id.name, name
            ),
        )
