"""controllers/identity: assigning Azure user-assigned identities to the VMs and scale sets of the
pods that need them (aad-pod-identity's MIC semantics, without its failures), and resolving each
AzureIdentity's clientId and principalId from Azure.

``decisions`` holds the pure rules (no I/O). The reconcilers read the cluster and the cloud and
write what the rules decide: ``assignment`` (one pass per VM or scale set), ``identity_info``
(AzureIdentity status) and ``binding`` (AzureIdentityBinding status). ``setup`` wires all three
into a manager as the reconciler ``identity-assignment``; ``options`` parses its options.
``RBAC_RULES`` lists every permission they use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodewright.api.aadpodidentity.v1 import CRD_GROUP, POD_LABEL
from nodewright.controllers.cloud_access import clouds_of, parse_cloud_settings
from nodewright.controllers.identity.assignment import (
    IdentityAssignmentReconciler,
    node_relevant_change,
    pod_relevant_change,
    spec_or_deletion_change,
)
from nodewright.controllers.identity.binding import AzureIdentityBindingReconciler
from nodewright.controllers.identity.identity_info import AzureIdentityReconciler
from nodewright.controllers.identity.keys import IdentityWork
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
    IdentityOptions,
    parse_options,
)
from nodewright.controllers.identity.watches import binding_relevant_change
from nodewright.runtime import (
    NODE,
    POD,
    BatchWindow,
    Manager,
    PolicyRule,
    ReconcilerPlugin,
    generation_changed,
    predicate,
)

__all__ = ["EVENT_COMPONENT", "NAME", "PLUGIN", "RBAC_RULES", "setup", "validate_options"]

NAME = "identity-assignment"
"""The reconciler's name in the manager config (and its main controller's)."""
EVENT_COMPONENT = "aadpodidentity.k8s.io"
"""The Event source, as MIC reported it."""

_READ = ("get", "list", "watch")
_STATUS = ("get", "patch", "update")
RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("", ("pods", "nodes"), _READ),
    PolicyRule("", ("events",), ("create", "patch")),
    PolicyRule(CRD_GROUP, ("azureidentities", "azureidentitybindings"), _READ),
    PolicyRule(CRD_GROUP, ("azureidentities/status", "azureidentitybindings/status"), _STATUS),
    PolicyRule(CRD_GROUP, ("azureassignedidentities",), (*_READ, "create", "update", "patch", "delete")),
    PolicyRule(CRD_GROUP, ("azureassignedidentities/status",), _STATUS),
)


def _never_on_create(_: dict[str, Any]) -> bool:
    return False


def _batch_window(options: IdentityOptions) -> BatchWindow | None:
    """A wave of changes becomes one pass (and one PATCH) per target; 0 turns it off. The quiet
    is the queue's (``shared``): a wave of pod changes spread over many targets reaches one
    target at gaps longer than the quiet, and is still one wave."""
    if options.batch_window <= 0:
        return None
    return BatchWindow(options.batch_window, max(options.batch_window, options.batch_max_delay), shared=True)


def validate_options(options: Mapping[str, Any]) -> None:
    """Check the options without a cluster (``nodewright check-config``); raises ConfigError."""
    parse_cloud_settings(parse_options(options).cloud, "options.cloud")


def setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """Wire the identity controllers into ``manager`` (side effect: registers three controllers).

    Raises ``ConfigError`` for bad options (one line naming the key)."""
    parsed = parse_options(options)
    cloud = clouds_of(manager).from_options({"cloud": parsed.cloud})
    recorder = manager.event_recorder(EVENT_COMPONENT)

    builder = manager.controller(NAME, IdentityWork)
    assignment = IdentityAssignmentReconciler(builder.client, builder.cache, cloud.compute, recorder, parsed)
    assignment.add_indexers()
    (
        builder.watches(
            NODE,
            assignment.requests.for_node,
            predicate=predicate(update=node_relevant_change),
        )
        .watches(
            POD,
            assignment.requests.for_pod,
            predicate=predicate(update=pod_relevant_change),
            label_selector=POD_LABEL,
        )
        .watches(AZURE_IDENTITY, assignment.requests.for_identity, predicate=generation_changed)
        .watches(
            AZURE_IDENTITY_BINDING,
            assignment.requests.for_binding,
            predicate=predicate(update=binding_relevant_change),
        )
        .watches(
            AZURE_ASSIGNED_IDENTITY,
            assignment.requests.for_assigned,
            predicate=predicate(create=_never_on_create, update=spec_or_deletion_change),
        )
        .ignore_own_deletes()
        .with_options(max_concurrent_reconciles=4, batch_window=_batch_window(parsed))
        .complete(assignment)
    )

    bindings = AzureIdentityBindingReconciler(manager.client, manager.cache, recorder)
    (
        manager.controller("azure-identity-binding")
        .for_(AZURE_IDENTITY_BINDING, predicate=generation_changed)
        .watches(AZURE_IDENTITY, bindings.map_identity, predicate=generation_changed)
        .complete(bindings)
    )

    if parsed.resolve_identity_info:
        identity_info = AzureIdentityReconciler(manager.client, manager.cache, cloud.identities, recorder)
        (
            manager.controller("azure-identity")
            .for_(AZURE_IDENTITY, predicate=generation_changed)
            .with_options(max_concurrent_reconciles=2)
            .complete(identity_info)
        )


PLUGIN = ReconcilerPlugin(NAME, setup, validate_options, RBAC_RULES)
"""This reconciler's declared plug-in (the registry and ``make manifests`` read it)."""
