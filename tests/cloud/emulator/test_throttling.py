"""The emulator limits requests as Azure does: ARM token buckets per subscription, principal and
class; Compute policies with 3- and 30-minute windows; the rate-limit headers on every answer;
429 in ARM's shape and in the Compute provider's (sometimes without Retry-After)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.compute.models import VirtualMachineScaleSetUpdate

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.emulator.throttling import BucketLimit, PolicyLimit, RequestLimits, Throttling
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients, sdk_clients


def _headers(pipeline_response: Any, deserialized: Any, headers: Any) -> dict[str, str]:
    return {key.lower(): value for key, value in pipeline_response.http_response.headers.items()}


def _scale_set_get(clients: Clients, estate: Estate) -> dict[str, str]:
    headers: Any = clients.compute.virtual_machine_scale_sets.get(estate.group, "vmss-a", cls=_headers)
    return dict(headers)


def _patch_tags(clients: Clients, estate: Estate, value: str) -> None:
    clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-a", VirtualMachineScaleSetUpdate(tags={"round": value})
    ).result()


def test_every_answer_reports_what_is_left(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """Reads report the read bucket and Compute's two windows, counting down (the clock stands
    still, so nothing refills); a network read reports the read bucket but no Compute policy."""
    arm_emulator.throttling = Throttling(clock=lambda: 1000.0)
    clients = sdk_clients(arm_emulator)
    first = _scale_set_get(clients, estate)
    second = _scale_set_get(clients, estate)
    assert first["x-ms-ratelimit-remaining-subscription-reads"] == "249"
    assert second["x-ms-ratelimit-remaining-subscription-reads"] == "248"
    assert first["x-ms-ratelimit-remaining-resource"] == (
        "Microsoft.Compute/GetVMScaleSet3Min;2399,Microsoft.Compute/GetVMScaleSet30Min;23999"
    )
    assert second["x-ms-ratelimit-remaining-resource"] == (
        "Microsoft.Compute/GetVMScaleSet3Min;2398,Microsoft.Compute/GetVMScaleSet30Min;23998"
    )
    network = clients.network.virtual_networks.get(estate.group, estate.vnet_name, cls=_headers)
    assert "x-ms-ratelimit-remaining-subscription-reads" in network
    assert network["x-ms-ratelimit-remaining-subscription-reads"] == "247"
    assert "x-ms-ratelimit-remaining-resource" not in network


def test_writes_and_deletes_report_their_own_bucket(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """A PATCH draws on the write bucket, a DELETE on the delete bucket (200 each)."""
    clients = sdk_clients(arm_emulator)
    poller = clients.compute.virtual_machine_scale_sets.begin_update(
        estate.group, "vmss-a", VirtualMachineScaleSetUpdate(tags={"a": "b"})
    )
    polling: Any = poller.polling_method()
    initial = polling._initial_response.http_response.headers
    assert initial["x-ms-ratelimit-remaining-subscription-writes"] == "199"
    assert "PutVMScaleSet3Min" in initial["x-ms-ratelimit-remaining-resource"]
    poller.result()
    deleted = clients.identity.user_assigned_identities.delete(
        estate.group, "id-2", cls=lambda response, *_: response.http_response.headers
    )
    assert deleted["x-ms-ratelimit-remaining-subscription-deletes"] == "199"


def test_an_empty_write_bucket_answers_too_many_requests(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """Write bucket of 3 at 0.5/s: the fourth PATCH at once is 429 TooManyRequests with a
    Retry-After of the seconds until a token is back; reads are not affected."""
    arm_emulator.throttling.configure(
        RequestLimits(enforce=True, buckets={**RequestLimits().buckets, "writes": BucketLimit(3, 0.5)})
    )
    clients = sdk_clients(arm_emulator, retry_total=0)
    for round_number in range(3):
        _patch_tags(clients, estate, str(round_number))
    with pytest.raises(HttpResponseError) as caught:
        _patch_tags(clients, estate, "3")
    assert caught.value.status_code == 429
    assert caught.value.error is not None
    assert caught.value.error.code == "TooManyRequests"
    response: Any = caught.value.response
    assert response is not None
    assert response.headers["Retry-After"] == "2"
    assert response.headers["x-ms-ratelimit-remaining-subscription-writes"] == "0"
    assert _scale_set_get(clients, estate)["x-ms-ratelimit-remaining-subscription-reads"]


def test_buckets_are_per_principal(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """Another bearer token (another principal) has its own full bucket."""
    arm_emulator.throttling.configure(
        RequestLimits(enforce=True, buckets={**RequestLimits().buckets, "writes": BucketLimit(1, 0.1)})
    )
    clients = sdk_clients(arm_emulator, retry_total=0)
    _patch_tags(clients, estate, "1")
    with pytest.raises(HttpResponseError):
        _patch_tags(clients, estate, "2")
    other = sdk_clients(arm_emulator, retry_total=0)
    other.compute._config.credential._token = "another-principal"  # type: ignore[attr-defined]
    _patch_tags(other, estate, "3")


def test_a_spent_compute_policy_answers_operation_not_allowed(
    arm_emulator: ArmEmulator, estate: Estate
) -> None:
    """GetVMScaleSet allows 2 per 3 minutes: the next two GETs are 429 OperationNotAllowed naming
    GetVMScaleSet3Min in details; one of the two carries Retry-After, the other does not."""
    limits = RequestLimits(enforce=True)
    limits.policies["GetVMScaleSet"] = PolicyLimit(2, 100)
    arm_emulator.throttling.configure(limits)
    clients = sdk_clients(arm_emulator, retry_total=0)
    _scale_set_get(clients, estate)
    _scale_set_get(clients, estate)
    answers = []
    for _ in range(2):
        with pytest.raises(HttpResponseError) as caught:
            _scale_set_get(clients, estate)
        response: Any = caught.value.response
        assert response is not None
        assert response.status_code == 429
        body = json.loads(response.text())
        assert body["error"]["code"] == "OperationNotAllowed"
        assert [detail["target"] for detail in body["error"]["details"]] == ["GetVMScaleSet3Min"]
        assert "GetVMScaleSet3Min;0" in response.headers["x-ms-ratelimit-remaining-resource"]
        answers.append("Retry-After" in response.headers)
    assert sorted(answers) == [False, True]
    # Another family is not affected.
    clients.compute.virtual_machine_scale_set_vms.get(estate.group, "vmss-a", "0")


def test_an_injected_compute_throttle_has_no_retry_after(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """The fault injector's Compute throttle: 429 OperationNotAllowed, the policy in details,
    no Retry-After; the next call goes through."""
    arm_emulator.faults.compute_throttle("VirtualMachineScaleSets.get", policy="GetVMScaleSet30Min")
    clients = sdk_clients(arm_emulator, retry_total=0)
    with pytest.raises(HttpResponseError) as caught:
        _scale_set_get(clients, estate)
    response: Any = caught.value.response
    assert response is not None
    assert response.status_code == 429
    assert "Retry-After" not in response.headers
    body = json.loads(response.text())
    assert body["error"]["details"][0]["target"] == "GetVMScaleSet30Min"
    assert _scale_set_get(clients, estate)


def test_instance_updates_follow_azures_published_bucket() -> None:
    """Azure publishes "Update VMSS VMs" as a subscription bucket of 1,500 refilled at 500 a
    minute: 1,500 instance PUTs go at once (one 1,000-node cold start fits), the next is
    throttled, and 500 a minute are sustained (the window gives the burst back after 3 minutes)."""
    now = [0.0]
    unbounded = {kind: BucketLimit(10**6, 10**6) for kind in ("reads", "writes", "deletes")}
    throttling = Throttling(RequestLimits(enforce=True, buckets=unbounded), clock=lambda: now[0])

    def put() -> None:
        throttling.admit(
            method="PUT", operation="VirtualMachineScaleSetVMs.update", subscription="s", principal="p"
        )

    for _ in range(1_500):
        put()
    with pytest.raises(ArmError) as refused:
        put()
    assert refused.value.status == 429
    assert "PutVMScaleSetVM3Min" in json.dumps(refused.value.details)
    now[0] = 180.0
    for _ in range(1_500):
        put()
