"""The node-image reconciler's options: strict parsing with one-line errors naming the key, and
wiring through the manager's config and registry like any reconciler."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.controllers.cloud_access import settings_as_options
from nodewright.controllers.node_image import NAME, RBAC_RULES, parse_options, validate_options
from nodewright.runtime.process.config import ConfigError, parse_config
from nodewright.runtime.process.manager import Manager
from tests.conftest import Cluster


def test_defaults_follow_constellation() -> None:
    """With no options: join 30 min, leave 1 min, drain reported stuck after 10 min, all nodes."""
    settings = parse_options({})
    assert (settings.timeouts.join, settings.timeouts.leave, settings.timeouts.drain) == (
        timedelta(minutes=30),
        timedelta(minutes=1),
        timedelta(minutes=10),
    )
    assert settings.node_label_selector is None


def test_every_option_is_read() -> None:
    """Each documented key lands in the settings (the cloud block is left to cloud_access)."""
    settings = parse_options(
        {
            "cloud": {"subscriptionId": "s"},
            "nodeLabelSelector": "pool in (a,b)",
            "joinTimeoutSeconds": 600,
            "leaveTimeoutSeconds": 30,
            "drainTimeoutSeconds": 120.5,
            "pollIntervalSeconds": 5,
            "resyncSeconds": 3,
            "drainPollSeconds": 1,
            "scalingGroupResyncSeconds": 60,
            "pendingNodeWorkers": 8,
            "nodeNetworkConfigNamespace": "ipam",
        }
    )
    assert settings.node_network_config_namespace == "ipam"
    assert settings.timeouts.join == timedelta(seconds=600)
    assert settings.timeouts.drain == timedelta(seconds=120.5)
    assert settings.timeouts.poll == timedelta(seconds=5)
    assert (settings.resync_seconds, settings.drain_poll_seconds, settings.scaling_group_resync_seconds) == (
        3,
        1,
        60,
    )
    assert (settings.node_label_selector, settings.pending_node_workers) == ("pool in (a,b)", 8)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"joinTimeout": 5}, "options.joinTimeout: unknown key", id="unknown-key"),
        pytest.param(
            {"joinTimeoutSeconds": "5m"},
            "options.joinTimeoutSeconds: expected a positive number",
            id="string",
        ),
        pytest.param(
            {"leaveTimeoutSeconds": 0}, "options.leaveTimeoutSeconds: expected a positive number", id="zero"
        ),
        pytest.param(
            {"drainTimeoutSeconds": True},
            "options.drainTimeoutSeconds: expected a positive number",
            id="bool",
        ),
        pytest.param(
            {"pendingNodeWorkers": 0}, "options.pendingNodeWorkers: expected a positive integer", id="workers"
        ),
        pytest.param(
            {"nodeLabelSelector": ""}, "options.nodeLabelSelector: expected a label selector", id="empty"
        ),
        pytest.param(
            {"nodeLabelSelector": "a b c"}, "options.nodeLabelSelector: cannot parse", id="bad-selector"
        ),
        pytest.param(
            {"nodeLabelSelector": "pool=" + "u" * 300},
            "characters) is 300 characters long; a label value has at most 63",
            id="selector-of-300-characters",
        ),
        pytest.param(
            {"nodeLabelSelector": "pool in (usér)"},
            "options.nodeLabelSelector: label selector requirement 'pool in (usér)': value 'usér' is not",
            id="non-ascii-selector",
        ),
    ],
)
def test_bad_options_fail_with_one_line_naming_the_key(options: dict[str, Any], message: str) -> None:
    """A wrong key or value raises ConfigError whose single line names it."""
    with pytest.raises(ConfigError) as caught:
        parse_options(options)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_validate_options_checks_the_cloud_block_too() -> None:
    """check-config catches a missing cloud block and a bad option alike, without a cluster."""
    with pytest.raises(ConfigError, match=r"options.cloud"):
        validate_options({"resyncSeconds": 5})
    with pytest.raises(ConfigError, match=r"resyncSeconds"):
        validate_options({"cloud": {"subscriptionId": "s"}, "resyncSeconds": -1})
    validate_options({"cloud": {"subscriptionId": "s"}, "resyncSeconds": 5})


def test_rbac_rules_cover_what_the_reconcilers_touch() -> None:
    """The declared rules name the CRDs, their status, Nodes, Pods, evictions and budgets; no wildcard."""
    granted = {
        (rule.api_group, resource): set(rule.verbs) for rule in RBAC_RULES for resource in rule.resources
    }
    assert {"get", "list", "watch", "patch", "delete"} <= granted[("", "nodes")]
    assert granted[("", "pods/eviction")] == {"create"}
    assert {"create", "delete", "update"} <= granted[("nodewright.io", "pendingnodes")]
    assert "update" in granted[("nodewright.io", "nodeimages/status")]
    assert "patch" in granted[("nodewright.io", "autoscalingstrategies")]
    assert ("policy", "poddisruptionbudgets") in granted


def test_setup_from_the_manager_config_wires_three_controllers(cluster: Cluster) -> None:
    """The config's node-image entry (module path and options with a cloud block) sets up the
    nodeimage, scalinggroup and pendingnode controllers."""
    cloud = CloudSettings(
        subscription_id="00000000-0000-0000-0000-000000000000",
        arm_endpoint="https://127.0.0.1:1",
        credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="t"),
    )
    config = parse_config(
        {
            "metrics": {"bindAddress": "0"},
            "health": {"bindAddress": "0"},
            "leaderElection": {"enabled": False},
            "reconcilers": {
                NAME: {
                    "module": "nodewright.controllers.node_image",
                    "options": {"cloud": settings_as_options(cloud), "resyncSeconds": 5},
                }
            },
        },
        "test",
    )
    manager = Manager(config, kubeconfig=str(cluster.kubeconfig))
    assert manager.setup_reconcilers() == [NAME]
    assert sorted(c.name for c in manager.controllers) == ["nodeimage", "pendingnode", "scalinggroup"]
