"""A minimal Microsoft Entra token endpoint for workload identity federation:
``POST /{tenant}/oauth2/v2.0/token`` with a client assertion (the client-credentials grant that
the Azure SDKs send for workload identity), served by the emulator without ARM's bearer check.

It grants a token only when, as Entra does for a user-assigned identity:

- ``client_id`` is the clientId of an emulated user-assigned identity and ``tenant`` the
  emulator's tenant;
- the assertion is a JWT signed (RS256 or ES256) by a key of the issuer's JWKS, which the
  emulator reads from ``jwks_provider`` (for a Kubernetes issuer: the API server's
  ``/openid/v1/jwks``), and is within its ``nbf``/``exp`` window;
- a federated identity credential on that identity has the assertion's ``iss`` as issuer, its
  ``sub`` as subject and one of its ``aud`` as audience, and was written at least the store's
  ``propagation_delay`` ago (changes take seconds to propagate in Azure).

The v1 endpoint, ``POST /{tenant}/oauth2/token`` (ADAL's, which go-autorest uses), grants the
client-credentials flow with a client secret for any client ID and non-empty secret in the
emulator's tenant (the emulator keeps no app registrations), for the ``resource`` asked, in v1's
shape: ``expires_in``, ``ext_expires_in``, ``expires_on``, ``not_before`` as strings. Its token
names the client (``emulated.v1.<client id>.<random>``), so the request log can tell callers apart.

Errors answer as Entra's OAuth errors (``error``, ``error_description`` with an AADSTS code).
Every exchange is kept in ``exchanges`` (issuer, subject, client ID, outcome) for tests.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

from nodewright.cloud.emulator.federated_credentials import credentials_of
from nodewright.cloud.emulator.state import EmulatorState

__all__ = ["ASSERTION_TYPE", "EntraTokenEndpoint", "Exchange", "TokenError", "is_token_path", "verify_jwt"]

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_TOKEN_PATH = re.compile(r"^/(?P<tenant>[^/]+)/oauth2/v2\.0/token/?$")
_V1_TOKEN_PATH = re.compile(r"^/(?P<tenant>[^/]+)/oauth2/token/?$")
_V1_LIFETIME = 3599
_CLOCK_SKEW = 60.0


class TokenError(Exception):
    """An OAuth error answer: HTTP status, ``error`` and ``error_description``."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}")
        self.status = status
        self.error = error
        self.description = description


@dataclass(frozen=True)
class Exchange:
    """One token request as the endpoint judged it."""

    client_id: str
    issuer: str
    subject: str
    granted: bool
    error: str = ""


def is_token_path(path: str) -> bool:
    return _TOKEN_PATH.match(path) is not None or _V1_TOKEN_PATH.match(path) is not None


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _integer(value: str) -> int:
    return int.from_bytes(_b64decode(value), "big")


def _verify_with(key: dict[str, Any], algorithm: str, signed: bytes, signature: bytes) -> bool:
    try:
        if algorithm == "RS256" and key.get("kty") == "RSA":
            public = rsa.RSAPublicNumbers(_integer(key["e"]), _integer(key["n"])).public_key()
            public.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            return True
        if algorithm == "ES256" and key.get("kty") == "EC":
            numbers = ec.EllipticCurvePublicNumbers(_integer(key["x"]), _integer(key["y"]), ec.SECP256R1())
            half = len(signature) // 2
            der = utils.encode_dss_signature(
                int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big")
            )
            numbers.public_key().verify(der, signed, ec.ECDSA(hashes.SHA256()))
            return True
    except (InvalidSignature, KeyError, ValueError):
        return False
    return False


def verify_jwt(token: str, jwks: dict[str, Any], now: float) -> dict[str, Any]:
    """The claims of a JWT whose signature a key of ``jwks`` verifies and that is valid at ``now``
    (a minute of skew); raises ``TokenError`` otherwise."""
    try:
        header_part, payload_part, signature_part = token.split(".")
        header = json.loads(_b64decode(header_part))
        claims = json.loads(_b64decode(payload_part))
        signature = _b64decode(signature_part)
    except ValueError as error:
        raise TokenError(400, "invalid_request", "AADSTS50027: Invalid JWT token: malformed.") from error
    algorithm = str(header.get("alg", ""))
    keys = [k for k in jwks.get("keys", []) if not header.get("kid") or k.get("kid") == header.get("kid")]
    signed = f"{header_part}.{payload_part}".encode()
    if not any(_verify_with(key, algorithm, signed, signature) for key in keys):
        raise TokenError(
            401, "invalid_client", "AADSTS700027: The client assertion's signature could not be verified."
        )
    expires, not_before = claims.get("exp"), claims.get("nbf", claims.get("iat"))
    if not isinstance(expires, (int, float)) or now > expires + _CLOCK_SKEW:
        raise TokenError(
            400, "invalid_client", "AADSTS700024: Client assertion is not within its valid time range."
        )
    if isinstance(not_before, (int, float)) and now + _CLOCK_SKEW < not_before:
        raise TokenError(
            400, "invalid_client", "AADSTS700024: Client assertion is not within its valid time range."
        )
    return dict(claims)


class EntraTokenEndpoint:
    """The token endpoint of one emulator (see the module docstring)."""

    def __init__(self, state: Callable[[], EmulatorState]) -> None:
        self._state = state
        self._lock = threading.Lock()
        self.jwks_provider: Callable[[], dict[str, Any]] | None = None
        self.exchanges: list[Exchange] = []

    def handle(self, path: str, raw_body: bytes) -> tuple[int, dict[str, Any]]:
        """Answer one token request: (status, JSON body)."""
        form = dict(urllib.parse.parse_qsl(raw_body.decode(errors="replace")))
        client_id = form.get("client_id", "")
        v1 = _V1_TOKEN_PATH.match(path)
        if v1 is not None:
            return self._handle_v1(v1.group("tenant"), form)
        match = _TOKEN_PATH.match(path)
        try:
            if match is None:
                raise TokenError(404, "invalid_request", "AADSTS90002: Unknown endpoint.")
            claims = self._grant(match.group("tenant"), form)
        except TokenError as error:
            self._note(Exchange(client_id, "", "", granted=False, error=error.description))
            return error.status, {"error": error.error, "error_description": error.description}
        self._note(Exchange(client_id, str(claims.get("iss")), str(claims.get("sub")), granted=True))
        token = f"emulated.{uuid.uuid4().hex}"
        return 200, {
            "token_type": "Bearer",
            "expires_in": 3599,
            "ext_expires_in": 3599,
            "access_token": token,
        }

    def _handle_v1(self, tenant: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The v1 client-credentials grant with a secret (see the module docstring)."""
        client_id = form.get("client_id", "")
        error: TokenError | None = None
        if tenant.lower() != self._state().tenant_id.lower():
            error = TokenError(400, "invalid_request", f"AADSTS90002: Tenant '{tenant}' not found.")
        elif form.get("grant_type") != "client_credentials" or not client_id:
            error = TokenError(
                400, "invalid_request", "AADSTS900144: A client credentials grant is required."
            )
        elif not form.get("client_secret"):
            error = TokenError(401, "invalid_client", "AADSTS7000215: Invalid client secret provided.")
        if error is not None:
            self._note(Exchange(client_id, "", "", granted=False, error=error.description))
            return error.status, {"error": error.error, "error_description": error.description}
        self._note(Exchange(client_id, "", "", granted=True))
        now = int(time.time())
        return 200, {
            "token_type": "Bearer",
            "expires_in": str(_V1_LIFETIME),
            "ext_expires_in": str(_V1_LIFETIME),
            "expires_on": str(now + _V1_LIFETIME),
            "not_before": str(now),
            "resource": form.get("resource", ""),
            "access_token": f"emulated.v1.{client_id}.{uuid.uuid4().hex}",
        }

    def _note(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def _grant(self, tenant: str, form: dict[str, str]) -> dict[str, Any]:
        state = self._state()
        if tenant.lower() != state.tenant_id.lower():
            raise TokenError(400, "invalid_request", f"AADSTS90002: Tenant '{tenant}' not found.")
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_assertion_type") != ASSERTION_TYPE
        ):
            raise TokenError(400, "invalid_request", "AADSTS900144: A client assertion grant is required.")
        if self.jwks_provider is None:
            raise TokenError(401, "invalid_client", "AADSTS700027: No signing keys are known for the issuer.")
        claims = verify_jwt(form.get("client_assertion", ""), self.jwks_provider(), time.time())
        with state.locked():
            identity_id = self._identity_of(state, form.get("client_id", ""))
            self._match_credential(state, identity_id, claims)
        return claims

    @staticmethod
    def _identity_of(state: EmulatorState, client_id: str) -> str:
        for key, identity in state.identities.items():
            if str(identity.properties.get("clientId", "")).lower() == client_id.lower() and client_id:
                return key
        raise TokenError(
            400,
            "unauthorized_client",
            f"AADSTS700016: Application with identifier '{client_id}' was not found in the directory.",
        )

    @staticmethod
    def _match_credential(state: EmulatorState, identity_id: str, claims: dict[str, Any]) -> None:
        store = credentials_of(state)
        audiences = claims.get("aud")
        audience_list = [audiences] if isinstance(audiences, str) else list(audiences or [])
        now = time.monotonic()
        for credential in store.of(identity_id).values():
            if (
                credential.issuer == claims.get("iss")
                and credential.subject == claims.get("sub")
                and any(audience in credential.audiences for audience in audience_list)
                and now - credential.written_at >= store.propagation_delay
            ):
                return
        raise TokenError(
            400,
            "invalid_request",
            "AADSTS70021: No matching federated identity record found for presented assertion. "
            f"Assertion Issuer: '{claims.get('iss')}'. Assertion Subject: '{claims.get('sub')}'. "
            f"Assertion Audience: '{','.join(str(a) for a in audience_list)}'.",
        )
