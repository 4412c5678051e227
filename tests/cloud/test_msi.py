"""IdentityService through the real azure-mgmt-msi client against the ARM emulator."""

from __future__ import annotations

import time

import pytest

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.errors import NotFoundError, ThrottledError
from tests.cloud.helpers import cloud_for

GROUP = "rg-identities"


def test_get_identity_returns_client_and_principal_ids(arm_emulator: ArmEmulator) -> None:
    """clientId, principalId and tenantId come from ARM; the ID key is lowercased."""
    arm_emulator.estate.add_resource_group(GROUP)
    identity_id = arm_emulator.estate.add_identity(GROUP, "Id-Web")
    document = arm_emulator.state.render(identity_id)
    assert document is not None
    cloud = cloud_for(arm_emulator)
    try:
        info = cloud.identities.get_identity(
            identity_id.upper().replace("/SUBSCRIPTIONS/", "/subscriptions/")
        )
    finally:
        cloud.close()
    assert info.id == identity_id.lower()
    assert info.client_id == document["properties"]["clientId"]
    assert info.principal_id == document["properties"]["principalId"]
    assert info.tenant_id == document["properties"]["tenantId"]


def test_missing_identity_is_not_found(arm_emulator: ArmEmulator) -> None:
    """A missing identity raises NotFoundError (callers treat it as not fatal)."""
    arm_emulator.estate.add_resource_group(GROUP)
    identity_id = arm_emulator.estate.add_identity(GROUP, "id-a").replace("id-a", "id-gone")
    cloud = cloud_for(arm_emulator)
    try:
        with pytest.raises(NotFoundError):
            cloud.identities.get_identity(identity_id)
    finally:
        cloud.close()


def test_throttled_identity_read_is_refused_until_the_deadline_then_succeeds(
    arm_emulator: ArmEmulator,
) -> None:
    """A 429 with Retry-After goes back to the caller (azure-core does not retry it); the caller's
    retry, made at once, is refused unsent (quiet, naming the time left); made at that time, it
    succeeds."""
    arm_emulator.estate.add_resource_group(GROUP)
    identity_id = arm_emulator.estate.add_identity(GROUP, "id-a")
    arm_emulator.faults.throttle("UserAssignedIdentities.get", times=1, retry_after=1)
    cloud = cloud_for(arm_emulator)
    try:
        with pytest.raises(ThrottledError):
            cloud.identities.get_identity(identity_id)
        with pytest.raises(ThrottledError) as held:
            cloud.identities.get_identity(identity_id)
        assert held.value.quiet
        assert held.value.retry_at is not None
        time.sleep(max(0.0, held.value.retry_at - time.monotonic()))
        assert cloud.identities.get_identity(identity_id).client_id
    finally:
        cloud.close()
    first, second = arm_emulator.requests.entries("UserAssignedIdentities.get")
    assert (first.status, second.status) == (429, 200)
    assert second.monotonic - first.monotonic >= 1.0
