"""Does this process hold the permissions its enabled parts declare? Asked once at start.

Owns ``missing_permissions``: for each named set of ``PolicyRule`` (a reconciler's
``RBAC_RULES``, the runtime's own), one SelfSubjectAccessReview per resource and verb, and a
one-line description of each set that is not fully granted, so a manager whose reconciler's role
is not bound stops at start with a clear message instead of failing later with 403s in its
logs. Side effects: POSTs to the API server (authorization.k8s.io/v1), nothing written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodewright.runtime.kube.client import Client
from nodewright.runtime.process.rbac import PolicyRule, merge_rules

__all__ = ["missing_permissions"]

SELF_SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _allowed(client: Client, rule: PolicyRule, resource: str, verb: str) -> bool:
    name, _, subresource = resource.partition("/")
    attributes = {"group": rule.api_group, "resource": name, "verb": verb}
    if subresource:
        attributes["subresource"] = subresource
    if rule.namespace:
        attributes["namespace"] = rule.namespace
    if rule.resource_names:
        attributes["name"] = rule.resource_names[0]
    review = client.request(
        "POST",
        SELF_SUBJECT_ACCESS_REVIEWS,
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    ).json()
    return bool((review.get("status") or {}).get("allowed"))


def _describe(rule: PolicyRule, resource: str, verb: str) -> str:
    group = f".{rule.api_group}" if rule.api_group else ""
    where = f" in {rule.namespace}" if rule.namespace else ""
    return f"{verb} {resource}{group}{where}"


def missing_permissions(client: Client, rule_sets: Mapping[str, Sequence[PolicyRule]]) -> list[str]:
    """``["reconciler node-image cannot: delete nodes, create pods/eviction"]`` for each set
    with a permission the API server denies to this process; empty when all are granted."""
    problems: list[str] = []
    for owner, rules in rule_sets.items():
        denied = [
            _describe(rule, resource, verb)
            for rule in merge_rules(rules)
            for resource in rule.resources
            for verb in rule.verbs
            if not _allowed(client, rule, resource, verb)
        ]
        if denied:
            problems.append(f"{owner} cannot: {', '.join(denied)}")
    return problems
