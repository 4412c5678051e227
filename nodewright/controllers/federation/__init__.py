"""controllers/federation: workload identity federation, the road off pod identity. Federated
identity credentials on user-assigned identities follow the ServiceAccounts that ask for them
(annotation ``nodewright.io/azure-identity``: an AzureIdentity's name or an identity's resource
ID), within Azure's 20 per identity, and the ServiceAccounts get ``azure.workload.identity/
client-id`` once their credential has propagated.

The reconciler named ``workload-identity-federation`` wires one controller keyed by identity:
``reconciler`` holds the pass, ``decisions`` the pure plan, ``options`` the strict options.
``RBAC_RULES`` lists every permission it uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodewright.controllers.cloud_access import cloud_from_options, parse_cloud_settings
from nodewright.controllers.federation.options import FederationOptions, parse_options
from nodewright.controllers.federation.reconciler import SERVICE_ACCOUNT, FederationReconciler
from nodewright.controllers.identity.assignment import NO_EVENTS
from nodewright.controllers.identity.options import AZURE_IDENTITY
from nodewright.runtime.manager import Manager
from nodewright.runtime.predicates import generation_changed
from nodewright.runtime.rbac import RUNTIME_RULES, PolicyRule
from nodewright.runtime.registry import ReconcilerPlugin

__all__ = [
    "NAME",
    "PLUGIN",
    "RBAC_RULES",
    "FederationOptions",
    "FederationReconciler",
    "setup",
    "validate_options",
]

NAME = "workload-identity-federation"
"""The reconciler's name in the manager config (and its controller's)."""

RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("", ("serviceaccounts",), ("get", "list", "watch", "patch", "update")),
    *RUNTIME_RULES,
    PolicyRule("aadpodidentity.k8s.io", ("azureidentities",), ("get", "list", "watch")),
)


def validate_options(options: Mapping[str, Any]) -> None:
    """Check the options without a cluster (``nodewright check-config``); raises ConfigError."""
    parse_cloud_settings(parse_options(options).cloud, "options.cloud")


def setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """Wire the federation controller into ``manager`` (side effect: registers one controller)."""
    parsed = parse_options(options)
    cloud = cloud_from_options({"cloud": parsed.cloud})
    reconciler = FederationReconciler(
        manager.client,
        manager.cache,
        cloud.identities,
        manager.event_recorder("nodewright-federation"),
        parsed,
    )
    (
        manager.controller(NAME)
        .for_(SERVICE_ACCOUNT, predicate=NO_EVENTS)
        .watches(SERVICE_ACCOUNT, reconciler.requests_for_account)
        .watches(AZURE_IDENTITY, reconciler.requests_for_azure_identity, predicate=generation_changed)
        .complete(reconciler)
    )


PLUGIN = ReconcilerPlugin(NAME, setup, validate_options, RBAC_RULES)
"""This reconciler's declared plug-in (the registry and ``make manifests`` read it)."""
