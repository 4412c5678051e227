"""Settings for reaching Azure Resource Manager, and the credentials they describe.

Owns ``CloudSettings`` (subscription, ARM endpoint and token scope, credential kind, azure-core
retry settings, LRO polling interval, CA bundle, mutation rate limit, the longest pacing wait,
request budget reserve, per-target backoff, azure-core HTTP logging) and ``build_credential``.
``StaticTokenCredential`` hands a fixed bearer token to azure-core, for the local ARM emulator.
TLS verification is never turned off: an ``http://`` endpoint is refused, and ``ca_bundle`` only
adds trust. The ``factory`` turns these settings into SDK clients.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from azure.core.credentials import AccessToken, AccessTokenInfo, TokenCredential, TokenRequestOptions
from azure.identity import DefaultAzureCredential, ManagedIdentityCredential, WorkloadIdentityCredential

PUBLIC_CLOUD_ENDPOINT = "https://management.azure.com"


class CredentialKind(enum.Enum):
    """How the operator authenticates to ARM."""

    WORKLOAD_IDENTITY = "workload-identity"
    MANAGED_IDENTITY = "managed-identity"
    DEFAULT = "default"
    STATIC_TOKEN = "static-token"  # noqa: S105 - a credential kind, not a secret


@dataclass(frozen=True)
class CredentialSettings:
    """Which credential to build; ``client_id``/``tenant_id``/``token_file`` fall back to the
    ``AZURE_*`` environment variables azure-identity reads."""

    kind: CredentialKind = CredentialKind.DEFAULT
    client_id: str | None = None
    tenant_id: str | None = None
    token_file: str | None = None
    static_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class CloudSettings:
    """Everything the factory needs to build the Azure SDK clients."""

    subscription_id: str
    arm_endpoint: str = PUBLIC_CLOUD_ENDPOINT
    credential_scope: str | None = None
    credential: CredentialSettings = field(default_factory=CredentialSettings)
    retry_total: int = 3
    retry_backoff_factor: float = 0.8
    retry_backoff_max: float = 60.0
    polling_interval: float = 5.0
    """Seconds between polls of a long-running operation when ARM sends no ``Retry-After`` (when
    it does, its value). azure-core's own default is 30 s, which made every IPAM write last 30 s
    at least while a worker waited; the operation tracker's polls are reads, capped at a share of
    the reads budget however many operations run, so a short interval costs little."""
    ca_bundle: str | None = None
    mutation_qps: float = 10.0
    mutation_burst: int = 5
    pacing_max_wait_seconds: float = 1.0
    connection_timeout: float = 30.0
    read_timeout: float = 120.0
    budget_reserve_fraction: float = 0.1
    backoff_initial_seconds: float = 5.0
    backoff_max_seconds: float = 60.0
    terminal_backoff_initial_seconds: float = 2.0
    terminal_backoff_max_seconds: float = 120.0
    http_logging: bool = False

    def __post_init__(self) -> None:
        if not self.arm_endpoint.lower().startswith("https://"):
            raise ValueError(f"ARM endpoint must use https (TLS is never turned off): {self.arm_endpoint!r}")
        if not self.subscription_id:
            raise ValueError("subscription_id is required")

    @property
    def endpoint(self) -> str:
        """The ARM endpoint without a trailing slash."""
        return self.arm_endpoint.rstrip("/")

    @property
    def scope(self) -> str:
        """The token scope: configured, else ``<endpoint>/.default``."""
        return self.credential_scope or f"{self.endpoint}/.default"

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments every SDK client takes: retries, polling, TLS trust, timeouts."""
        options: dict[str, Any] = {
            "retry_total": self.retry_total,
            # One retry layer per failure kind: azure-core retries transport failures only, and
            # of reads only (factory.ReadRetryPolicy); 429, 5xx and failed operations go back to
            # the work queue and the per-target backoff.
            "retry_status": 0,
            "retry_backoff_factor": self.retry_backoff_factor,
            "retry_backoff_max": self.retry_backoff_max,
            "polling_interval": self.polling_interval,
            "credential_scopes": [self.scope],
            "connection_timeout": self.connection_timeout,
            "read_timeout": self.read_timeout,
        }
        if self.ca_bundle is not None:
            options["connection_verify"] = self.ca_bundle
        return options


class StaticTokenCredential:
    """A TokenCredential that returns one fixed bearer token (for the local ARM emulator)."""

    def __init__(self, token: str, lifetime_seconds: int = 24 * 3600) -> None:
        if not token:
            raise ValueError("a static token must not be empty")
        self._token = token
        self._lifetime_seconds = lifetime_seconds

    def get_token(
        self,
        *scopes: str,  # noqa: ARG002 - one token serves every scope
        claims: str | None = None,  # noqa: ARG002
        tenant_id: str | None = None,  # noqa: ARG002
        enable_cae: bool = False,  # noqa: ARG002
        **kwargs: Any,  # noqa: ARG002
    ) -> AccessToken:
        return AccessToken(self._token, int(time.time()) + self._lifetime_seconds)

    def get_token_info(
        self,
        *scopes: str,  # noqa: ARG002 - one token serves every scope
        options: TokenRequestOptions | None = None,  # noqa: ARG002
    ) -> AccessTokenInfo:
        return AccessTokenInfo(self._token, int(time.time()) + self._lifetime_seconds)

    def close(self) -> None:
        return None

    def __enter__(self) -> StaticTokenCredential:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


def build_credential(settings: CredentialSettings) -> TokenCredential:
    """The azure-identity credential the settings name (the static token needs no network)."""
    if settings.kind is CredentialKind.STATIC_TOKEN:
        if not settings.static_token:
            raise ValueError("static-token credential needs static_token")
        return StaticTokenCredential(settings.static_token)
    if settings.kind is CredentialKind.WORKLOAD_IDENTITY:
        return WorkloadIdentityCredential(
            tenant_id=settings.tenant_id, client_id=settings.client_id, token_file_path=settings.token_file
        )
    if settings.kind is CredentialKind.MANAGED_IDENTITY:
        if settings.client_id:
            return ManagedIdentityCredential(client_id=settings.client_id)
        return ManagedIdentityCredential()
    return DefaultAzureCredential(managed_identity_client_id=settings.client_id)
