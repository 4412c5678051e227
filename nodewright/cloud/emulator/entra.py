"""A minimal Microsoft Entra token endpoint, served by the emulator without ARM's bearer check:

- ``POST /{tenant}/oauth2/v2.0/token`` with a client assertion (the client-credentials grant that
  the Azure SDKs send for workload identity);
- ``POST /{tenant}/oauth2/token``, Entra's v1 (ADAL) client-credentials grant with a client
  secret and a ``resource``, for peers built on go-autorest's adal such as aad-pod-identity's
  MIC: an application is registered with :meth:`EntraTokenEndpoint.register_application` and the
  answer has v1's shape (``expires_in``, ``ext_expires_in``, ``expires_on``, ``not_before`` as
  strings of seconds, ``resource`` echoed), as Microsoft's v1 client-credentials documentation
  shows it. ``resource`` must name the emulator (its endpoint, with or without the trailing
  slash). :meth:`EntraTokenEndpoint.client_of` tells which application a token was issued to, so
  the request log can be split by caller.

The v2 route grants a token only when, as Entra does for a user-assigned identity:

- ``client_id`` is the clientId of an emulated user-assigned identity and ``tenant`` the
  emulator's tenant;
- the assertion is a JWT signed (RS256 or ES256) by a key of the issuer's JWKS, which the
  emulator reads from ``jwks_provider`` (for a Kubernetes issuer: the API server's
  ``/openid/v1/jwks``), and is within its ``nbf``/``exp`` window;
- a federated identity credential on that identity has the assertion's ``iss`` as issuer, its
  ``sub`` as subject and one of its ``aud`` as audience, and was written at least the store's
  ``propagation_delay`` ago (changes take seconds to propagate in Azure).

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

__all__ = [
    "ASSERTION_TYPE",
    "TOKEN_LIFETIME",
    "EntraTokenEndpoint",
    "Exchange",
    "TokenError",
    "is_token_path",
    "verify_jwt",
]

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_TOKEN_PATH = re.compile(r"^/(?P<tenant>[^/]+)/oauth2/v2\.0/token/?$")
_V1_TOKEN_PATH = re.compile(r"^/(?P<tenant>[^/]+)/oauth2/token/?$")
TOKEN_LIFETIME = 3599
"""Seconds a granted token is valid (v1 and v2 alike), as Entra's documented examples show."""
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
    """Whether ``path`` is one of Entra's token routes (v2 or v1)."""
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
        self.resource_endpoint: Callable[[], str] = lambda: ""
        """The emulator's endpoint: the one ``resource`` the v1 route grants tokens for."""
        self.exchanges: list[Exchange] = []
        self._applications: dict[str, str] = {}  # client ID (lowercased) -> secret
        self._issued: dict[str, str] = {}  # access token -> client ID

    def register_application(self, client_id: str, secret: str) -> None:
        """Register a confidential client (an app registration with a client secret) that the v1
        route grants tokens to. Side effect: replaces an earlier secret of the same client."""
        with self._lock:
            self._applications[client_id.lower()] = secret

    def client_of(self, token: str | None) -> str | None:
        """The client ID a token was issued to by either route, else None."""
        with self._lock:
            return self._issued.get(token or "")

    def _issue(self, client_id: str) -> str:
        token = f"emulated.{uuid.uuid4().hex}"
        with self._lock:
            self._issued[token] = client_id
        return token

    def handle(self, path: str, raw_body: bytes) -> tuple[int, dict[str, Any]]:
        """Answer one token request: (status, JSON body)."""
        form = dict(urllib.parse.parse_qsl(raw_body.decode(errors="replace")))
        if _V1_TOKEN_PATH.match(path):
            return self._handle_v1(path, form)
        match = _TOKEN_PATH.match(path)
        client_id = form.get("client_id", "")
        try:
            if match is None:
                raise TokenError(404, "invalid_request", "AADSTS90002: Unknown endpoint.")
            claims = self._grant(match.group("tenant"), form)
        except TokenError as error:
            self._note(Exchange(client_id, "", "", granted=False, error=error.description))
            return error.status, {"error": error.error, "error_description": error.description}
        self._note(Exchange(client_id, str(claims.get("iss")), str(claims.get("sub")), granted=True))
        return 200, {
            "token_type": "Bearer",
            "expires_in": TOKEN_LIFETIME,
            "ext_expires_in": TOKEN_LIFETIME,
            "access_token": self._issue(client_id),
        }

    def _handle_v1(self, path: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The v1 client-credentials grant with a secret; numbers as strings, as v1 sends them."""
        client_id = form.get("client_id", "")
        match = _V1_TOKEN_PATH.match(path)
        try:
            if match is None:
                raise TokenError(404, "invalid_request", "AADSTS90002: Unknown endpoint.")
            resource = self._grant_v1(match.group("tenant"), form)
        except TokenError as error:
            self._note(Exchange(client_id, "", "", granted=False, error=error.description))
            return error.status, {"error": error.error, "error_description": error.description}
        self._note(Exchange(client_id, "", "", granted=True))
        now = int(time.time())
        return 200, {
            "token_type": "Bearer",
            "expires_in": str(TOKEN_LIFETIME),
            "ext_expires_in": str(TOKEN_LIFETIME),
            "expires_on": str(now + TOKEN_LIFETIME),
            "not_before": str(now),
            "resource": resource,
            "access_token": self._issue(client_id),
        }

    def _grant_v1(self, tenant: str, form: dict[str, str]) -> str:
        """The resource a v1 client-credentials request may have a token for; raises ``TokenError``."""
        if tenant.lower() != self._state().tenant_id.lower():
            raise TokenError(400, "invalid_request", f"AADSTS90002: Tenant '{tenant}' not found.")
        if form.get("grant_type") != "client_credentials":
            raise TokenError(
                400, "unsupported_grant_type", "AADSTS70003: The app requested an unsupported grant type."
            )
        for parameter in ("client_id", "client_secret", "resource"):
            if not form.get(parameter):
                raise TokenError(
                    400,
                    "invalid_request",
                    f"AADSTS900144: The request body must contain the following parameter: '{parameter}'.",
                )
        client_id = form["client_id"]
        with self._lock:
            secret = self._applications.get(client_id.lower())
        if secret is None:
            raise TokenError(
                400,
                "unauthorized_client",
                f"AADSTS700016: Application with identifier '{client_id}' was not found in the directory.",
            )
        if form["client_secret"] != secret:
            raise TokenError(401, "invalid_client", "AADSTS7000215: Invalid client secret provided.")
        resource = form["resource"]
        endpoint = self.resource_endpoint().rstrip("/").lower()
        if endpoint and resource.rstrip("/").lower() != endpoint:
            raise TokenError(
                400,
                "invalid_resource",
                f"AADSTS500011: The resource principal named {resource} was not found in the tenant.",
            )
        return resource

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
