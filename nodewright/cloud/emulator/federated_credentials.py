"""Federated identity credentials (``Microsoft.ManagedIdentity/userAssignedIdentities/
federatedIdentityCredentials``): create or update, get, list and delete, with the limits and
errors Azure documents and its users report:

- at most 20 credentials per identity (the 21st create answers 400 BadRequest; Azure's documents
  give the limit, the message here is ours);
- issuer and subject together unique on one identity (400 BadRequest);
- exactly one audience; a name of 3 to 120 letters, digits, ``-`` and ``_``, starting with a
  letter or digit (400 BadRequest);
- concurrent writes under one identity answer 409
  ``ConcurrentFederatedIdentityCredentialsWritesForSingleManagedIdentity`` (as Bicep and Terraform
  users hit it); the emulator counts two writes to one identity closer than
  ``write_window(state)`` seconds as concurrent (0, never, by default);
- an unknown parent identity answers 404 ResourceNotFound.

Credentials live beside the state (``credentials_of``), so ``ArmEmulator.reset`` drops them with
it; deleting an identity leaves its credentials unreachable, as in Azure. Each credential records
when it was written, so the token endpoint (``entra``) can model propagation.
"""

from __future__ import annotations

import re
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.emulator.errors import ArmError, ErrorCode
from nodewright.cloud.emulator.routing import ArmRequest, ArmResponse, Router
from nodewright.cloud.emulator.state import EmulatorState

__all__ = [
    "CONCURRENT_WRITES_CODE",
    "MAX_CREDENTIALS_PER_IDENTITY",
    "Credential",
    "CredentialStore",
    "credentials_of",
    "register",
]

MAX_CREDENTIALS_PER_IDENTITY = 20
CONCURRENT_WRITES_CODE = "ConcurrentFederatedIdentityCredentialsWritesForSingleManagedIdentity"
_TYPE = "Microsoft.ManagedIdentity/userAssignedIdentities/federatedIdentityCredentials"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{2,119}$")


@dataclass
class Credential:
    """One stored credential and the monotonic time of its last write."""

    document: dict[str, Any]
    written_at: float

    @property
    def issuer(self) -> str:
        return str(self.document["properties"]["issuer"])

    @property
    def subject(self) -> str:
        return str(self.document["properties"]["subject"])

    @property
    def audiences(self) -> list[str]:
        return [str(item) for item in self.document["properties"]["audiences"]]


@dataclass
class CredentialStore:
    """Credentials by lowercased identity ID, then by lowercased credential name."""

    by_identity: dict[str, dict[str, Credential]] = field(default_factory=dict)
    last_write: dict[str, float] = field(default_factory=dict)
    write_window: float = 0.0
    propagation_delay: float = 0.0

    def of(self, identity_id: str) -> dict[str, Credential]:
        return self.by_identity.setdefault(identity_id.lower(), {})


_STORES: weakref.WeakKeyDictionary[EmulatorState, CredentialStore] = weakref.WeakKeyDictionary()


def credentials_of(state: EmulatorState) -> CredentialStore:
    """The credential store of one emulator state (created empty on first use)."""
    store = _STORES.get(state)
    if store is None:
        store = _STORES[state] = CredentialStore()
    return store


def _identity_id(request: ArmRequest) -> str:
    return request.resource_id(
        "Microsoft.ManagedIdentity", "userAssignedIdentities", request.parameters["resourceName"]
    )


def _require_identity(state: EmulatorState, request: ArmRequest) -> str:
    group = request.resource_group(state)
    identity_id = _identity_id(request)
    if state.identities.get(identity_id.lower()) is None:
        raise ArmError.resource_not_found(
            "Microsoft.ManagedIdentity/userAssignedIdentities", request.parameters["resourceName"], group.name
        )
    return identity_id


def _validated_properties(name: str, body: dict[str, Any]) -> dict[str, Any]:
    if not _NAME.match(name):
        raise ArmError(
            400,
            ErrorCode.BAD_REQUEST,
            f"The federated identity credential name '{name}' is invalid: use 3 to 120 letters, digits, "
            "'-' or '_', starting with a letter or digit.",
        )
    properties = body.get("properties")
    if not isinstance(properties, dict):
        raise ArmError(400, ErrorCode.BAD_REQUEST, "The request must have 'properties'.")
    issuer, subject, audiences = (
        properties.get("issuer"),
        properties.get("subject"),
        properties.get("audiences"),
    )
    if not isinstance(issuer, str) or not issuer or not isinstance(subject, str) or not subject:
        raise ArmError(400, ErrorCode.BAD_REQUEST, "Both 'issuer' and 'subject' are required.")
    if not isinstance(audiences, list) or len(audiences) != 1 or not isinstance(audiences[0], str):
        raise ArmError(400, ErrorCode.BAD_REQUEST, "'audiences' must contain exactly one value.")
    return {"issuer": issuer, "subject": subject, "audiences": list(audiences)}


def _check_write(store: CredentialStore, identity_id: str) -> None:
    now = time.monotonic()
    last = store.last_write.get(identity_id.lower())
    if store.write_window > 0 and last is not None and now - last < store.write_window:
        raise ArmError(
            409,
            CONCURRENT_WRITES_CODE,
            f"Too many Federated Identity Credentials are written concurrently for the managed identity "
            f"'{identity_id}'. Concurrent Federated Identity Credentials writes under the same managed "
            "identity are not supported.",
        )
    store.last_write[identity_id.lower()] = now


def create_or_update(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    identity_id = _require_identity(state, request)
    name = request.parameters["federatedIdentityCredentialResourceName"]
    properties = _validated_properties(name, request.json_object())
    store = credentials_of(state)
    existing = store.of(identity_id)
    for key, other in existing.items():
        if key != name.lower() and (other.issuer, other.subject) == (
            properties["issuer"],
            properties["subject"],
        ):
            raise ArmError(
                400,
                ErrorCode.BAD_REQUEST,
                f"A federated identity credential with issuer '{properties['issuer']}' and subject "
                f"'{properties['subject']}' already exists on this identity ('{other.document['name']}').",
            )
    if name.lower() not in existing and len(existing) >= MAX_CREDENTIALS_PER_IDENTITY:
        raise ArmError(
            400,
            ErrorCode.BAD_REQUEST,
            f"The managed identity '{identity_id}' already has the maximum of "
            f"{MAX_CREDENTIALS_PER_IDENTITY} federated identity credentials.",
        )
    _check_write(store, identity_id)
    created = name.lower() not in existing
    document = {
        "id": f"{identity_id}/federatedIdentityCredentials/{name}",
        "name": name,
        "type": _TYPE,
        "properties": properties,
    }
    existing[name.lower()] = Credential(document, time.monotonic())
    return ArmResponse(201 if created else 200, dict(document))


def get(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    identity_id = _require_identity(state, request)
    name = request.parameters["federatedIdentityCredentialResourceName"]
    found = credentials_of(state).of(identity_id).get(name.lower())
    if found is None:
        raise ArmError(
            404,
            ErrorCode.NOT_FOUND,
            f"The federated identity credential '{name}' was not found on '{identity_id}'.",
        )
    return ArmResponse(200, dict(found.document))


def list_credentials(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    identity_id = _require_identity(state, request)
    values = [dict(credential.document) for credential in credentials_of(state).of(identity_id).values()]
    return ArmResponse(200, {"value": values})


def delete(state: EmulatorState, request: ArmRequest) -> ArmResponse:
    identity_id = _require_identity(state, request)
    name = request.parameters["federatedIdentityCredentialResourceName"]
    store = credentials_of(state)
    credentials = store.of(identity_id)
    if name.lower() not in credentials:
        return ArmResponse(204)
    _check_write(store, identity_id)
    del credentials[name.lower()]
    return ArmResponse(200)


def register(router: Router) -> None:
    base = (
        "/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/"
        "Microsoft.ManagedIdentity/userAssignedIdentities/{resourceName}/federatedIdentityCredentials"
    )
    item = base + "/{federatedIdentityCredentialResourceName}"
    router.add("GET", base, "FederatedIdentityCredentials.list", list_credentials)
    router.add("GET", item, "FederatedIdentityCredentials.get", get)
    router.add("PUT", item, "FederatedIdentityCredentials.create_or_update", create_or_update)
    router.add("DELETE", item, "FederatedIdentityCredentials.delete", delete)
