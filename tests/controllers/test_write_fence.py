"""The write fence on the ARM side, through the real SDK against the emulator: the guard policy
refuses a write before it is sent (and each retry again), the guarded transport checks at the
last moment, reads pass, and the emulator records who called."""

from __future__ import annotations

import pytest
from azure.mgmt.compute.models import VirtualMachineScaleSetUpdate

from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.factory import Cloud, build_cloud
from nodewright.controllers import cloud_access
from nodewright.runtime.kube.fence import FencedWriteError, WriteFence
from nodewright.runtime.observe.metrics import Metrics

GROUP = "rg-fence"


def settings_for(emulator: ArmEmulator, token: str) -> CloudSettings:
    return CloudSettings(
        subscription_id=DEFAULT_SUBSCRIPTION,
        arm_endpoint=emulator.endpoint,
        credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token=token),
        ca_bundle=str(emulator.ca_file),
        polling_interval=0.0,
        retry_backoff_factor=0.2,
        mutation_qps=1000.0,
        mutation_burst=1000,
    )


@pytest.fixture
def scale_set(arm_emulator: ArmEmulator) -> str:
    arm_emulator.estate.add_resource_group(GROUP)
    vnet = arm_emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.240.0.0/24"})
    arm_emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=vnet + "/subnets/nodes", capacity=1)
    return "vmss-a"


@pytest.fixture
def installed_fence() -> WriteFence:
    return WriteFence(renew_deadline=2.0, margin=0.5, metrics=Metrics())


def tag(cloud: Cloud, value: str) -> None:
    scale_sets = cloud.clients.compute.virtual_machine_scale_sets
    scale_sets.begin_update(GROUP, "vmss-a", VirtualMachineScaleSetUpdate(tags={"t": value})).result()


def test_fenced_cloud_refuses_arm_writes_unsent_and_lets_reads_through(
    arm_emulator: ArmEmulator, scale_set: str, installed_fence: WriteFence
) -> None:
    """With the fence open a PATCH goes out under the caller's token; closed, it is refused with
    FencedWriteError and the emulator sees no write, while GETs still pass."""
    settings = settings_for(arm_emulator, "token-a")
    cloud = cloud_access.ManagerClouds(Metrics(), installed_fence.guard("arm")).cloud(settings)
    installed_fence.renewed(installed_fence._clock())
    tag(cloud, "while-leading")
    installed_fence.revoke()
    with pytest.raises(FencedWriteError):
        tag(cloud, "after-loss")
    stored = cloud.clients.compute.virtual_machine_scale_sets.get(GROUP, scale_set)
    assert stored.tags == {"t": "while-leading"}
    writes = [entry for entry in arm_emulator.requests.entries() if entry.method != "GET"]
    print(f"arm_writes_sent={len(writes)} tokens={sorted({str(w.bearer_token) for w in writes})}")  # noqa: T201
    assert [(w.method, w.bearer_token) for w in writes] == [("PATCH", "token-a")]
    cloud.close()


def test_each_retry_is_checked_again(arm_emulator: ArmEmulator, scale_set: str) -> None:
    """Every attempt azure-core makes meets the guard again: a retry whose back-off outlasted the
    leadership is refused and only the first attempt reached ARM. In production azure-core
    retries transport failures only (``retry_status`` 0); this test turns status retries on so
    that a 503 from the emulator makes the SDK retry deterministically."""
    calls: list[str] = []

    def guard(operation: str) -> None:
        calls.append(operation)
        if len(calls) > 1:
            raise FencedWriteError("arm", operation, None)

    arm_emulator.faults.server_error("VirtualMachineScaleSets.update", times=1, status=503)
    cloud = build_cloud(settings_for(arm_emulator, "token-b"), write_guard=guard, retry_status=1)
    with pytest.raises(FencedWriteError):
        tag(cloud, "retried")
    attempts = arm_emulator.requests.count("VirtualMachineScaleSets.update")
    print(f"guard_calls={len(calls)} attempts_at_arm={attempts}")  # noqa: T201
    assert attempts == 1
    assert len(calls) == 2
    assert calls[0].startswith("PATCH /subscriptions/")
    cloud.close()
