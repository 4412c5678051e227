"""RBAC rules declared beside the code that needs them (kubebuilder's ``+kubebuilder:rbac``
markers, as data). Each reconciler module lists ``RBAC_RULES``; the manifests generator merges
them into config/rbac, so the roles can never drift from what the code uses.

Owns ``PolicyRule`` and ``merge_rules``; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["RUNTIME_RULES", "PolicyRule", "merge_rules"]


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One rbac.authorization.k8s.io/v1 PolicyRule. ``api_group`` "" is the core group.
    ``namespace`` set means the objects live in that namespace only: the rule goes into a Role
    there instead of the ClusterRole."""

    api_group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()
    namespace: str = ""

    def __post_init__(self) -> None:
        if "*" in self.verbs or "*" in self.resources or self.api_group == "*":
            raise ValueError(f"wildcards are not allowed in RBAC rules: {self}")

    def to_dict(self) -> dict[str, Any]:
        rule: dict[str, Any] = {
            "apiGroups": [self.api_group],
            "resources": sorted(self.resources),
            "verbs": sorted(self.verbs),
        }
        if self.resource_names:
            rule["resourceNames"] = sorted(self.resource_names)
        return rule


def merge_rules(rules: Iterable[PolicyRule]) -> list[PolicyRule]:
    """One rule per (namespace, group, resource, resource names) with the union of verbs, sorted."""
    verbs: dict[tuple[str, str, str, tuple[str, ...]], set[str]] = {}
    for rule in rules:
        for resource in rule.resources:
            key = (rule.namespace, rule.api_group, resource, rule.resource_names)
            verbs.setdefault(key, set()).update(rule.verbs)
    return [
        PolicyRule(group, (resource,), tuple(sorted(verb_set)), names, namespace)
        for (namespace, group, resource, names), verb_set in sorted(verbs.items())
    ]


RUNTIME_RULES: tuple[PolicyRule, ...] = (PolicyRule("", ("events",), ("create", "patch")),)
"""What the framework itself needs in every namespace it works in (the event recorder). The
leader-election Lease is granted by its own namespaced Role."""
