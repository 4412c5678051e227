"""controllers/federation: workload identity federation, the road off pod identity. Federated
identity credentials on user-assigned identities follow the ServiceAccounts that ask for them
(annotation ``nodewright.io/azure-identity``: an AzureIdentity's name or an identity's resource
ID), within Azure's 20 per identity, and the ServiceAccounts get ``azure.workload.identity/
client-id`` once their credential has propagated.

The reconciler named ``workload-identity-federation`` wires one controller keyed by identity:
``reconciler`` holds the pass, ``decisions`` the pure plan, ``options`` the strict options.
With ``migration.enabled`` it wires a second, ``workload-identity-migration``, keyed by
AzureIdentityBinding: the shadow migration off pod identity (``migration`` the stages,
``migration_reconciler`` the pass, ``owners`` the cutover's workload labels).
``RBAC_RULES`` lists every permission either uses; ``MIGRATION_RBAC_RULES`` are the ones only the
migration needs (a cluster that leaves it off may drop them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodewright.api.aadpodidentity.v1 import POD_LABEL
from nodewright.cloud.config import CloudSettings
from nodewright.cloud.entra import TokenExchange
from nodewright.controllers.cloud_access import clouds_of, parse_cloud_settings
from nodewright.controllers.federation.migration_reconciler import MigrationReconciler
from nodewright.controllers.federation.options import FederationOptions, parse_options
from nodewright.controllers.federation.reconciler import SERVICE_ACCOUNT, FederationReconciler, IdentityKey
from nodewright.controllers.identity.options import AZURE_IDENTITY, AZURE_IDENTITY_BINDING
from nodewright.runtime import POD, RUNTIME_RULES, Manager, PolicyRule, ReconcilerPlugin, generation_changed

__all__ = [
    "MIGRATION_NAME",
    "MIGRATION_RBAC_RULES",
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

MIGRATION_NAME = "workload-identity-migration"
"""The migration controller's name."""

MIGRATION_RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("", ("serviceaccounts/token",), ("create",)),
    PolicyRule("", ("pods",), ("list", "watch")),
    PolicyRule("aadpodidentity.k8s.io", ("azureidentitybindings",), ("get", "list", "watch")),
    PolicyRule("aadpodidentity.k8s.io", ("azureidentitybindings/status",), ("get", "update")),
    PolicyRule("apps", ("replicasets",), ("get",)),
    PolicyRule("apps", ("deployments", "statefulsets", "daemonsets"), ("get", "patch")),
)

RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("", ("serviceaccounts",), ("get", "list", "watch", "patch", "update")),
    *RUNTIME_RULES,
    PolicyRule("aadpodidentity.k8s.io", ("azureidentities",), ("get", "list", "watch")),
    *MIGRATION_RBAC_RULES,
)


def validate_options(options: Mapping[str, Any]) -> None:
    """Check the options without a cluster (``nodewright check-config``); raises ConfigError."""
    parse_cloud_settings(parse_options(options).cloud, "options.cloud")


def setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """Wire the federation controller into ``manager`` (side effect: registers one controller)."""
    parsed = parse_options(options)
    cloud = clouds_of(manager).from_options({"cloud": parsed.cloud})
    reconciler = FederationReconciler(
        manager.client,
        manager.cache,
        cloud.identities,
        manager.event_recorder("nodewright-federation"),
        parsed,
    )
    (
        manager.controller(NAME, IdentityKey)
        .watches(SERVICE_ACCOUNT, reconciler.requests_for_account)
        .watches(AZURE_IDENTITY, reconciler.requests_for_azure_identity, predicate=generation_changed)
        .complete(reconciler)
    )
    if parsed.migration:
        _setup_migration(manager, parsed, cloud_settings_of(parsed))


def _setup_migration(manager: Manager, options: FederationOptions, settings: CloudSettings) -> None:
    migration = MigrationReconciler(
        manager.client,
        manager.cache,
        TokenExchange(options.authority_host, settings.ca_bundle),
        manager.event_recorder("nodewright-migration"),
        tenant_id=options.tenant_id,
    )
    migration.add_indexers()
    (
        manager.controller(MIGRATION_NAME)
        .for_(AZURE_IDENTITY_BINDING)
        .watches(POD, migration.requests_for_pod, label_selector=POD_LABEL)
        .watches(SERVICE_ACCOUNT, migration.requests_for_account)
        .complete(migration)
    )


def cloud_settings_of(options: FederationOptions) -> CloudSettings:
    return parse_cloud_settings(options.cloud, "options.cloud")


PLUGIN = ReconcilerPlugin(NAME, setup, validate_options, RBAC_RULES)
"""This reconciler's declared plug-in (the registry and ``make manifests`` read it)."""
