"""The identity reconcilers' options are parsed strictly (one line naming the bad key), and the
watch filters and the batching keep ARM calls to what changed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodewright.controllers.identity import RBAC_RULES, _batch_window
from nodewright.controllers.identity.options import IdentityOptions, parse_options
from nodewright.controllers.identity.watches import (
    node_relevant_change,
    pod_relevant_change,
    spec_or_deletion_change,
)
from nodewright.runtime.control.workqueue import BatchWindow
from nodewright.runtime.process.config import ConfigError


def test_defaults() -> None:
    parsed = parse_options({})
    assert parsed == IdentityOptions()
    assert parsed.repair_interval == 180.0
    assert parsed.policy.rejected_identity_retry == timedelta(minutes=10)


def test_every_option_is_read() -> None:
    parsed = parse_options(
        {
            "cloud": {"subscriptionId": "s"},
            "forceNamespaced": True,
            "immutableIdentities": ["ABC"],
            "managerIdentities": ["/Subscriptions/X"],
            "removeUnmarkedAssignments": True,
            "repairInterval": 60,
            "rejectedIdentityRetry": 0,
            "maxIdentitiesPerRequest": 100,
            "resolveIdentityInfo": False,
            "batchWindow": 0,
            "batchMaxDelay": 1.5,
        }
    )
    assert parsed.policy.force_namespaced
    assert parsed.policy.immutable_identities == frozenset({"abc"})
    assert parsed.policy.manager_identities == frozenset({"/subscriptions/x"})
    assert parsed.policy.remove_unmarked_assignments
    assert (parsed.repair_interval, parsed.max_identities_per_request, parsed.batch_max_delay) == (
        60.0,
        100,
        1.5,
    )
    assert not parsed.resolve_identity_info


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"forcenamespaced": True}, "options.forcenamespaced: unknown key", id="unknown-key"),
        pytest.param(
            {"forceNamespaced": "yes"}, "options.forceNamespaced: expected a boolean", id="not-boolean"
        ),
        pytest.param(
            {"repairInterval": 0}, "options.repairInterval: expected a number greater than 0", id="zero"
        ),
        pytest.param({"batchWindow": -1}, "options.batchWindow: expected a number at least 0", id="negative"),
        pytest.param(
            {"maxIdentitiesPerRequest": 151},
            "options.maxIdentitiesPerRequest: expected an integer from 1 to 150",
            id="over-arm-limit",
        ),
        pytest.param(
            {"immutableIdentities": "abc"}, "options.immutableIdentities: expected a list", id="not-a-list"
        ),
        pytest.param({"cloud": "x"}, "options.cloud: expected a mapping", id="cloud-not-mapping"),
    ],
)
def test_bad_options_fail_with_one_line_naming_the_key(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(options)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def pod(
    node: str = "n", phase: str = "Running", label: str = "app", deleting: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns", "labels": {"aadpodidbinding": label}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("old", "new", "relevant"),
    [
        pytest.param(pod(phase="Pending"), pod(phase="Running"), False, id="started-running"),
        pytest.param(pod(), pod(deleting=True), False, id="terminating-still-runs"),
        pytest.param(pod(), pod(phase="Succeeded"), True, id="finished"),
        pytest.param(pod(node=""), pod(), True, id="scheduled"),
        pytest.param(pod(), pod(label="other"), True, id="label-changed"),
    ],
)
def test_pod_updates_pass_only_when_assignment_facts_change(
    old: dict[str, Any], new: dict[str, Any], relevant: bool
) -> None:
    """Status churn (the kubelet's phase updates) never costs an ARM read."""
    assert pod_relevant_change(old, new) is relevant


def test_node_updates_pass_only_when_provider_id_changes() -> None:
    """Heartbeats and conditions (every few seconds per node) never cost an ARM read."""
    node = {"metadata": {"name": "n"}, "spec": {"providerID": "azure:///a"}, "status": {"conditions": []}}
    heartbeat = {**node, "status": {"conditions": [{"type": "Ready"}]}}
    assert not node_relevant_change(node, heartbeat)
    assert node_relevant_change({**node, "spec": {}}, node)


def test_assigned_identity_status_writes_do_not_trigger_passes() -> None:
    """Our own status writes (generation unchanged) do not come back as work; deletion does."""
    old = {"metadata": {"generation": 1}, "status": {"status": "Created"}}
    assert not spec_or_deletion_change(old, {"metadata": {"generation": 1}, "status": {"status": "Assigned"}})
    assert spec_or_deletion_change(old, {"metadata": {"generation": 2}})
    assert spec_or_deletion_change(old, {"metadata": {"generation": 1, "deletionTimestamp": "t"}})


def test_a_burst_of_changes_is_batched_into_one_pass_by_the_queue() -> None:
    """The identity controller's work queue debounces the targets (its ``BatchWindow``, tested
    with the queue in tests/runtime): the whole queue quiet for ``batchWindow``, each target at
    most ``batchMaxDelay`` after its first event, so pods created together cost one PATCH per
    target, not one each (#676 #988 #1139). A window of 0 turns batching off."""
    cloud = {"subscriptionId": "s", "credential": {"kind": "default"}}
    window = _batch_window(parse_options({"cloud": cloud, "batchWindow": 0.3, "batchMaxDelay": 2}))
    assert window == BatchWindow(quiet=0.3, max_delay=2.0, shared=True)
    assert _batch_window(parse_options({"cloud": cloud, "batchWindow": 0})) is None
    default = BatchWindow(quiet=0.5, max_delay=2.0, shared=True)
    assert _batch_window(parse_options({"cloud": cloud})) == default


def test_rbac_rules_cover_the_resources_the_reconcilers_touch() -> None:
    granted = {
        (rule.api_group, resource, verb)
        for rule in RBAC_RULES
        for resource in rule.resources
        for verb in rule.verbs
    }
    group = "aadpodidentity.k8s.io"
    needed = {
        ("", "pods", "watch"),
        ("", "nodes", "list"),
        ("", "events", "create"),
        (group, "azureassignedidentities", "create"),
        (group, "azureassignedidentities", "update"),
        (group, "azureassignedidentities", "patch"),
        (group, "azureassignedidentities", "delete"),
        (group, "azureassignedidentities/status", "patch"),
        (group, "azureidentities/status", "patch"),
        (group, "azureidentitybindings/status", "patch"),
    }
    assert needed <= granted
    assert not any(verb == "delete" for g, r, verb in granted if r in ("pods", "nodes"))
