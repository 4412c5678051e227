"""The ``node-image`` reconciler's options, parsed strictly (unknown keys and wrong types fail
with one line naming the key, as ``ConfigError``).

Example::

    reconcilers:
      node-image:
        options:
          cloud: {subscriptionId: ..., credential: {kind: workload-identity}}
          nodeLabelSelector: "kubernetes.azure.com/managed=false"
          joinTimeoutSeconds: 1800
          leaveTimeoutSeconds: 60
          drainTimeoutSeconds: 600
          nodeNetworkConfigNamespace: kube-system   # "" turns the heir IP-pool gate off
          heirIdentityGate: true                    # false: no AzureAssignedIdentity informer

The ``cloud`` block is read by ``nodewright.controllers.cloud_access``; everything else here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from nodewright.controllers.node_image.grouping import RolloutTimeouts
from nodewright.runtime import ConfigError, label_selector_matcher

__all__ = ["NodeImageSettings", "parse_options"]


@dataclass(frozen=True)
class NodeImageSettings:
    """How the three reconcilers behave. Durations in seconds unless a ``timedelta``."""

    timeouts: RolloutTimeouts = field(default_factory=RolloutTimeouts)
    node_label_selector: str | None = None
    """Only Nodes matching this label selector take part in rollouts (all Nodes when unset)."""
    resync_seconds: float = 10.0
    """While a rollout is in progress, the NodeImage is reconciled at least this often."""
    drain_poll_seconds: float = 2.0
    """While a drain waits for pods, it is looked at again this often."""
    scaling_group_resync_seconds: float = 600.0
    """How often a ScalingGroup's scale set is re-read to notice a model changed behind our back."""
    pending_node_workers: int = 4
    """PendingNode reconciles run in parallel (each may wait for a machine's deletion)."""
    node_network_config_namespace: str = "kube-system"
    """Where NodeNetworkConfigs live: a donor is cordoned only once its heir's pool there can take
    its pods. Empty: no such gate (and no NodeNetworkConfig informer)."""
    heir_identity_gate: bool = True
    """A donor is cordoned only once its heir's machine holds the identities its pods use (read
    from AzureAssignedIdentities). False: no such gate (and no AzureAssignedIdentity informer)."""


_SECONDS = {
    "joinTimeoutSeconds": "join",
    "leaveTimeoutSeconds": "leave",
    "drainTimeoutSeconds": "drain",
    "pollIntervalSeconds": "poll",
}
_FLOATS = {
    "resyncSeconds": "resync_seconds",
    "drainPollSeconds": "drain_poll_seconds",
    "scalingGroupResyncSeconds": "scaling_group_resync_seconds",
}
_KNOWN = {
    "cloud",
    "nodeLabelSelector",
    "pendingNodeWorkers",
    "nodeNetworkConfigNamespace",
    "heirIdentityGate",
    *_SECONDS,
    *_FLOATS,
}


def _positive_number(options: Mapping[str, Any], key: str, path: str) -> float:
    value = options[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{path}.{key}: expected a positive number of seconds, got {value!r}")
    return float(value)


def parse_options(
    options: Mapping[str, Any], path: str = "reconcilers.node-image.options"
) -> NodeImageSettings:
    """The settings from a reconciler's ``options`` mapping (the ``cloud`` block is skipped)."""
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}: unknown key (known: {', '.join(sorted(_KNOWN))})")
    timeouts = {
        name: timedelta(seconds=_positive_number(options, key, path))
        for key, name in _SECONDS.items()
        if key in options
    }
    floats = {name: _positive_number(options, key, path) for key, name in _FLOATS.items() if key in options}
    selector = options.get("nodeLabelSelector")
    if selector is not None:
        if not isinstance(selector, str) or not selector.strip():
            raise ConfigError(f"{path}.nodeLabelSelector: expected a label selector string, got {selector!r}")
        try:
            label_selector_matcher(selector)
        except ValueError as error:
            raise ConfigError(f"{path}.nodeLabelSelector: {error}") from None
    workers = options.get("pendingNodeWorkers", 4)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"{path}.pendingNodeWorkers: expected a positive integer, got {workers!r}")
    namespace = options.get("nodeNetworkConfigNamespace", "kube-system")
    if not isinstance(namespace, str):
        raise ConfigError(f"{path}.nodeNetworkConfigNamespace: expected a namespace name, got {namespace!r}")
    identity_gate = options.get("heirIdentityGate", True)
    if not isinstance(identity_gate, bool):
        raise ConfigError(f"{path}.heirIdentityGate: expected true or false, got {identity_gate!r}")
    return NodeImageSettings(
        timeouts=RolloutTimeouts(**timeouts),
        node_network_config_namespace=namespace,
        heir_identity_gate=identity_gate,
        node_label_selector=selector,
        pending_node_workers=workers,
        **floats,
    )
