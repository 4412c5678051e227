"""The order of the checks every ARM request passes (nodewright.cloud.emulator.guards), over
real HTTPS: which refusal wins when two apply, that a refused request consumes no later fault,
applies no write and (when the limits refuse it) takes no token, and that a body is parsed once
and a malformed one answers 400 in ARM's error shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.compute import models

from nodewright.cloud.emulator import ArmEmulator, FaultKind
from nodewright.cloud.emulator.throttling import BucketLimit, RequestLimits, Throttling
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.raw_https import call
from tests.cloud.emulator.sdk_clients import sdk_clients

API_VERSION = "?api-version=2024-07-01"
MALFORMED = b'{"tags": '


FAULTS: dict[str, Callable[[ArmEmulator], object]] = {
    "throttle": lambda emulator: emulator.faults.throttle(path="*"),
    "compute_throttle": lambda emulator: emulator.faults.compute_throttle(path="*"),
    "server_error": lambda emulator: emulator.faults.server_error(path="*", status=503),
    "operation_failure": lambda emulator: emulator.faults.fail_operation(path="*"),
    "operation_duration": lambda emulator: emulator.faults.slow_operations(5.0, path="*", times=1),
    "no_reads_left": lambda emulator: emulator.throttling.configure(
        RequestLimits(enforce=True, buckets={**RequestLimits().buckets, "reads": BucketLimit(0, 1.0)})
    ),
}
"""What a race sets up: faults by kind, or the read bucket spent."""

WON_BY_A_FAULT = {
    "429 OperationNotAllowed": "compute_throttle",
    "429 TooManyRequests": "throttle",
    "503 InternalServerError": "server_error",
}
"""Answers that come from an injected fault: that fault is used up, every other one stays."""

RACES = {
    "unknown route > no token": ("throttle", "GET nowhere no-token", "404 NoRegisteredProviderFound"),
    "no token > no api-version": ("throttle", "GET vm no-token no-version", "401 AuthenticationFailed"),
    "no token > throttle": ("throttle", "GET vm no-token", "401 AuthenticationFailed"),
    "no api-version > throttle": ("throttle", "GET vm no-version", "400 MissingApiVersionParameter"),
    "limits > throttle": ("no_reads_left,throttle", "GET vm", "429 Number of 'read'"),
    "compute throttle > throttle": ("throttle,compute_throttle", "GET vm", "429 OperationNotAllowed"),
    "throttle > server error": ("server_error,throttle", "GET vm", "429 TooManyRequests"),
    "5xx > body": ("operation_failure,server_error", "PATCH vmss not-json", "503 InternalServerError"),
    "body > LRO": (
        "operation_failure,operation_duration", "PATCH vmss not-json", "400 InvalidRequestContent"
    ),
}  # fmt: skip
"""Which refusal wins: (what is set up, the request, what must answer: its status and error
code or the start of its message)."""


@pytest.mark.parametrize(("setup", "request_sent", "winner"), list(RACES.values()), ids=list(RACES))
def test_the_first_refusal_wins_and_later_faults_stay(
    arm_emulator: ArmEmulator, estate: Estate, setup: str, request_sent: str, winner: str
) -> None:
    """The earlier guard answers; no injected fault of a later guard is fired or used up; the
    scale set is untouched."""
    for name in setup.split(","):
        FAULTS[name](arm_emulator)
    before = arm_emulator.state.render(estate.scale_set_id)
    method, target, *flags = request_sent.split()
    path = {"vm": estate.vm_id, "vmss": estate.scale_set_id, "nowhere": "/subscriptions/s/nothing"}[target]
    answer = call(
        arm_emulator,
        method,
        path + ("" if "no-version" in flags else API_VERSION),
        token=None if "no-token" in flags else "token",
        body=MALFORMED if "not-json" in flags else None,
    )
    status, expected = winner.split(" ", 1)
    error = answer.body["error"]
    assert answer.status == int(status)
    assert expected in (error["code"], error["message"][: len(expected)])
    left = arm_emulator.faults.active()
    expected_left = [name for name in setup.split(",") if name in FaultKind.__members__.values()]
    if winner in WON_BY_A_FAULT:
        expected_left.remove(WON_BY_A_FAULT[winner])
    assert sorted(str(fault.kind) for fault in left) == sorted(expected_left)
    assert all(fault.fired == 0 for fault in left)
    assert arm_emulator.state.render(estate.scale_set_id) == before
    assert [entry.status for entry in arm_emulator.requests.entries()] == [int(status)]


def test_what_comes_before_the_limits_is_not_counted(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """A request refused for its token or api-version takes no token and carries no rate-limit
    header; one the limits admitted carries them on a later refusal too (an injected 429)."""
    arm_emulator.throttling = Throttling(clock=lambda: 1000.0)
    unauthorized = call(arm_emulator, "GET", estate.vm_id + API_VERSION)
    no_version = call(arm_emulator, "GET", estate.vm_id, token="token")
    assert (unauthorized.status, no_version.status) == (401, 400)
    for refused in (unauthorized, no_version):
        assert not any(name.startswith("x-ms-ratelimit") for name in refused.headers)
    assert unauthorized.headers["www-authenticate"].startswith("Bearer authorization_uri=")
    arm_emulator.faults.throttle("VirtualMachines.get", retry_after=2.5)
    throttled = call(arm_emulator, "GET", estate.vm_id + API_VERSION, token="token")
    assert (throttled.status, throttled.headers["retry-after"]) == (429, "3")
    assert throttled.headers["x-ms-ratelimit-remaining-subscription-reads"] == "249"
    assert "Microsoft.Compute/LowCostGet3Min;5999" in throttled.headers["x-ms-ratelimit-remaining-resource"]
    served = call(arm_emulator, "GET", estate.vm_id + API_VERSION, token="token")
    assert served.status == 200
    assert served.headers["x-ms-ratelimit-remaining-subscription-reads"] == "248"


def test_a_throttled_write_is_not_applied_and_takes_no_token(
    arm_emulator: ArmEmulator, estate: Estate
) -> None:
    """Through the SDK, write bucket of 1 refilled at 1/s on a clock the test moves: the second
    PATCH at once is 429 and is not applied; it used up neither a token (one second later a
    write is served) nor the operation failure waiting for the next accepted write."""
    now = [1000.0]
    arm_emulator.throttling = Throttling(
        RequestLimits(enforce=True, buckets={**RequestLimits().buckets, "writes": BucketLimit(1, 1.0)}),
        clock=lambda: now[0],
    )
    scale_sets = sdk_clients(arm_emulator, retry_total=0).compute.virtual_machine_scale_sets

    def patch_tags(value: str) -> Any:
        update = models.VirtualMachineScaleSetUpdate(tags={"round": value})
        return scale_sets.begin_update(estate.group, "vmss-a", update)

    patch_tags("first").result()
    arm_emulator.faults.fail_operation("VirtualMachineScaleSets.update")
    with pytest.raises(HttpResponseError) as raised:
        patch_tags("throttled")
    assert raised.value.status_code == 429
    assert raised.value.response is not None
    assert raised.value.response.headers["x-ms-ratelimit-remaining-subscription-writes"] == "0"  # type: ignore[attr-defined]
    assert arm_emulator.state.render(estate.scale_set_id)["tags"] == {"round": "first"}  # type: ignore[index]
    assert [fault.fired for fault in arm_emulator.faults.active()] == [0]
    now[0] += 1.0
    with pytest.raises(HttpResponseError, match="InternalExecutionError"):
        patch_tags("accepted, then failed").result()
    updates = arm_emulator.requests.entries("VirtualMachineScaleSets.update")
    assert [(entry.status, entry.fault) for entry in updates] == [
        (200, None),
        (429, None),
        (200, "operation_failure"),
    ]
    assert arm_emulator.faults.active() == []


def test_a_malformed_body_is_a_400_in_arm_shape(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """A body that is not JSON: 400 InvalidRequestContent with the parser's reason, JSON content
    type and the rate-limit headers; logged with no body, and nothing written."""
    before = arm_emulator.state.render(estate.scale_set_id)
    answer = call(arm_emulator, "PATCH", estate.scale_set_id + API_VERSION, token="token", body=MALFORMED)
    assert answer.status == 400
    assert answer.body == {
        "error": {
            "code": "InvalidRequestContent",
            "message": "The request content is not JSON: Expecting value: line 1 column 10 (char 9)",
        }
    }
    assert answer.headers["content-type"] == "application/json; charset=utf-8"
    assert answer.headers["x-ms-ratelimit-remaining-subscription-writes"] == "199"
    (entry,) = arm_emulator.requests.entries()
    assert (entry.operation, entry.status, entry.body) == ("VirtualMachineScaleSets.update", 400, None)
    assert arm_emulator.state.render(estate.scale_set_id) == before


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        pytest.param(b'{"tags": {"parsed": "once"}}', 200, id="JSON"),
        pytest.param(b'{"tags": {"parsed": ', 400, id="not JSON"),
    ],
)
def test_a_body_is_parsed_once(
    arm_emulator: ArmEmulator, estate: Estate, monkeypatch: pytest.MonkeyPatch, sent: bytes, status: int
) -> None:
    """Every parse of the request's bytes in this process is counted (the handler, the log and
    the checks share one): exactly one, whether it is JSON or not."""
    parses: list[object] = []
    parse = json.loads

    def counting(document: Any, *args: Any, **kwargs: Any) -> Any:
        if document in (sent, sent.decode()):
            parses.append(document)
        return parse(document, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    answer = call(arm_emulator, "PATCH", estate.scale_set_id + API_VERSION, token="token", body=sent)
    assert answer.status == status
    assert len(parses) == 1


def test_the_log_keeps_the_body_as_it_arrived(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """The handler keeps and completes parts of a PUT body (a VM's storage profile); the request
    log still holds the document as it was sent."""
    group = estate.vm_id.split("/providers/")[0]
    document = {
        "location": "eastus",
        "tags": {"kept": "as sent"},
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v5"},
            "storageProfile": {
                "imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server"},
                "osDisk": {"createOption": "FromImage"},
            },
            "osProfile": {"computerName": "vm-1", "adminUsername": "azureuser"},
            "networkProfile": {
                "networkInterfaces": [
                    {"id": f"{group}/providers/Microsoft.Network/networkInterfaces/vm-0-nic"}
                ]
            },
        },
    }
    vm_id = f"{group}/providers/Microsoft.Compute/virtualMachines/vm-1"
    answer = call(arm_emulator, "PUT", vm_id + API_VERSION, body=document, token="token")
    assert answer.status == 201, answer.body
    stored = arm_emulator.state.render(vm_id)
    assert stored is not None
    assert stored["properties"]["storageProfile"] != document["properties"]["storageProfile"]  # type: ignore[index]
    (entry,) = arm_emulator.requests.entries("VirtualMachines.create_or_update")
    assert entry.body == document
