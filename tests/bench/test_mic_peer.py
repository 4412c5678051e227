"""The request-log split both MIC comparisons report (``bench.mic_peer``): identity assignment's
requests are the scale-set and machine GETs and PATCHes and the polls of the operations those
PATCHes started, whatever else the same caller sent; the counts are per kind."""

from __future__ import annotations

from bench.mic_peer import arm_counts, identity_requests
from nodewright.cloud.emulator.request_log import RecordedRequest


def _entry(method: str, operation: str, path: str = "/x", status: int = 200) -> RecordedRequest:
    return RecordedRequest(method, path, "", operation, f"{method} {path}", status, 0.0, 0.0)


OPERATIONS = "/subscriptions/s/providers/Microsoft.Compute/locations/eastus/operations/"
ENTRIES = [
    _entry("GET", "VirtualMachineScaleSets.get"),
    _entry("PATCH", "VirtualMachineScaleSets.update"),
    _entry("GET", "Operations.status", OPERATIONS + "op-identity"),
    _entry("GET", "Operations.status", OPERATIONS + "op-identity", status=429),
    _entry("PUT", "VirtualMachineScaleSetVMs.update"),
    _entry("GET", "Operations.status", OPERATIONS + "op-ipam"),
    _entry("GET", "NetworkInterfaces.get", status=404),
    _entry("PATCH", "VirtualMachines.update"),
]
STARTED_BY = {"op-identity": "VirtualMachineScaleSets.update", "op-ipam": "VirtualMachineScaleSetVMs.update"}


def test_identity_requests_keep_identity_calls_and_their_polls() -> None:
    kept = identity_requests(ENTRIES, lambda identifier: STARTED_BY.get(identifier, ""))
    assert [(e.method, e.operation) for e in kept] == [
        ("GET", "VirtualMachineScaleSets.get"),
        ("PATCH", "VirtualMachineScaleSets.update"),
        ("GET", "Operations.status"),
        ("GET", "Operations.status"),
        ("PATCH", "VirtualMachines.update"),
    ]


def test_arm_counts_by_kind() -> None:
    assert arm_counts(ENTRIES) == {
        "requests": 8,
        "reads": 2,
        "writes": 3,
        "polls": 3,
        "not_found": 1,
        "throttled": 1,
        "scale_set_writes": 1,
        "machine_writes": 1,
    }
