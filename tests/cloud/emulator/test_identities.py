"""Contract: Microsoft.ManagedIdentity userAssignedIdentities through ManagedServiceIdentityClient."""

from __future__ import annotations

import uuid

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.mgmt.msi.models import Identity

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients, assert_round_trips


def test_get_identity_round_trips(arm_emulator: ArmEmulator, estate: Estate, clients: Clients) -> None:
    """GET returns clientId, principalId and tenantId as UUIDs, and the model keeps every field."""
    identity = clients.identity.user_assigned_identities.get(estate.group, "id-0")
    assert identity.id == estate.identity_ids[0]
    assert uuid.UUID(identity.client_id) != uuid.UUID(identity.principal_id)
    assert identity.tenant_id == arm_emulator.state.tenant_id
    assert_round_trips(identity, arm_emulator.state.render(estate.identity_ids[0]))


def test_create_get_delete_identity(estate: Estate, clients: Clients) -> None:
    """PUT creates (201) with generated IDs and keeps tags; DELETE removes; GET then raises 404."""
    operations = clients.identity.user_assigned_identities
    created = operations.create_or_update(
        estate.group, "id-new", Identity(location="eastus", tags={"team": "nodes"})
    )
    assert created.client_id
    assert created.tags == {"team": "nodes"}
    again = operations.create_or_update(estate.group, "id-new", Identity(location="eastus"))
    assert again.client_id == created.client_id
    operations.delete(estate.group, "id-new")
    with pytest.raises(ResourceNotFoundError) as raised:
        operations.get(estate.group, "id-new")
    assert raised.value.error is not None
    assert raised.value.error.code == "ResourceNotFound"


def test_missing_resource_group_is_resource_group_not_found(estate: Estate, clients: Clients) -> None:
    """A resource group that does not exist answers 404 ResourceGroupNotFound."""
    with pytest.raises(ResourceNotFoundError) as raised:
        clients.identity.user_assigned_identities.get("rg-missing", "id-0")
    assert raised.value.error is not None
    assert raised.value.error.code == "ResourceGroupNotFound"
