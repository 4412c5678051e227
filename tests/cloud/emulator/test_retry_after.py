"""``Retry-After`` on long-running operations, as ARM documents it (sources in the emulator's
``long_running`` module): 10 s by default on every answer about an operation still running (the
write's own answer, InProgress status polls, 202 result polls), none once it ended or when it is
due at once, and none at all when turned off (state, admin endpoint, seed, command line). Raw
HTTPS, so the headers are read as sent; then what it does to the SDK's poller and our tracker."""

from __future__ import annotations

import threading
import time
import urllib.parse
from pathlib import Path

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.__main__ import _parse
from nodewright.cloud.emulator.state import DEFAULT_OPERATION_RETRY_AFTER
from nodewright.cloud.operations import OperationOutcome
from tests.cloud.emulator.conftest import GROUP, Estate
from tests.cloud.emulator.raw_https import Answer, call
from tests.cloud.helpers import cloud_for

NIC_PUT = "NetworkInterfaces.create_or_update"
NIC_DELETE = "NetworkInterfaces.delete"
STATUS = "Operations.status"
API = "?api-version=2024-05-01"


def _nic_path(name: str) -> str:
    return (
        f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}"
        f"/providers/Microsoft.Network/networkInterfaces/{name}"
    )


def _put_nic(emulator: ArmEmulator, estate: Estate, name: str) -> Answer:
    body = {
        "location": "eastus",
        "properties": {
            "ipConfigurations": [
                {"name": "primary", "properties": {"primary": True, "subnet": {"id": estate.subnet_id}}}
            ]
        },
    }
    return call(emulator, "PUT", _nic_path(name) + API, body=body, token="t")


def _retry_after(emulator: ArmEmulator) -> float | None:
    return emulator.state.operation_retry_after


def _follow(emulator: ArmEmulator, url: str) -> Answer:
    parsed = urllib.parse.urlsplit(url)
    return call(emulator, "GET", f"{parsed.path}?{parsed.query}", token="t")


def test_a_running_operation_is_paced_at_ten_seconds(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """A NIC PUT whose operation runs 2 s: its 201 says Retry-After 10, as does the status poll
    answering InProgress; once the operation ended, the status answer has none."""
    arm_emulator.faults.slow_operations(2.0, NIC_PUT)
    answer = _put_nic(arm_emulator, estate, "nic-paced")
    assert answer.status == 201
    assert answer.headers["retry-after"] == "10"
    status = _follow(arm_emulator, answer.headers["azure-asyncoperation"])
    assert (status.status, status.body["status"]) == (200, "InProgress")
    assert status.headers["retry-after"] == "10"
    time.sleep(2.1)
    done = _follow(arm_emulator, answer.headers["azure-asyncoperation"])
    assert done.body["status"] == "Succeeded"
    assert "retry-after" not in done.headers


def test_a_delete_answers_202_with_retry_after(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """A DELETE whose operation runs: 202 with Location and Retry-After; the result URL answers
    202 with Retry-After while it runs, then 204 without."""
    assert _put_nic(arm_emulator, estate, "nic-gone").status == 201
    arm_emulator.faults.slow_operations(1.0, NIC_DELETE)
    answer = call(arm_emulator, "DELETE", _nic_path("nic-gone") + API, token="t")
    assert (answer.status, answer.headers["retry-after"]) == (202, "10")
    result = _follow(arm_emulator, answer.headers["location"])
    assert (result.status, result.headers["retry-after"]) == (202, "10")
    time.sleep(1.1)
    finished = _follow(arm_emulator, answer.headers["location"])
    assert finished.status == 204
    assert "retry-after" not in finished.headers


def test_an_operation_due_at_once_carries_none(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """Duration 0 (the emulator's default): over before a poll can come, so no Retry-After."""
    answer = _put_nic(arm_emulator, estate, "nic-quick")
    assert answer.status == 201
    assert "azure-asyncoperation" in answer.headers
    assert "retry-after" not in answer.headers
    assert _follow(arm_emulator, answer.headers["azure-asyncoperation"]).body["status"] == "Succeeded"


def test_retry_after_can_be_turned_off(arm_emulator: ArmEmulator, estate: Estate, tmp_path: Path) -> None:
    """The default is 10; the admin endpoint's ``retryAfter: null`` turns it off (so does a
    seed's ``operationRetryAfterSeconds: null`` and ``--retry-after 0``)."""
    assert arm_emulator.state.operation_retry_after == DEFAULT_OPERATION_RETRY_AFTER == 10.0
    off = call(arm_emulator, "POST", "/_emulator/operation-duration", body={"retryAfter": None})
    assert off.body["retryAfter"] is None
    arm_emulator.faults.slow_operations(2.0, NIC_PUT)
    answer = _put_nic(arm_emulator, estate, "nic-unpaced")
    assert "retry-after" not in answer.headers
    assert "retry-after" not in _follow(arm_emulator, answer.headers["azure-asyncoperation"]).headers
    arm_emulator.estate.apply({"operationRetryAfterSeconds": 3})
    assert _retry_after(arm_emulator) == 3.0
    arm_emulator.estate.apply({"operationRetryAfterSeconds": None})
    assert _retry_after(arm_emulator) is None
    assert _parse(["--state-dir", str(tmp_path), "--retry-after", "0"]).retry_after == 0.0


def test_the_tracker_waits_for_it_and_polls_once(arm_emulator: ArmEmulator, estate: Estate) -> None:
    """A begun NIC write whose operation runs 1 s: the tracker polls no sooner than the answer's
    10 s (its own interval is 0) and then once, finding it Succeeded: one poll per write."""
    arm_emulator.estate.add_virtual_machine(GROUP, "vm-tracked", subnet_id=estate.subnet_id)
    nic_id = _nic_path("vm-tracked-nic")
    arm_emulator.faults.slow_operations(1.0, NIC_PUT)
    cloud = cloud_for(arm_emulator)
    ended: list[OperationOutcome] = []
    done = threading.Event()

    def on_done(outcome: OperationOutcome) -> None:
        ended.append(outcome)
        done.set()

    try:
        assert cloud.network.begin_add_secondary_ip_configurations(nic_id, ["a"], on_done=on_done)
        assert done.wait(30)
    finally:
        cloud.close()
    [put] = arm_emulator.requests.entries(NIC_PUT)
    polls = arm_emulator.requests.entries(STATUS)
    assert ended[0].succeeded
    assert len(polls) == 1
    assert polls[0].monotonic - put.monotonic >= 9.9
