"""What the identity assignment controller watches and how: the cache indexes its passes read
(nodes by target, pods by node and by binding label, AzureAssignedIdentities by target, node and
pod), the predicates that drop status-only churn, and ``TargetRequests``, the map functions from
each watched object to the targets whose pass must run. Reads the informers' stores; no I/O. (A
burst of events for one target is folded into one pass by the work queue's ``BatchWindow``.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodewright.api.aadpodidentity.v1 import (
    CONDITION_WORKLOAD_IDENTITY_MIGRATION,
    MIGRATION_CUT_OVER,
    POD_LABEL,
)
from nodewright.cloud.resource_ids import InvalidResourceIdError
from nodewright.controllers.identity.decisions import PodInfo
from nodewright.controllers.identity.intent import recorded_target
from nodewright.controllers.identity.keys import IdentityWork, TargetKey, target_key
from nodewright.controllers.identity.targets import target_of_provider_id
from nodewright.runtime import InformerView

__all__ = [
    "ASSIGNED_NODE_INDEX",
    "ASSIGNED_POD_INDEX",
    "ASSIGNED_TARGET_INDEX",
    "BINDING_LABEL_INDEX",
    "NODE_NAME_INDEX",
    "TARGET_INDEX",
    "TargetRequests",
    "assigned_node_index",
    "assigned_pod_index",
    "assigned_target_index",
    "binding_relevant_change",
    "node_relevant_change",
    "node_target_index",
    "pod_binding_label_index",
    "pod_node_index",
    "pod_relevant_change",
    "spec_or_deletion_change",
    "target_key_of_node",
    "with_kind",
]

TARGET_INDEX = "identity.target"
"""Nodes by the lowercased ARM ID of their target ("" when they have none)."""
NODE_NAME_INDEX = "spec.nodeName"
BINDING_LABEL_INDEX = "aadpodidbinding"
ASSIGNED_TARGET_INDEX = "status.target"
"""AzureAssignedIdentities by recorded target (``intent.recorded_target``; "" when none is
recorded, as MIC wrote them)."""
ASSIGNED_NODE_INDEX = "spec.nodename"
ASSIGNED_POD_INDEX = "spec.pod"
"""AzureAssignedIdentities by ``<podNamespace>/<pod>``."""


def target_key_of_node(node: Mapping[str, Any]) -> str:
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    if not provider_id:
        return ""
    try:
        return target_of_provider_id(provider_id).key
    except InvalidResourceIdError:
        return ""


def node_target_index(node: dict[str, Any]) -> list[str]:
    return [target_key_of_node(node)]


def pod_node_index(pod: dict[str, Any]) -> list[str]:
    node_name = (pod.get("spec") or {}).get("nodeName")
    return [str(node_name)] if node_name else []


def pod_binding_label_index(pod: dict[str, Any]) -> list[str]:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(POD_LABEL)
    return [str(value)] if value else []


def assigned_target_index(assigned: dict[str, Any]) -> list[str]:
    return [recorded_target(assigned)]


def assigned_node_index(assigned: dict[str, Any]) -> list[str]:
    node_name = (assigned.get("spec") or {}).get("nodename")
    return [str(node_name)] if node_name else []


def assigned_pod_index(assigned: dict[str, Any]) -> list[str]:
    spec = assigned.get("spec") or {}
    return [f"{spec.get('podNamespace', '')}/{spec.get('pod', '')}"]


def _pod_facts(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    info = PodInfo.from_object(pod)
    return (info.node_name, info.is_active, info.binding_label, info.workload_identity)


def pod_relevant_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A pod update matters only when its node, its labels or whether it runs changed."""
    return _pod_facts(old) != _pod_facts(new)


def node_relevant_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A node update matters only when its providerID changed (not heartbeats or conditions)."""
    return (old.get("spec") or {}).get("providerID") != (new.get("spec") or {}).get("providerID")


def spec_or_deletion_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Spec edits (generation) and deletion requests, not status writes (ours or anyone's)."""
    old_metadata, new_metadata = old.get("metadata") or {}, new.get("metadata") or {}
    return old_metadata.get("generation") != new_metadata.get("generation") or bool(
        new_metadata.get("deletionTimestamp")
    ) != bool(old_metadata.get("deletionTimestamp"))


"""For the builder's ``for_``: this controller's requests are targets, all produced by maps."""


def with_kind(obj: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    return {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}


def binding_relevant_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A binding update matters when its spec changed (generation) or its migration was cut over
    or taken back (a status condition the migration reconciler writes)."""
    old_metadata, new_metadata = old.get("metadata") or {}, new.get("metadata") or {}
    if old_metadata.get("generation") != new_metadata.get("generation"):
        return True
    return _cut_over(old) != _cut_over(new)


def _cut_over(binding: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == CONDITION_WORKLOAD_IDENTITY_MIGRATION
        and c.get("status") == "True"
        and c.get("reason") == MIGRATION_CUT_OVER
        for c in (binding.get("status") or {}).get("conditions") or []
    )


class TargetRequests:
    """The controller's map functions: each watched object to the targets whose pass must run."""

    def __init__(self, nodes: InformerView, pods: InformerView, bindings: InformerView) -> None:
        self.nodes = nodes
        self.pods = pods
        self.bindings = bindings

    def _of_node_name(self, node_name: str) -> IdentityWork:
        node = self.nodes.store.get(node_name)
        return target_key(target_key_of_node(node) if node is not None else "")

    def for_pod(self, pod: dict[str, Any]) -> list[IdentityWork]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        return [self._of_node_name(str(node_name))] if node_name else []

    def for_node(self, node: dict[str, Any]) -> list[IdentityWork]:
        return [target_key(target_key_of_node(node))]

    def _for_selectors(self, selectors: Iterable[str]) -> list[IdentityWork]:
        requests: dict[IdentityWork, None] = {}
        for selector in selectors:
            if not selector:
                continue
            for pod in self.pods.store.by_index(BINDING_LABEL_INDEX, selector):
                for request in self.for_pod(pod):
                    requests.setdefault(request, None)
        return list(requests)

    def for_binding(self, binding: dict[str, Any]) -> list[IdentityWork]:
        return self._for_selectors([str((binding.get("spec") or {}).get("selector") or "")])

    def for_identity(self, identity: dict[str, Any]) -> list[IdentityWork]:
        metadata = identity.get("metadata") or {}
        selectors = [
            str((binding.get("spec") or {}).get("selector") or "")
            for binding in self.bindings.store.list()
            if (binding.get("metadata") or {}).get("namespace") == metadata.get("namespace")
            and (binding.get("spec") or {}).get("azureIdentity") == metadata.get("name")
        ]
        return self._for_selectors(selectors)

    def for_assigned(self, assigned: dict[str, Any]) -> list[IdentityWork]:
        requests: dict[IdentityWork, None] = {}
        target = recorded_target(assigned)
        if target:
            requests.setdefault(TargetKey(target), None)
        spec = assigned.get("spec") or {}
        if spec.get("nodename"):
            requests.setdefault(self._of_node_name(str(spec["nodename"])), None)
        pod = self.pods.store.get(f"{spec.get('podNamespace', '')}/{spec.get('pod', '')}")
        if pod is not None:
            for request in self.for_pod(pod):
                requests.setdefault(request, None)
        return list(requests)
