"""The identity reconcilers' options (the ``options`` block of the ``identity-assignment`` entry in
the manager config), parsed strictly: an unknown key, a wrong type or a value out of range fails
with one ``ConfigError`` line naming the key. Also the ``Kind`` values of the
aadpodidentity.k8s.io resources, built from their models. No I/O.

Example::

    reconcilers:
      identity-assignment:
        maxConcurrentReconciles: 8
        options:
          cloud: {subscriptionId: ..., credential: {kind: workload-identity}}
          forceNamespaced: false
          immutableIdentities: [00000000-0000-0000-0000-000000000000]   # clientIDs or resource IDs
          managerIdentities: [/subscriptions/.../userAssignedIdentities/nodewright]
          repairInterval: 180          # seconds between drift checks of each VM / scale set
          rejectedIdentityFirstRetry: 5  # seconds before an identity ARM refused is sent again,
          rejectedIdentityRetry: 600   # ... doubling up to this
          missingNodeAttempts: 6       # passes (same backoff) before a pod's object on a missing node goes
          maxIdentitiesPerRequest: 150
          batchWindow: 0.5             # seconds with no change at all before changed targets are updated
          batchMaxDelay: 2.0           # ... but no later than this after the first change
          writeConcurrency: 10         # AzureAssignedIdentity writes in flight per pass (MIC: 20)
          resolveIdentityInfo: true    # look up clientId/principalId of each AzureIdentity
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from nodewright.api.aadpodidentity.v1 import (
    AzureAssignedIdentity,
    AzureIdentity,
    AzureIdentityBinding,
    AzurePodIdentityException,
)
from nodewright.cloud.identity_updates import MAX_IDENTITIES_PER_REQUEST
from nodewright.controllers.cloud_access import cloud_block
from nodewright.controllers.identity.decisions import AssignmentPolicy
from nodewright.controllers.kinds import kind_of
from nodewright.runtime import ConfigError

__all__ = [
    "AZURE_ASSIGNED_IDENTITY",
    "AZURE_IDENTITY",
    "AZURE_IDENTITY_BINDING",
    "AZURE_POD_IDENTITY_EXCEPTION",
    "IdentityOptions",
    "parse_options",
]


AZURE_IDENTITY = kind_of(AzureIdentity)
AZURE_IDENTITY_BINDING = kind_of(AzureIdentityBinding)
AZURE_ASSIGNED_IDENTITY = kind_of(AzureAssignedIdentity)
AZURE_POD_IDENTITY_EXCEPTION = kind_of(AzurePodIdentityException)


@dataclass(frozen=True)
class IdentityOptions:
    """What the identity reconcilers are configured with (see the module docstring)."""

    cloud: Mapping[str, Any] = field(default_factory=dict)
    force_namespaced: bool = False
    immutable_identities: frozenset[str] = frozenset()
    manager_identities: frozenset[str] = frozenset()
    remove_unmarked_assignments: bool = False
    repair_interval: float = 180.0
    rejected_identity_retry: float = 600.0
    rejected_identity_first_retry: float = 5.0
    missing_node_attempts: int = 6
    max_identities_per_request: int = MAX_IDENTITIES_PER_REQUEST
    resolve_identity_info: bool = True
    batch_window: float = 0.5
    batch_max_delay: float = 2.0
    write_concurrency: int = 10

    @property
    def policy(self) -> AssignmentPolicy:
        return AssignmentPolicy(
            force_namespaced=self.force_namespaced,
            immutable_identities=self.immutable_identities,
            manager_identities=self.manager_identities,
            remove_unmarked_assignments=self.remove_unmarked_assignments,
            rejected_identity_retry=timedelta(seconds=self.rejected_identity_retry),
            rejected_identity_first_retry=timedelta(seconds=self.rejected_identity_first_retry),
            missing_node_attempts=self.missing_node_attempts,
        )


def _boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: expected a boolean, got {value!r}")
    return value


def _number(value: Any, path: str, minimum: float, *, exclusive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if value < minimum or (exclusive and value == minimum):
        relation = "greater than" if exclusive else "at least"
        raise ConfigError(f"{path}: expected a number {relation} {minimum:g}, got {value!r}")
    return float(value)


def _integer(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{path}: expected an integer of at least {minimum}, got {value!r}")
    return value


def _strings(value: Any, path: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{path}: expected a list of non-empty strings, got {value!r}")
    return frozenset(item.lower() for item in value)


def _seconds(value: Any, path: str) -> float:
    return _number(value, path, 0)


def _positive_seconds(value: Any, path: str) -> float:
    return _number(value, path, 0, exclusive=True)


def _count(value: Any, path: str) -> int:
    return _integer(value, path, 1)


def _identities_per_request(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IDENTITIES_PER_REQUEST:
        raise ConfigError(
            f"{path}: expected an integer from 1 to {MAX_IDENTITIES_PER_REQUEST}, got {value!r}"
        )
    return value


_Reader = Callable[[Any, str], Any]

_OPTIONS: dict[str, tuple[str, _Reader]] = {
    "cloud": ("cloud", cloud_block),
    "forceNamespaced": ("force_namespaced", _boolean),
    "removeUnmarkedAssignments": ("remove_unmarked_assignments", _boolean),
    "resolveIdentityInfo": ("resolve_identity_info", _boolean),
    "immutableIdentities": ("immutable_identities", _strings),
    "managerIdentities": ("manager_identities", _strings),
    "repairInterval": ("repair_interval", _positive_seconds),
    "writeConcurrency": ("write_concurrency", _count),
    "batchWindow": ("batch_window", _seconds),
    "batchMaxDelay": ("batch_max_delay", _seconds),
    "rejectedIdentityRetry": ("rejected_identity_retry", _seconds),
    "rejectedIdentityFirstRetry": ("rejected_identity_first_retry", _seconds),
    "missingNodeAttempts": ("missing_node_attempts", _count),
    "maxIdentitiesPerRequest": ("max_identities_per_request", _identities_per_request),
}
"""Each option key: the ``IdentityOptions`` field it sets, and the reader that checks its value."""


def parse_options(options: Mapping[str, Any], path: str = "options") -> IdentityOptions:
    """``IdentityOptions`` from a reconciler's options; ``ConfigError`` names the bad key."""
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key not in _OPTIONS:
            raise ConfigError(f"{path}.{key}: unknown key (known: {', '.join(sorted(_OPTIONS))})")
        name, read = _OPTIONS[key]
        values[name] = read(value, f"{path}.{key}")
    return IdentityOptions(**values)
