"""A reconciler's ``cloud`` options become its manager's one Cloud, whose calls are counted in metrics."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.cloud.config import CredentialKind
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.controllers.cloud_access import ManagerClouds, parse_cloud_settings, settings_as_options
from nodewright.runtime.observe.metrics import Metrics
from nodewright.runtime.process.config import ConfigError


def test_parses_a_full_block() -> None:
    """camelCase keys map onto CloudSettings; integers are accepted for float fields."""
    settings = parse_cloud_settings(
        {
            "subscriptionId": "sub",
            "armEndpoint": "https://127.0.0.1:8443",
            "caBundle": "/etc/ca.pem",
            "mutationQps": 4,
            "mutationBurst": 20,
            "credential": {"kind": "workload-identity", "clientId": "abc"},
        }
    )
    assert settings.subscription_id == "sub"
    assert settings.mutation_qps == 4.0
    assert settings.credential.kind is CredentialKind.WORKLOAD_IDENTITY
    assert settings.credential.client_id == "abc"
    assert parse_cloud_settings(settings_as_options(settings)) == settings


@pytest.mark.parametrize(
    ("block", "message"),
    [
        pytest.param(None, "cloud: expected a mapping", id="missing"),
        pytest.param({}, "cloud.subscriptionId: is required", id="no-subscription"),
        pytest.param(
            {"subscriptionId": "s", "mutationQps": "fast"},
            "cloud.mutationQps: expected float",
            id="wrong-type",
        ),
        pytest.param(
            {"subscriptionId": "s", "subscription": "s"}, "cloud.subscription: unknown key", id="unknown-key"
        ),
        pytest.param(
            {"subscriptionId": "s", "credential": {"kind": "password"}},
            "cloud.credential.kind: expected one of",
            id="bad-credential-kind",
        ),
        pytest.param(
            {"subscriptionId": "s", "armEndpoint": "http://x"},
            "cloud: ARM endpoint must use https",
            id="plain-http-refused",
        ),
    ],
)
def test_bad_blocks_fail_with_one_line_naming_the_key(block: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_cloud_settings(block)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_same_settings_share_one_cloud_and_calls_are_counted(arm_emulator: ArmEmulator) -> None:
    """Two reconcilers with equal blocks get the same Cloud; its ARM calls reach /metrics."""
    metrics = Metrics()
    clouds = ManagerClouds(metrics, lambda _operation: None)
    options = {
        "cloud": {
            "subscriptionId": DEFAULT_SUBSCRIPTION,
            "armEndpoint": arm_emulator.endpoint,
            "caBundle": str(arm_emulator.ca_file),
            "pollingInterval": 0,
            "credential": {"kind": "static-token", "staticToken": "emulator-token"},
        }
    }
    first, second = clouds.from_options(options), clouds.from_options(dict(options))
    assert first is second
    assert clouds.cloud(parse_cloud_settings(options["cloud"])) is first
    arm_emulator.estate.add_resource_group("rg-access")
    identity_id = arm_emulator.estate.add_identity("rg-access", "id-a")
    assert first.identities.get_identity(identity_id).client_id
    text = metrics.render().decode()
    assert 'nodewright_azure_calls_total{operation="msi.get_identity",outcome="success"}' in text
    assert "nodewright_azure_requests_total{" in text
