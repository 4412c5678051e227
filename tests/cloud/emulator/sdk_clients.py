"""Real Azure SDK clients wired to an emulator, for the contract tests: a static-token credential
and factories that pass the emulator's endpoint, scopes, CA file and a zero polling interval."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from azure.core.credentials import AccessToken, AccessTokenInfo, TokenRequestOptions
from azure.core.exceptions import HttpResponseError
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.msi import ManagedServiceIdentityClient
from azure.mgmt.network import NetworkManagementClient

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator


class StaticTokenCredential:
    """A TokenCredential (and SupportsTokenInfo) that always returns the same bearer token."""

    def __init__(self, token: str = "emulator-token") -> None:  # noqa: S107 - not a secret
        self._token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token, int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: TokenRequestOptions | None = None) -> AccessTokenInfo:
        return AccessTokenInfo(self._token, int(time.time()) + 3600)


@dataclass
class Clients:
    compute: ComputeManagementClient
    network: NetworkManagementClient
    identity: ManagedServiceIdentityClient


def sdk_clients(emulator: ArmEmulator, **options: Any) -> Clients:
    """The three management clients against ``emulator``; ``options`` override client kwargs
    (for example ``retry_total=0``)."""
    credential = StaticTokenCredential()
    kwargs = {**emulator.client_options(), "retry_backoff_factor": 0.01, **options}
    return Clients(
        compute=ComputeManagementClient(credential, DEFAULT_SUBSCRIPTION, **kwargs),
        network=NetworkManagementClient(credential, DEFAULT_SUBSCRIPTION, **kwargs),
        identity=ManagedServiceIdentityClient(credential, DEFAULT_SUBSCRIPTION, **kwargs),
    )


def error_message(error: HttpResponseError) -> str:
    """The ARM error message of a failed SDK call ('' when the body had none)."""
    return (error.error.message if error.error is not None else None) or ""


def assert_round_trips(model: Any, wire: dict[str, Any] | None) -> None:
    """The SDK model kept every field of the emulator's JSON (``wire``): nothing was lost in
    deserialization. Works for the generated MutableMapping models and for msrest models."""
    assert wire is not None
    if hasattr(model, "as_dict") and not hasattr(model, "serialize"):
        assert model.as_dict() == wire
    else:
        assert model.serialize(keep_readonly=True) == wire
