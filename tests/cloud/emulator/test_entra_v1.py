"""Contract: Entra's v1 token endpoint (``/{tenant}/oauth2/token``, ADAL's, used by go-autorest
peers): a client-credentials grant with a secret answers v1's shape with its times as strings, and
a wrong tenant or a missing secret is refused."""

from __future__ import annotations

import time
import urllib.parse

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.raw_https import call


def _form(**fields: str) -> bytes:
    return urllib.parse.urlencode(fields).encode()


def test_client_secret_grant_answers_v1_shape(arm_emulator: ArmEmulator) -> None:
    tenant = arm_emulator.state.tenant_id
    answer = call(
        arm_emulator,
        "POST",
        f"/{tenant}/oauth2/token?api-version=1.0",
        _form(grant_type="client_credentials", client_id="cilium", client_secret="s", resource="https://rm/"),
    )
    assert answer.status == 200
    body = answer.body
    assert body["token_type"] == "Bearer"
    assert body["resource"] == "https://rm/"
    for key in ("expires_in", "ext_expires_in", "expires_on", "not_before"):
        assert isinstance(body[key], str), key
    assert int(body["expires_on"]) > time.time() + 3000
    assert body["access_token"].startswith("emulated.v1.cilium.")


def test_wrong_tenant_or_no_secret_is_refused(arm_emulator: ArmEmulator) -> None:
    tenant = arm_emulator.state.tenant_id
    other = call(
        arm_emulator,
        "POST",
        "/other-tenant/oauth2/token",
        _form(grant_type="client_credentials", client_id="c", client_secret="s"),
    )
    assert (other.status, other.body["error"]) == (400, "invalid_request")
    no_secret = call(
        arm_emulator, "POST", f"/{tenant}/oauth2/token", _form(grant_type="client_credentials", client_id="c")
    )
    assert (no_secret.status, no_secret.body["error"]) == (401, "invalid_client")
