"""The client factory: settings validation, credentials, and where our policies sit in each SDK
client's pipeline; then (with the emulator) real calls over HTTPS with a custom CA."""

from __future__ import annotations

from typing import Any

import pytest
from azure.core.pipeline.policies import RetryPolicy

from nodewright.cloud.budget import ArmBudgetPolicy
from nodewright.cloud.config import (
    CloudSettings,
    CredentialKind,
    CredentialSettings,
    StaticTokenCredential,
    build_credential,
)
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.errors import CloudError
from nodewright.cloud.factory import ReadRetryPolicy, build_clients
from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.cloud.throttle import (
    InMemoryCallCounter,
    MutationRateLimitPolicy,
    RequestCountingPolicy,
    RetryAfterGatePolicy,
)
from nodewright.cloud.tracing import ArmSpanPolicy
from tests.cloud.helpers import cloud_for

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"


def static_settings(**overrides: Any) -> CloudSettings:
    options: dict[str, Any] = {
        "subscription_id": SUBSCRIPTION,
        "arm_endpoint": "https://127.0.0.1:9/",
        "credential": CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="token"),
        "polling_interval": 0.05,
        "retry_total": 2,
    }
    options.update(overrides)
    return CloudSettings(**options)


def test_plain_http_endpoint_is_refused() -> None:
    """TLS is never turned off: an http:// ARM endpoint is a configuration error."""
    with pytest.raises(ValueError, match="https"):
        CloudSettings(subscription_id=SUBSCRIPTION, arm_endpoint="http://127.0.0.1:8080")


def test_defaults_are_the_public_cloud() -> None:
    """Without configuration: public ARM endpoint and its token scope."""
    settings = CloudSettings(subscription_id=SUBSCRIPTION)
    assert settings.endpoint == "https://management.azure.com"
    assert settings.scope == "https://management.azure.com/.default"
    assert "connection_verify" not in settings.client_options()


def test_ca_bundle_becomes_connection_verify_path() -> None:
    """A CA bundle adds trust through connection_verify=<path>; never False."""
    options = static_settings(ca_bundle="/tmp/ca.pem").client_options()
    assert options["connection_verify"] == "/tmp/ca.pem"
    assert options["credential_scopes"] == ["https://127.0.0.1:9/.default"]


def test_static_token_credential() -> None:
    """The static credential returns its token for any scope, in both azure-core token APIs."""
    credential = build_credential(CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="abc"))
    assert isinstance(credential, StaticTokenCredential)
    assert credential.get_token("https://x/.default").token == "abc"
    assert credential.get_token_info("https://x/.default").token == "abc"
    with pytest.raises(ValueError, match="static_token"):
        build_credential(CredentialSettings(kind=CredentialKind.STATIC_TOKEN))


def test_policies_sit_after_the_retry_policy_in_every_client() -> None:
    """Mutation bucket, gate and counter follow RetryPolicy, so they see every attempt; the gate
    comes after the bucket so that a write which waited for a token still checks it. Each client
    has its own chain (a policy object in two pipelines would pass one client's requests on to
    the other's policies), and its RetryPolicy resends reads only."""
    clients = build_clients(static_settings(), observer=InMemoryCallCounter())
    try:
        for client in (clients.compute, clients.network, clients.msi):
            chain = client._client._pipeline._impl_policies
            policies = [
                type(getattr(policy, "_policy", policy))  # SansIO policies are wrapped in a runner
                for policy in chain
            ]
            retry = next(index for index, kind in enumerate(policies) if issubclass(kind, RetryPolicy))
            assert policies[retry] is ReadRetryPolicy
            assert getattr(chain[retry], "_method_whitelist", None) == frozenset({"GET", "HEAD", "OPTIONS"})
            assert all(chain[index].next is chain[index + 1] for index in range(len(chain) - 1))
            assert policies[retry + 1 : retry + 6] == [
                ArmSpanPolicy,  # first: its span covers the waits of the policies after it
                MutationRateLimitPolicy,
                RetryAfterGatePolicy,
                ArmBudgetPolicy,
                RequestCountingPolicy,
            ]
            assert client._config.polling_interval == 0.05
    finally:
        clients.close()


# With the emulator ------------------------------------------------------------------------------


def test_real_clients_reach_the_emulator_over_https_with_its_ca(arm_emulator: ArmEmulator) -> None:
    """All three SDK clients, built by the factory, talk TLS to the emulator trusting only its CA."""
    group = "rg-factory"
    arm_emulator.estate.add_resource_group(group)
    vnet = arm_emulator.estate.add_virtual_network(group, "vnet", subnets={"nodes": "10.1.0.0/24"})
    identity_id = arm_emulator.estate.add_identity(group, "id-a")
    vm_id = arm_emulator.estate.add_virtual_machine(group, "vm-0", subnet_id=vnet + "/subnets/nodes")
    counter = InMemoryCallCounter()
    cloud = cloud_for(arm_emulator, observer=counter)
    try:
        machine = parse_provider_id("azure://" + vm_id)
        assert cloud.compute.get_instance(machine).computer_name == "vm-0"
        nic_id = (
            f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{group}"
            "/providers/Microsoft.Network/networkInterfaces/vm-0-nic"
        )
        assert cloud.network.get_network_interface(nic_id).primary_ip
        assert cloud.identities.get_identity(identity_id).client_id
    finally:
        cloud.close()
    assert counter.count(kind="call", outcome="success") == 3
    assert counter.count(kind="request", outcome="200") == 3


def test_untrusted_certificate_is_refused(arm_emulator: ArmEmulator) -> None:
    """Without the emulator's CA the TLS handshake fails: verification is on by default."""
    cloud = cloud_for(arm_emulator, ca_bundle=None, retry_total=0)
    try:
        with pytest.raises(CloudError):
            cloud.identities.get_identity(
                f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/rg/providers/"
                "Microsoft.ManagedIdentity/userAssignedIdentities/x"
            )
    finally:
        cloud.close()
    assert len(arm_emulator.requests) == 0
