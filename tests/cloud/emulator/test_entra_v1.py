"""The emulator's Entra v1 token route (``POST /{tenant}/oauth2/token``, client credentials with a
secret), as ADAL and go-autorest's adal call it: held to the shape of Microsoft's v1 documentation
(numbers as strings, ``resource`` echoed), with Entra's OAuth errors, over plain HTTPS."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.raw_https import call

CLIENT_ID = "5a7c1d3e-6f7a-4b8c-9d0e-1f2a3b4c5d6e"
SECRET = "peer-secret"


def token_request(
    emulator: ArmEmulator, form: dict[str, str], tenant: str | None = None
) -> tuple[int, dict[str, Any]]:
    """POST the form to the v1 token route (as adal does: form-encoded, no bearer token)."""
    url = f"{emulator.endpoint}/{tenant or emulator.state.tenant_id}/oauth2/token?api-version=1.0"
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")  # noqa: S310 - https, our loopback
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    context = ssl.create_default_context(cafile=str(emulator.ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:  # noqa: S310 - our loopback
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def client_credentials(emulator: ArmEmulator, **changes: str) -> dict[str, str]:
    form = {
        "grant_type": "client_credentials",
        "client_id": CLIENT_ID,
        "client_secret": SECRET,
        "resource": emulator.endpoint + "/",
    }
    form.update(changes)
    return {key: value for key, value in form.items() if value != "-"}


def test_a_registered_application_gets_a_v1_token_that_arm_accepts(arm_emulator: ArmEmulator) -> None:
    """A registered client with its secret gets a token in v1's shape (every number a string of
    seconds, the resource echoed), and its ARM calls are attributed to it through the token."""
    arm_emulator.entra.register_application(CLIENT_ID, SECRET)
    before = int(time.time())
    status, body = token_request(arm_emulator, client_credentials(arm_emulator))
    assert status == 200, body
    assert set(body) == {
        "token_type",
        "expires_in",
        "ext_expires_in",
        "expires_on",
        "not_before",
        "resource",
        "access_token",
    }
    assert body["token_type"] == "Bearer"
    assert body["resource"] == arm_emulator.endpoint + "/"
    for field in ("expires_in", "ext_expires_in", "expires_on", "not_before"):
        assert isinstance(body[field], str), field
        assert body[field].isdigit(), field
    assert int(body["expires_in"]) == 3599
    assert before <= int(body["not_before"]) <= int(time.time())
    assert int(body["expires_on"]) == int(body["not_before"]) + int(body["expires_in"])
    assert arm_emulator.entra.client_of(body["access_token"]) == CLIENT_ID

    arm_emulator.estate.add_resource_group("rg-peer")
    path = (
        f"/subscriptions/{arm_emulator.estate.subscription}/resourceGroups/rg-peer"
        "/providers/Microsoft.Compute/virtualMachines?api-version=2024-07-01"
    )
    assert call(arm_emulator, "GET", path, token=body["access_token"]).status == 200
    [recorded] = arm_emulator.requests.entries()
    assert arm_emulator.entra.client_of(recorded.bearer_token) == CLIENT_ID
    assert arm_emulator.entra.client_of("some-other-token") is None


REFUSALS = [
    pytest.param(
        {"client_secret": "wrong"}, None, (401, "invalid_client", "AADSTS7000215"), id="wrong-secret"
    ),
    pytest.param(
        {"client_id": "00000000-0000-0000-0000-000000000000"},
        None,
        (400, "unauthorized_client", "AADSTS700016"),
        id="unknown-client",
    ),
    pytest.param({}, "another-tenant", (400, "invalid_request", "AADSTS90002"), id="unknown-tenant"),
    pytest.param({"resource": "-"}, None, (400, "invalid_request", "AADSTS900144"), id="no-resource"),
    pytest.param({"client_secret": "-"}, None, (400, "invalid_request", "AADSTS900144"), id="no-secret"),
    pytest.param(
        {"resource": "https://vault.azure.net"},
        None,
        (400, "invalid_resource", "AADSTS500011"),
        id="another-resource",
    ),
    pytest.param(
        {"grant_type": "password"}, None, (400, "unsupported_grant_type", "AADSTS70003"), id="other-grant"
    ),
]


@pytest.mark.parametrize(("changes", "tenant", "expected"), REFUSALS)
def test_a_v1_request_entra_would_refuse_gets_its_oauth_error(
    arm_emulator: ArmEmulator, changes: dict[str, str], tenant: str | None, expected: tuple[int, str, str]
) -> None:
    """Each refusal answers Entra's OAuth error (``error``, ``error_description`` with the AADSTS
    code) and grants no token."""
    arm_emulator.entra.register_application(CLIENT_ID, SECRET)
    answer_status, body = token_request(arm_emulator, client_credentials(arm_emulator, **changes), tenant)
    status, error, code = expected
    assert (answer_status, body["error"]) == (status, error), body
    assert body["error_description"].startswith(code + ":")
    assert "access_token" not in body
    assert not any(exchange.granted for exchange in arm_emulator.entra.exchanges)
