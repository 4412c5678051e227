"""Federated identity credentials through azure-mgmt-msi against the emulator (Azure's limits and
error codes), and the emulated Entra token endpoint judging client assertions against them."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.entra import ASSERTION_TYPE
from nodewright.cloud.emulator.federated_credentials import credentials_of
from nodewright.cloud.errors import CloudError, ConflictError, NotFoundError
from nodewright.cloud.msi import FEDERATION_AUDIENCE, FederatedCredential
from tests.cloud.helpers import cloud_for

ISSUER = "https://issuer.example"


def subject(name: str) -> str:
    return f"system:serviceaccount:default:{name}"


@pytest.fixture
def identity(arm_emulator: ArmEmulator) -> str:
    arm_emulator.estate.add_resource_group("identities")
    return arm_emulator.estate.add_identity("identities", "web")


def test_credentials_are_created_listed_updated_and_deleted(arm_emulator: ArmEmulator, identity: str) -> None:
    """The SDK's PUT, LIST and DELETE round-trip; a second PUT of the same name updates it."""
    service = cloud_for(arm_emulator).identities
    made = service.put_federated_credential(identity, "sa-web", issuer=ISSUER, subject=subject("web"))
    assert made == FederatedCredential("sa-web", ISSUER, subject("web"), (FEDERATION_AUDIENCE,))
    service.put_federated_credential(identity, "sa-web", issuer=ISSUER, subject=subject("web-2"))
    assert [c.subject for c in service.list_federated_credentials(identity)] == [subject("web-2")]
    service.delete_federated_credential(identity, "sa-web")
    service.delete_federated_credential(identity, "sa-web")  # already gone: not an error
    assert service.list_federated_credentials(identity) == []


def test_the_twenty_first_credential_is_refused(arm_emulator: ArmEmulator, identity: str) -> None:
    """Azure's limit of 20 per identity: the 21st create answers 400; updates of existing ones pass."""
    service = cloud_for(arm_emulator).identities
    for index in range(20):
        service.put_federated_credential(
            identity, f"sa-{index:02d}", issuer=ISSUER, subject=subject(str(index))
        )
    with pytest.raises(CloudError) as refused:
        service.put_federated_credential(identity, "sa-20", issuer=ISSUER, subject=subject("20"))
    assert refused.value.status_code == 400
    assert "maximum of 20" in str(refused.value)
    service.put_federated_credential(identity, "sa-00", issuer=ISSUER, subject=subject("again"))
    assert len(service.list_federated_credentials(identity)) == 20


def test_duplicate_issuer_and_subject_concurrent_writes_and_missing_identity(
    arm_emulator: ArmEmulator, identity: str
) -> None:
    """Issuer and subject are unique per identity (400); writes too close together answer 409
    ConcurrentFederatedIdentityCredentialsWritesForSingleManagedIdentity; an unknown identity 404."""
    service = cloud_for(arm_emulator).identities
    service.put_federated_credential(identity, "one", issuer=ISSUER, subject=subject("a"))
    with pytest.raises(CloudError) as duplicate:
        service.put_federated_credential(identity, "two", issuer=ISSUER, subject=subject("a"))
    assert duplicate.value.status_code == 400
    credentials_of(arm_emulator.state).write_window = 5.0
    with pytest.raises(ConflictError) as conflict:
        service.put_federated_credential(identity, "two", issuer=ISSUER, subject=subject("b"))
    assert conflict.value.code == "ConcurrentFederatedIdentityCredentialsWritesForSingleManagedIdentity"
    with pytest.raises(NotFoundError):
        service.list_federated_credentials(identity.replace("/web", "/ghost"))


# --- the token endpoint ----------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Signer:
    """An issuer's key pair, its JWKS, and assertions signed with it."""

    def __init__(self, kid: str = "k1") -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = kid

    def jwks(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        size = (numbers.n.bit_length() + 7) // 8
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "alg": "RS256",
                    "use": "sig",
                    "kid": self.kid,
                    "n": _b64(numbers.n.to_bytes(size, "big")),
                    "e": _b64(numbers.e.to_bytes(3, "big")),
                }
            ]
        }

    def assertion(
        self, sub: str, *, aud: str = FEDERATION_AUDIENCE, iss: str = ISSUER, ttl: float = 600
    ) -> str:
        now = int(time.time())
        header = _b64(json.dumps({"alg": "RS256", "kid": self.kid, "typ": "JWT"}).encode())
        payload = _b64(
            json.dumps({"iss": iss, "sub": sub, "aud": [aud], "iat": now, "exp": now + ttl}).encode()
        )
        signature = self.key.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{payload}.{_b64(signature)}"


def exchange(
    emulator: ArmEmulator, client_id: str, assertion: str, tenant: str | None = None
) -> tuple[int, dict[str, Any]]:
    form = urllib.parse.urlencode(
        {
            "grant_type": "client_credentials",
            "client_id": client_id,
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": assertion,
            "scope": "https://management.azure.com/.default",
        }
    ).encode()
    url = f"{emulator.endpoint}/{tenant or emulator.state.tenant_id}/oauth2/v2.0/token"
    context = ssl.create_default_context(cafile=str(emulator.ca_file))
    request = urllib.request.Request(url, data=form, method="POST")  # noqa: S310 - https, our loopback
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:  # noqa: S310 - our loopback
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_token_endpoint_grants_only_a_matching_signed_assertion(
    arm_emulator: ArmEmulator, identity: str
) -> None:
    """A signed assertion whose issuer, subject and audience match a credential gets a token;
    a wrong subject, a wrong audience, a foreign key, an expired assertion or an unknown client do
    not, each with Entra's error."""
    service = cloud_for(arm_emulator).identities
    service.put_federated_credential(identity, "sa-web", issuer=ISSUER, subject=subject("web"))
    client_id = str(service.get_identity(identity).client_id)
    signer = Signer()
    arm_emulator.entra.jwks_provider = signer.jwks
    status, body = exchange(arm_emulator, client_id, signer.assertion(subject("web")))
    assert status == 200, body
    assert body["token_type"] == "Bearer"
    assert body["access_token"]

    cases = {
        "wrong subject": (signer.assertion(subject("other")), "AADSTS70021"),
        "wrong audience": (signer.assertion(subject("web"), aud="api://other"), "AADSTS70021"),
        "wrong issuer": (signer.assertion(subject("web"), iss="https://elsewhere"), "AADSTS70021"),
        "foreign key": (Signer().assertion(subject("web")), "AADSTS700027"),
        "expired": (signer.assertion(subject("web"), ttl=-300), "AADSTS700024"),
    }
    for name, (assertion, code) in cases.items():
        status, body = exchange(arm_emulator, client_id, assertion)
        assert status >= 400, name
        assert code in body["error_description"], (name, body)
    status, body = exchange(
        arm_emulator, "00000000-0000-0000-0000-000000000000", signer.assertion(subject("web"))
    )
    assert "AADSTS700016" in body["error_description"]
    granted = [e for e in arm_emulator.entra.exchanges if e.granted]
    assert [(e.issuer, e.subject) for e in granted] == [(ISSUER, subject("web"))]


def test_token_endpoint_waits_for_propagation(arm_emulator: ArmEmulator, identity: str) -> None:
    """A credential written less than the propagation delay ago is not yet honoured."""
    service = cloud_for(arm_emulator).identities
    credentials_of(arm_emulator.state).propagation_delay = 1.5
    service.put_federated_credential(identity, "sa-web", issuer=ISSUER, subject=subject("web"))
    client_id = str(service.get_identity(identity).client_id)
    signer = Signer()
    arm_emulator.entra.jwks_provider = signer.jwks
    status, _ = exchange(arm_emulator, client_id, signer.assertion(subject("web")))
    assert status == 400
    time.sleep(1.6)  # the clock: the propagation delay passes
    status, _ = exchange(arm_emulator, client_id, signer.assertion(subject("web")))
    assert status == 200
