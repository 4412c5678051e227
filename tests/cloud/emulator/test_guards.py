"""The order of the checks every ARM request passes (nodewright.cloud.emulator.guards), over
real HTTPS: which refusal wins when two apply, that a refused request consumes no later fault,
applies no write and (when the limits refuse it) takes no token, and that a body is parsed once
and a malformed one answers 400 in ARM's error shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.compute import models

from nodewright.cloud.emulator import ArmEmulator, Fault
from nodewright.cloud.emulator.throttling import BucketLimit, RequestLimits, Throttling
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.raw_https import call
from tests.cloud.emulator.sdk_clients import sdk_clients

API_VERSION = "?api-version=2024-07-01"
MALFORMED = b'{"tags": '


def _no_reads_left_and_a_throttle(emulator: ArmEmulator) -> Fault:
    emulator.throttling.configure(
        RequestLimits(enforce=True, buckets={**RequestLimits().buckets, "reads": BucketLimit(0, 1.0)})
    )
    return emulator.faults.throttle("VirtualMachines.get")


@dataclass(frozen=True)
class Race:
    """Two refusals apply to one request; ``winner`` is the ARM error code (and message start)
    that must answer, and every injected fault left over must be unfired."""

    inject: Callable[[ArmEmulator], object]
    method: str
    target: str  # "vm", "scale set" or "nowhere"
    token: str | None
    api_version: bool
    raw: bytes | None
    status: int
    winner: tuple[str, str]
    faults_left: int


RACES = [
    pytest.param(
        Race(
            lambda emulator: emulator.faults.throttle(path="*"),
            "GET", "nowhere", None, True, None,
            404, ("NoRegisteredProviderFound", "No registered resource provider"), 1,
        ),
        id="an unknown route beats no token",
    ),
    pytest.param(
        Race(
            lambda emulator: emulator.faults.throttle("VirtualMachines.get"),
            "GET", "vm", None, False, None,
            401, ("AuthenticationFailed", "Authentication failed."), 1,
        ),
        id="no token beats a missing api-version",
    ),
    pytest.param(
        Race(
            lambda emulator: emulator.faults.throttle("VirtualMachines.get"),
            "GET", "vm", None, True, None,
            401, ("AuthenticationFailed", "Authentication failed."), 1,
        ),
        id="no token beats an injected throttle",
    ),
    pytest.param(
        Race(
            lambda emulator: emulator.faults.throttle("VirtualMachines.get"),
            "GET", "vm", "token", False, None,
            400, ("MissingApiVersionParameter", "The api-version query parameter"), 1,
        ),
        id="a missing api-version beats an injected throttle",
    ),
    pytest.param(
        Race(
            _no_reads_left_and_a_throttle,
            "GET", "vm", "token", True, None,
            429, ("TooManyRequests", "Number of 'read' requests"), 1,
        ),
        id="spent limits beat an injected throttle",
    ),
    pytest.param(
        Race(
            lambda emulator: (
                emulator.faults.compute_throttle("VirtualMachines.get"),
                emulator.faults.throttle("VirtualMachines.get"),
            ),
            "GET", "vm", "token", True, None,
            429, ("OperationNotAllowed", "The server rejected the request"), 1,
        ),
        id="an injected Compute throttle beats an injected throttle",
    ),
    pytest.param(
        Race(
            lambda emulator: (
                emulator.faults.server_error("VirtualMachines.get"),
                emulator.faults.throttle("VirtualMachines.get"),
            ),
            "GET", "vm", "token", True, None,
            429, ("TooManyRequests", "The request is being throttled."), 1,
        ),
        id="an injected throttle beats an injected server error",
    ),
    pytest.param(
        Race(
            lambda emulator: (
                emulator.faults.fail_operation("VirtualMachineScaleSets.update"),
                emulator.faults.server_error("VirtualMachineScaleSets.update", status=503),
            ),
            "PATCH", "scale set", "token", True, MALFORMED,
            503, ("InternalServerError", "An injected server error occurred."), 1,
        ),
        id="an injected server error beats a malformed body",
    ),
    pytest.param(
        Race(
            lambda emulator: (
                emulator.faults.fail_operation("VirtualMachineScaleSets.update"),
                emulator.faults.slow_operations(5.0, "VirtualMachineScaleSets.update", times=1),
            ),
            "PATCH", "scale set", "token", True, MALFORMED,
            400, ("InvalidRequestContent", "The request content is not JSON"), 2,
        ),
        id="a malformed body beats the long-running operation's faults",
    ),
]  # fmt: skip


@pytest.mark.parametrize("race", RACES)
def test_the_first_refusal_wins_and_later_faults_stay(
    arm_emulator: ArmEmulator, estate: Estate, race: Race
) -> None:
    """The earlier guard answers; the later guard's fault is neither fired nor used up; the
    scale set is untouched."""
    race.inject(arm_emulator)
    before = arm_emulator.state.render(estate.scale_set_id)
    target = {"vm": estate.vm_id, "scale set": estate.scale_set_id, "nowhere": "/subscriptions/s/nothing"}
    path = target[race.target] + (API_VERSION if race.api_version else "")
    answer = call(arm_emulator, race.method, path, token=race.token, raw=race.raw)
    code, message_start = race.winner
    assert (answer.status, answer.body["error"]["code"]) == (race.status, code)
    assert answer.body["error"]["message"].startswith(message_start)
    left = arm_emulator.faults.active()
    assert len(left) == race.faults_left
    assert all(fault.fired == 0 for fault in left)
    assert arm_emulator.state.render(estate.scale_set_id) == before
    assert [entry.status for entry in arm_emulator.requests.entries()] == [race.status]


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
    assert "Microsoft.Compute/LowCostGet3Min;3999" in throttled.headers["x-ms-ratelimit-remaining-resource"]
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
    answer = call(arm_emulator, "PATCH", estate.scale_set_id + API_VERSION, token="token", raw=MALFORMED)
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
    answer = call(arm_emulator, "PATCH", estate.scale_set_id + API_VERSION, token="token", raw=sent)
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
