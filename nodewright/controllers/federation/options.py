"""The options of the ``workload-identity-federation`` reconciler, parsed strictly (an unknown key,
a wrong type or a missing issuer fails with one ``ConfigError`` line naming the key). No I/O.

Example::

    reconcilers:
      workload-identity-federation:
        options:
          cloud: {subscriptionId: ..., credential: {kind: workload-identity}}
          issuer: https://oidc.prod-aks.azure.com/<tenant>/<cluster>/   # the cluster's OIDC issuer
          tenantId: 00000000-0000-0000-0000-000000000000   # optional: also written on ServiceAccounts
          propagationDelay: 10   # seconds a new credential needs before tokens can be exchanged
          migration:             # shadow migration off pod identity, per AzureIdentityBinding
            enabled: true        # default false; needs tenantId
            authorityHost: login.microsoftonline.com   # where tokens are exchanged to verify
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodewright.cloud.entra import PUBLIC_AUTHORITY
from nodewright.controllers.cloud_access import cloud_block
from nodewright.runtime import ConfigError

__all__ = ["FederationOptions", "parse_options"]


@dataclass(frozen=True)
class FederationOptions:
    """See the module docstring."""

    issuer: str
    cloud: Mapping[str, Any] = field(default_factory=dict)
    tenant_id: str = ""
    propagation_delay: float = 10.0
    migration: bool = False
    authority_host: str = PUBLIC_AUTHORITY


def parse_options(options: Mapping[str, Any], path: str = "options") -> FederationOptions:
    values: dict[str, Any] = {}
    for key, value in options.items():
        where = f"{path}.{key}"
        if key == "cloud":
            values["cloud"] = cloud_block(value, where)
        elif key in ("issuer", "tenantId"):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
            values["issuer" if key == "issuer" else "tenant_id"] = value
        elif key == "propagationDelay":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{where}: expected a number of at least 0, got {value!r}")
            values["propagation_delay"] = float(value)
        elif key == "migration":
            values.update(_migration(value, where))
        else:
            known = "cloud, issuer, migration, propagationDelay, tenantId"
            raise ConfigError(f"{where}: unknown key (known: {known})")
    if "issuer" not in values:
        raise ConfigError(f"{path}.issuer: required (the cluster's OIDC issuer URL)")
    if values.get("migration") and not values.get("tenant_id"):
        raise ConfigError(f"{path}.tenantId: required when migration is enabled (tokens are exchanged there)")
    return FederationOptions(**values)


def _migration(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping")
    values: dict[str, Any] = {}
    for key, item in value.items():
        if key == "enabled":
            if not isinstance(item, bool):
                raise ConfigError(f"{path}.enabled: expected true or false, got {item!r}")
            values["migration"] = item
        elif key == "authorityHost":
            if not isinstance(item, str) or not item or "/" in item:
                raise ConfigError(f"{path}.authorityHost: expected a host name, got {item!r}")
            values["authority_host"] = item
        else:
            raise ConfigError(f"{path}.{key}: unknown key (known: authorityHost, enabled)")
    return values
