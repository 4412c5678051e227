"""The reconciler's options are parsed strictly (one-line errors naming the key), its pod and node
helpers decide demand as the issue says, and its RBAC rules name no wildcard."""

from __future__ import annotations

from typing import Any, cast

import pytest

from nodewright.controllers.node_network_config import (
    RBAC_RULES,
    NodeNetworkConfigSettings,
    parse_options,
    setup,
    validate_options,
)
from nodewright.controllers.node_network_config.resources import (
    cluster_subnet_state_name,
    node_pods,
    pod_addresses,
    uses_pod_network,
)
from nodewright.ipam import PoolScaler
from nodewright.runtime.process.config import ConfigError
from nodewright.runtime.process.manager import Manager


def test_defaults() -> None:
    """No options: kube-system, every node, the spec left to the node agent (CNS), CNS's scaler
    defaults, 10 min grace."""
    settings = parse_options({})
    assert settings == NodeNetworkConfigSettings()
    assert not settings.demand_from_pods
    assert not settings.computes_demand
    assert settings.scaler == PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
    assert settings.leak_grace_period_seconds == 600.0


def test_reads_every_key() -> None:
    """Every documented key lands in its setting."""
    settings = parse_options(
        {
            "namespace": "ipam",
            "nodeSelector": "pool=user",
            "demandFromPods": True,
            "scaler": {
                "batchSize": 8,
                "requestThresholdPercent": 100,
                "releaseThresholdPercent": 200,
                "maxIPCount": 64,
            },
            "leakGracePeriodSeconds": 60,
            "resyncPeriodSeconds": 30,
            "nicRefreshSeconds": 5,
            "subnetCheckIntervalSeconds": 10,
            "releaseSettleSeconds": 1.5,
            "backoffBaseSeconds": 1,
            "backoffCapSeconds": 20,
            "heirPairingWaitSeconds": 30,
            "scaleSetBootPool": False,
            "cloud": {"subscriptionId": "ignored-here"},
        }
    )
    assert settings.namespace == "ipam"
    assert not settings.scale_set_boot_pool
    assert NodeNetworkConfigSettings().scale_set_boot_pool
    assert settings.heir_pairing_wait_seconds == 30.0
    assert settings.node_selector == "pool=user"
    nodesubnet = parse_options(
        {
            "consumer": "nodesubnet",
            "release": "never",
            "discoveryHeadroomIPs": 4,
            "scaleDownDelaySeconds": 120,
            "nodeSelector": "pool in (user, system),!gpu",
        }
    )
    assert (nodesubnet.consumer, nodesubnet.release, nodesubnet.discovery_headroom_ips) == (
        "nodesubnet",
        "never",
        4,
    )
    assert nodesubnet.scale_down_delay_seconds == 120.0
    assert nodesubnet.computes_demand
    assert settings.demand_from_pods
    assert settings.scaler == PoolScaler(8, 100, 64, 200)
    assert (
        settings.leak_grace_period_seconds,
        settings.release_settle_seconds,
        settings.backoff_cap_seconds,
    ) == (
        60.0,
        1.5,
        20.0,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"batchSize": 8}, "options.batchSize: unknown key", id="unknown-key"),
        pytest.param({"namespace": ""}, "options.namespace: must not be empty", id="empty-namespace"),
        pytest.param(
            {"demandFromPods": "yes"}, "options.demandFromPods: expected true or false", id="not-a-bool"
        ),
        pytest.param(
            {"scaleSetBootPool": 1},
            "options.scaleSetBootPool: expected true or false",
            id="boot-pool-not-a-bool",
        ),
        pytest.param(
            {"scaler": {"batchSize": 0}}, "options.scaler.batchSize: must be at least 1", id="batch-zero"
        ),
        pytest.param(
            {"scaler": {"maxIPCount": "x"}}, "options.scaler.maxIPCount: expected an integer", id="max-string"
        ),
        pytest.param({"scaler": {"size": 1}}, "options.scaler.size: unknown key", id="unknown-scaler-key"),
        pytest.param(
            {"scaler": {"requestThresholdPercent": -5}},
            "options.scaler.requestThresholdPercent: must not be negative",
            id="negative-threshold",
        ),
        pytest.param(
            {"leakGracePeriodSeconds": -1},
            "options.leakGracePeriodSeconds: must not be negative",
            id="negative-grace",
        ),
        pytest.param(
            {"resyncPeriodSeconds": "1m"},
            "options.resyncPeriodSeconds: expected a number",
            id="duration-string",
        ),
        pytest.param(
            {"backoffBaseSeconds": 10, "backoffCapSeconds": 5},
            "options.backoffCapSeconds: must be at least backoffBaseSeconds",
            id="cap-below-base",
        ),
        pytest.param(
            {"consumer": "swift"}, "options.consumer: expected one of crd, nodesubnet", id="bad-consumer"
        ),
        pytest.param(
            {"consumer": "nodesubnet", "release": "always"},
            "options.release: expected one of never,",
            id="bad-release",
        ),
        pytest.param({"release": "idle"}, "options.release: idle is refused", id="release-idle-crd"),
        pytest.param(
            {"discoveryHeadroomIPs": -1},
            "options.discoveryHeadroomIPs: expected a non-negative integer",
            id="negative-headroom",
        ),
        pytest.param(
            {"nodeSelector": "pool in user"},
            "options.nodeSelector: not a label selector the API server accepts",
            id="unusable-selector",
        ),
        pytest.param(
            {"nodeSelector": "a b"}, "options.nodeSelector: not a label selector", id="selector-with-space"
        ),
        pytest.param(
            {"nodeSelector": "pool=" + "u" * 300},
            "options.nodeSelector: label selector requirement 'pool=uuuu",
            id="selector-of-300-characters",
        ),
        pytest.param(
            {"nodeSelector": "pool in (usér)"},
            "options.nodeSelector: not a label selector the API server accepts",
            id="non-ascii-selector",
        ),
        pytest.param(
            {"prefixBlocks": True},
            "options.prefixBlocks: needs consumer nodesubnet",
            id="prefix-without-nodesubnet",
        ),
    ],
)
def test_bad_options_fail_with_one_line_naming_the_key(options: dict[str, Any], message: str) -> None:
    """Each bad option raises ConfigError whose single line starts with the key's path."""
    with pytest.raises(ConfigError) as caught:
        parse_options(options)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("pod", "counts"),
    [
        pytest.param({"spec": {}, "status": {"phase": "Running"}}, True, id="running"),
        pytest.param({"spec": {}, "status": {}}, True, id="pending"),
        pytest.param(
            {"spec": {"hostNetwork": True}, "status": {"phase": "Running"}}, False, id="host-network"
        ),
        pytest.param({"spec": {}, "status": {"phase": "Succeeded"}}, False, id="succeeded"),
        pytest.param({"spec": {}, "status": {"phase": "Failed"}}, False, id="failed"),
    ],
)
def test_which_pods_count_as_demand(pod: dict[str, Any], counts: bool) -> None:
    """Pods that use pod networking and are not finished count; host-networked or finished do not."""
    assert uses_pod_network(pod) is counts


def test_node_pods_sums_demand_and_addresses() -> None:
    """Demand counts pods; addresses come from podIPs (or podIP); host-networked pods add nothing."""
    pods: list[dict[str, Any]] = [
        {"spec": {}, "status": {"podIPs": [{"ip": "10.0.0.5"}], "podIP": "10.0.0.5"}},
        {"spec": {}, "status": {"podIP": "10.0.0.6"}},
        {"spec": {}, "status": {}},
        {"spec": {"hostNetwork": True}, "status": {"podIP": "10.1.0.4"}},
    ]
    assert node_pods(pods) == (3, {"10.0.0.5", "10.0.0.6"})
    assert pod_addresses({"status": {}}) == []


@pytest.mark.parametrize(
    ("subnet", "name"),
    [
        pytest.param("pods", "pods", id="plain"),
        pytest.param("Pod_Subnet", "pod-subnet", id="case-and-underscore"),
        pytest.param("--", "subnet", id="nothing-left"),
    ],
)
def test_cluster_subnet_state_names(subnet: str, name: str) -> None:
    """A subnet's ClusterSubnetState is named after it, made a valid object name."""
    assert cluster_subnet_state_name(subnet) == name


def test_rbac_rules_cover_what_the_reconciler_uses() -> None:
    """The declared rules include our CRDs with status, nodes and pods to watch, and Events."""
    granted = {
        (rule.api_group, resource, verb)
        for rule in RBAC_RULES
        for resource in rule.resources
        for verb in rule.verbs
    }
    for needed in [
        ("acn.azure.com", "nodenetworkconfigs", "create"),
        ("acn.azure.com", "nodenetworkconfigs", "patch"),
        ("acn.azure.com", "nodenetworkconfigs", "delete"),
        ("acn.azure.com", "nodenetworkconfigs/status", "patch"),
        ("acn.azure.com", "clustersubnetstates", "create"),
        ("acn.azure.com", "clustersubnetstates/status", "update"),
        ("", "nodes", "watch"),
        ("", "pods", "list"),
        ("", "events", "create"),
    ]:
        assert needed in granted, needed


def test_setup_refuses_bad_options_before_touching_anything() -> None:
    """``setup`` parses the options first: a bad key fails with ConfigError, no cloud is built."""
    with pytest.raises(ConfigError, match=r"options\.nodeselector: unknown key"):
        setup(cast(Manager, object()), {"nodeselector": "a=b"})


def test_validate_options_checks_the_cloud_block_too() -> None:
    """check-config catches a missing or bad cloud block as well as bad pool options."""
    with pytest.raises(ConfigError, match=r"options\.cloud: expected a mapping"):
        validate_options({})
    with pytest.raises(ConfigError, match=r"options\.cloud\.subscriptionId: is required"):
        validate_options({"cloud": {}})
    validate_options({"cloud": {"subscriptionId": "s", "credential": {"kind": "workload-identity"}}})


def test_release_idle_is_refused_for_nodesubnet_with_the_reason() -> None:
    """CNS NodeSubnet has no release handshake and strands a refused update's addresses for good,
    so no release is safe: ``release: idle`` fails config validation and says why."""
    with pytest.raises(ConfigError) as caught:
        parse_options({"consumer": "nodesubnet", "release": "idle"})
    message = str(caught.value)
    assert message.startswith("options.release: idle is refused")
    assert "no release handshake" in message
    assert "for good" in message
    assert "\n" not in message
