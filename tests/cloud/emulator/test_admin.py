"""The admin endpoints under /_emulator/ over real HTTPS: each action, its errors (not JSON,
a bad field, an unknown action or method), no auth needed, and nothing of it in the request log."""

from __future__ import annotations

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.raw_https import call
from tests.cloud.emulator.sdk_clients import Clients


def test_admin_endpoint_injects_faults_and_reports_requests(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """POST /_emulator/faults adds a throttle; GET /_emulator/requests lists what arrived."""
    added = call(
        arm_emulator,
        "POST",
        "/_emulator/faults",
        body={"kind": "throttle", "operation": "VirtualMachines.get", "times": 1, "retry_after": 0},
    )
    assert added.status == 201
    assert added.body["value"][0]["kind"] == "throttle"
    assert [fault["kind"] for fault in call(arm_emulator, "GET", "/_emulator/faults").body["value"]] == [
        "throttle"
    ]
    clients.compute.virtual_machines.get(estate.group, "vm-0")
    log = call(arm_emulator, "GET", "/_emulator/requests")
    assert log.status == 200
    assert log.body["counts"] == {"VirtualMachines.get": 2}
    assert [entry["status"] for entry in log.body["value"]] == [429, 200]
    server_error = {"kind": "server_error", "path": "*", "times": None}
    assert call(arm_emulator, "POST", "/_emulator/faults", body=server_error).status == 201
    assert call(arm_emulator, "DELETE", "/_emulator/faults").status == 200
    assert arm_emulator.faults.active() == []
    assert call(arm_emulator, "DELETE", "/_emulator/requests").status == 200
    assert len(arm_emulator.requests) == 0


def test_a_list_of_faults_with_a_global_latency(arm_emulator: ArmEmulator) -> None:
    """A list adds each entry; a latency naming no operation, method or path sets the global
    latency and is not listed back."""
    entries = [
        {"kind": "latency", "seconds": 0.25},
        {"kind": "server_error", "operation": "VirtualMachines.get", "status": 503, "times": 2},
    ]
    added = call(arm_emulator, "POST", "/_emulator/faults", body=entries)
    assert added.status == 201
    assert [(fault["kind"], fault["status"], fault["times"]) for fault in added.body["value"]] == [
        ("server_error", 503, 2)
    ]
    assert arm_emulator.faults.global_latency == 0.25


def test_admin_endpoint_seeds_and_resets(arm_emulator: ArmEmulator) -> None:
    """POST /_emulator/seed applies a seed document; POST /_emulator/reset empties the estate."""
    seed = {"resourceGroups": [{"name": "rg-admin", "identities": [{"name": "id-x"}]}]}
    seeded = call(arm_emulator, "POST", "/_emulator/seed", body=seed)
    assert seeded.status == 200
    assert [group["name"] for group in seeded.body["resourceGroups"]] == ["rg-admin"]
    assert call(arm_emulator, "GET", "/_emulator/state").body == seeded.body
    assert call(arm_emulator, "POST", "/_emulator/reset").status == 200
    assert arm_emulator.estate.snapshot()["resourceGroups"] == []


def test_limits_and_operation_duration_are_set_over_http(arm_emulator: ArmEmulator) -> None:
    """POST /_emulator/throttling replaces the limits; POST /_emulator/operation-duration sets
    how long every long-running operation takes, and the Retry-After sent while one runs."""
    limits = {"enforce": True, "buckets": {"writes": {"capacity": 5, "refillPerSecond": 1}}}
    answer = call(arm_emulator, "POST", "/_emulator/throttling", body=limits)
    assert (answer.status, answer.body) == (200, {"enforce": True})
    assert arm_emulator.throttling.limits.buckets["writes"].capacity == 5
    answer = call(arm_emulator, "POST", "/_emulator/operation-duration", body={"seconds": 1.5})
    assert (answer.status, answer.body) == (200, {"seconds": 1.5, "retryAfter": 10.0})
    assert arm_emulator.state.operation_duration == 1.5
    answer = call(arm_emulator, "POST", "/_emulator/operation-duration", body={"retryAfter": 2})
    assert (answer.status, answer.body) == (200, {"seconds": 1.5, "retryAfter": 2.0})
    assert arm_emulator.state.operation_retry_after == 2.0


REFUSALS = {
    "body not JSON": ("POST faults", b"{not json", "400 InvalidRequestContent: Body is not JSON."),
    "fault without a kind": ("POST faults", b'{"operation": "X.get"}', "400 InvalidParameter: 'kind'"),
    "duration not a number": (
        "POST operation-duration", b'{"seconds": "soon"}',
        "400 InvalidParameter: could not convert string to float: 'soon'",
    ),
    "unknown action": ("GET nothing", None, "404 NotFound: No admin action GET nothing."),
    "known action, other method": ("GET reset/", None, "404 NotFound: No admin action GET reset."),
    "below an action": ("DELETE faults/7", None, "404 NotFound: No admin action DELETE faults/7."),
}  # fmt: skip
"""(method and action, body, the answer: status, error code and message)."""


@pytest.mark.parametrize(("request_sent", "raw", "refusal"), list(REFUSALS.values()), ids=list(REFUSALS))
def test_admin_errors(arm_emulator: ArmEmulator, request_sent: str, raw: bytes | None, refusal: str) -> None:
    """Refusals carry the ARM error shape; nothing was changed and nothing was logged."""
    method, action = request_sent.split()
    answer = call(arm_emulator, method, f"/_emulator/{action}", body=raw)
    status, error = refusal.split(" ", 1)
    code, message = error.split(": ", 1)
    assert (answer.status, answer.body) == (int(status), {"error": {"code": code, "message": message}})
    assert answer.headers["content-type"] == "application/json; charset=utf-8"
    assert arm_emulator.faults.active() == []
    assert arm_emulator.state.operation_duration == 0
    assert len(arm_emulator.requests) == 0
