"""The Event recorder against a real API server: writes, aggregation, bounded queue."""

from __future__ import annotations

import time
from typing import Any

import pytest

from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.events import EventRecorder
from nodewright.runtime.kube.kinds import CONFIG_MAP, EVENT


@pytest.fixture
def client(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


def test_repeats_are_aggregated_into_one_event(client: Client, namespace: str) -> None:
    """Three identical events become one Event with count 3; a different message is a new one."""
    target = client.create(CONFIG_MAP, {"metadata": {"name": "subject"}}, namespace)
    recorder = EventRecorder(client, "nodewright-test", host="test-host")
    try:
        for _ in range(3):
            recorder.event(target, "Warning", "SyncFailed", "subnet full")
        recorder.event(target, "Normal", "Synced", "all good")
        assert recorder.flush(10)
    finally:
        recorder.stop()
    events = client.list(EVENT, namespace).items
    by_reason = {event["reason"]: event for event in events}
    assert sorted(by_reason) == ["SyncFailed", "Synced"]
    failed = by_reason["SyncFailed"]
    assert (failed["count"], failed["type"], failed["message"]) == (3, "Warning", "subnet full")
    assert failed["involvedObject"]["uid"] == target["metadata"]["uid"]
    assert failed["involvedObject"]["kind"] == "ConfigMap"
    assert failed["source"] == {"component": "nodewright-test", "host": "test-host"}
    assert by_reason["Synced"]["count"] == 1
    assert (recorder.written, recorder.dropped, recorder.failed) == (4, 0, 0)


def test_event_never_blocks_or_raises_and_counts_drops(client: Client, namespace: str) -> None:
    """With a tiny queue the caller returns at once and overflow is counted; a write the server
    refuses is logged and counted, not raised."""
    target = client.create(CONFIG_MAP, {"metadata": {"name": "subject"}}, namespace)
    recorder = EventRecorder(client, "nodewright-test", queue_size=2)
    try:
        started = time.monotonic()
        for index in range(200):
            recorder.event(target, "Normal", "Burst", f"message {index}")
        assert time.monotonic() - started < 0.5
        recorder.event({"metadata": {"name": "x", "namespace": "no-such-namespace"}}, "Normal", "R", "m")
        assert recorder.flush(20)
    finally:
        recorder.stop()
    assert recorder.dropped > 0
    assert recorder.written + recorder.dropped + recorder.failed == 201
