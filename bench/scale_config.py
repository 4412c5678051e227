"""The manager configuration ``bench.scale`` runs: config/manager/config.yaml as shipped, pointed at
the local ARM emulator and cluster, with every reconciler enabled at its defaults.

Owns ``DIFFERENCES`` (each key path, as an ``fnmatch`` pattern, in which the bench's config may
differ from the shipped file, and why that is not a tuning), ``manager_config`` (pure: the
shipped document in, the bench's out) and ``differing_paths`` (pure: the key paths in which two
documents differ, for the test that holds ``manager_config`` to ``DIFFERENCES``). No I/O but
``load_shipped``, which reads the shipped file.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ADDED_RECONCILERS",
    "DIFFERENCES",
    "SHIPPED_CONFIG",
    "differing_paths",
    "load_shipped",
    "manager_config",
    "undeclared_differences",
]

SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "config" / "manager" / "config.yaml"

ADDED_RECONCILERS: dict[str, str] = {
    "node-image": "nodewright.controllers.node_image",
    "node-network-config": "nodewright.controllers.node_network_config",
}
"""Reconcilers the shipped file does not list: the bench enables them with only the shared
``cloud`` block, every other option at its default."""

DIFFERENCES: dict[str, str] = {
    "metrics.bindAddress": "a free loopback port: the shipped :8443 on every interface would "
    "collide with other programs on a shared machine; where metrics are served costs nothing",
    "health.bindAddress": "a free loopback port, for the same reason",
    "reconcilers.*.options.cloud.subscriptionId": "the emulator's subscription",
    "reconcilers.*.options.cloud.armEndpoint": "the emulator's HTTPS endpoint instead of Azure's",
    "reconcilers.*.options.cloud.caBundle": "the emulator's CA, so TLS verifies",
    "reconcilers.*.options.cloud.credential": "a static token (the emulator takes any) instead of "
    "workload identity, which needs Entra ID",
    "reconcilers.*.options.cloud.credential.*": "the same credential block, key by key",
    "reconcilers.workload-identity-federation.enabled": "every reconciler enabled (the shipped "
    "file leaves this opt-in reconciler off)",
    "reconcilers.identity-assignment.enabled": "with --peer mic only: MIC assigns identities "
    "instead (the comparison run); every other run keeps it enabled",
    "reconcilers.node-image": "every reconciler enabled: added with defaults and the shared cloud block",
    "reconcilers.node-image.*": "the added reconciler's keys (enabled, module, options.cloud)",
    "reconcilers.node-network-config": "every reconciler enabled: added with defaults and the "
    "shared cloud block",
    "reconcilers.node-network-config.*": "the added reconciler's keys (enabled, module, options.cloud)",
    "reconcilers.node-network-config.options.demandFromPods": "true: no node agent (Azure CNS) runs "
    "on kwok nodes to write each NodeNetworkConfig's spec, so nodewright sizes the pools from the "
    "node's pods, as when it is the node agent (its default, false, leaves every pool unrequested)",
}
"""Key path pattern -> why the bench's config may differ there from the shipped file."""


def load_shipped(path: Path = SHIPPED_CONFIG) -> dict[str, Any]:
    """The shipped config document (YAML anchors resolved: the reconcilers share one ``cloud``)."""
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a mapping")
    return document


def manager_config(
    shipped: Mapping[str, Any],
    *,
    endpoint: str,
    ca_bundle: str,
    subscription: str,
    token: str,
    metrics_port: int,
    health_port: int,
) -> dict[str, Any]:
    """Pure: the shipped config pointed at the emulator (one ``cloud`` block for every reconciler,
    as the shipped anchor shares it) and at loopback ports, with every reconciler enabled."""
    config = copy.deepcopy(dict(shipped))
    config["metrics"] = {**config.get("metrics", {}), "bindAddress": f"127.0.0.1:{metrics_port}"}
    config["health"] = {**config.get("health", {}), "bindAddress": f"127.0.0.1:{health_port}"}
    reconcilers: dict[str, Any] = config.setdefault("reconcilers", {})
    cloud: dict[str, Any] | None = None
    for entry in reconcilers.values():
        block = (entry.get("options") or {}).get("cloud")
        if isinstance(block, dict):
            cloud = block
            break
    if cloud is None:
        raise ValueError("the shipped config has no reconciler with a cloud block")
    cloud = {
        **cloud,
        "subscriptionId": subscription,
        "armEndpoint": endpoint,
        "caBundle": ca_bundle,
        "credential": {"kind": "static-token", "staticToken": token},
    }
    for entry in reconcilers.values():
        entry["enabled"] = True
        options = entry.setdefault("options", {})
        if "cloud" in options:
            options["cloud"] = cloud
    for name, module in ADDED_RECONCILERS.items():
        reconcilers.setdefault(name, {"enabled": True, "module": module, "options": {"cloud": cloud}})
    reconcilers["node-network-config"]["options"].setdefault("demandFromPods", True)
    return config


def _leaves(document: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(document, Mapping):
        for key, value in document.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, document


def differing_paths(before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    """Pure: every leaf key path present in only one document, or with another value."""
    left, right = dict(_leaves(before)), dict(_leaves(after))
    return {path for path in left.keys() | right.keys() if left.get(path, ...) != right.get(path, ...)}


def undeclared_differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    """Pure: the differing key paths that no ``DIFFERENCES`` pattern declares."""
    return {
        path
        for path in differing_paths(before, after)
        if not any(fnmatch.fnmatchcase(path, pattern) for pattern in DIFFERENCES)
    }
