"""The ``arm_emulator`` fixture starts a fresh, TLS-only emulator that the real SDK clients reach."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.sdk_clients import sdk_clients


def test_fixture_serves_https_with_its_own_ca(arm_emulator: ArmEmulator) -> None:
    """The endpoint is https on loopback and verifies against the written CA file only."""
    assert arm_emulator.endpoint.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=str(arm_emulator.ca_file))
    url = f"{arm_emulator.endpoint}/_emulator/state"
    with urllib.request.urlopen(url, context=context) as response:  # noqa: S310 - https to loopback
        assert response.status == 200


def test_fixture_rejects_clients_that_do_not_trust_the_ca(arm_emulator: ArmEmulator) -> None:
    """A default trust store does not accept the emulator's certificate: verification stays on."""
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{arm_emulator.endpoint}/_emulator/state")  # noqa: S310 - https to loopback


def test_fixture_state_is_fresh(arm_emulator: ArmEmulator) -> None:
    """Each test starts with no resource groups and an empty request log."""
    assert arm_emulator.estate.snapshot()["resourceGroups"] == []
    assert len(arm_emulator.requests) == 0


def test_sdk_reads_a_seeded_identity(arm_emulator: ArmEmulator) -> None:
    """The ManagedServiceIdentityClient reads an identity seeded through the estate builder."""
    arm_emulator.estate.add_resource_group("rg")
    arm_emulator.estate.add_identity("rg", "id-web")
    identity = sdk_clients(arm_emulator).identity.user_assigned_identities.get("rg", "id-web")
    assert identity.client_id
    assert identity.principal_id
    assert arm_emulator.requests.count("UserAssignedIdentities.get") == 1
