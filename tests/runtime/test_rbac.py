"""RBAC rules: merged per resource, rendered as PolicyRules, wildcards refused."""

from __future__ import annotations

import pytest

from nodewright.runtime.process.rbac import PolicyRule, merge_rules


def test_merge_unions_verbs_per_resource() -> None:
    """Two declarations for pods merge into one rule with both sets of verbs."""
    merged = merge_rules(
        [
            PolicyRule("", ("pods",), ("get", "list")),
            PolicyRule("", ("pods", "nodes"), ("watch",)),
            PolicyRule("", ("pods",), ("list",)),
        ]
    )
    assert [rule.to_dict() for rule in merged] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    ]


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param(lambda: PolicyRule("", ("pods",), ("*",)), id="verb"),
        pytest.param(lambda: PolicyRule("", ("*",), ("get",)), id="resource"),
        pytest.param(lambda: PolicyRule("*", ("pods",), ("get",)), id="group"),
    ],
)
def test_wildcards_are_refused(rule: object) -> None:
    assert callable(rule)
    with pytest.raises(ValueError, match="wildcards"):
        rule()
