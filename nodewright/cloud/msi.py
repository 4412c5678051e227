"""User-assigned managed identities through azure-mgmt-msi.

Owns one read: a user-assigned identity's GET, returned as ``IdentityInfo`` (client ID,
principal ID, tenant ID; the ID key lowercased, as ARO-HCP keys its identity map). Does I/O;
raises ``NotFoundError`` for an identity that does not exist (callers treat that as not fatal)
and other ``CloudError``s otherwise.
"""

from __future__ import annotations

from azure.core.exceptions import AzureError
from azure.mgmt.msi import ManagedServiceIdentityClient

from nodewright.cloud.errors import translate_error
from nodewright.cloud.models import IdentityInfo
from nodewright.cloud.resource_ids import UserAssignedIdentityId, parse_user_assigned_identity_id
from nodewright.cloud.throttle import CallObserver, NullObserver, observe_call


class IdentityService:
    """Reads user-assigned identities."""

    def __init__(self, msi: ManagedServiceIdentityClient, *, observer: CallObserver | None = None) -> None:
        self._msi = msi
        self._observer: CallObserver = observer or NullObserver()

    def get_identity(self, identity: str | UserAssignedIdentityId) -> IdentityInfo:
        """GET the identity and return its client and principal IDs."""
        identity_id = (
            identity
            if isinstance(identity, UserAssignedIdentityId)
            else parse_user_assigned_identity_id(identity)
        )
        with observe_call(self._observer, "msi.get_identity"):
            try:
                model = self._msi.user_assigned_identities.get(identity_id.resource_group, identity_id.name)
            except AzureError as error:
                raise translate_error(error) from error
        return IdentityInfo(
            id=identity_id.key,
            client_id=model.client_id,
            principal_id=model.principal_id,
            tenant_id=model.tenant_id,
        )
