"""Owner references, finalizers (pure and client-backed) and metav1.Condition helpers."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from nodewright.runtime import errors
from nodewright.runtime.kube import objects
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP, POD

OWNER: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "shop", "uid": "uid-1"},
}


def test_set_controller_reference_is_idempotent_and_exclusive() -> None:
    child: dict[str, Any] = {"metadata": {"name": "web-1", "namespace": "shop"}}
    assert objects.set_controller_reference(OWNER, child) is True
    assert objects.set_controller_reference(OWNER, child) is False
    assert child["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert objects.owner_key(child) == "shop/web"
    assert objects.owner_key(child, "Deployment") == "shop/web"
    assert objects.owner_key(child, "StatefulSet") is None
    other = {**OWNER, "metadata": {**OWNER["metadata"], "name": "other", "uid": "uid-2"}}
    with pytest.raises(ValueError, match="already controlled"):
        objects.set_controller_reference(other, child)


def test_set_controller_reference_refuses_cross_namespace() -> None:
    with pytest.raises(ValueError, match="another namespace"):
        objects.set_controller_reference(OWNER, {"metadata": {"name": "x", "namespace": "elsewhere"}})


def test_add_and_remove_finalizer_report_changes() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "x"}}
    assert objects.add_finalizer(obj, "nodewright.io/cleanup") is True
    assert objects.add_finalizer(obj, "nodewright.io/cleanup") is False
    assert objects.has_finalizer(obj, "nodewright.io/cleanup")
    assert objects.remove_finalizer(obj, "nodewright.io/cleanup") is True
    assert objects.remove_finalizer(obj, "nodewright.io/cleanup") is False
    assert obj["metadata"]["finalizers"] == []


def test_set_condition_moves_transition_time_only_on_status_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(["2024-01-01T00:00:00Z", "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"])
    monkeypatch.setattr(objects, "now_text", lambda: next(clock))
    conditions: list[dict[str, Any]] = []
    assert objects.set_condition(conditions, "Ready", "False", "Starting", "wait", 1)
    assert not objects.set_condition(conditions, "Ready", "False", "Starting", "wait", 1)
    assert objects.set_condition(conditions, "Ready", "False", "StillStarting", "wait", 2)
    ready = objects.get_condition(conditions, "Ready")
    assert ready is not None
    assert ready["lastTransitionTime"] == "2024-01-01T00:00:00Z"
    assert (ready["reason"], ready["observedGeneration"]) == ("StillStarting", 2)
    assert objects.set_condition(conditions, "Ready", "True", "Running", "", 2)
    assert ready["lastTransitionTime"] == "2024-01-01T00:00:01Z"
    assert objects.get_condition(conditions, "Missing") is None
    assert len(conditions) == 1


def test_ensure_and_drop_finalizer_against_the_server(cluster: Any, namespace: str) -> None:
    """The finalizer lands once even with concurrent writers, and dropping it lets a pending
    deletion finish."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    client.create(CONFIG_MAP, {"metadata": {"name": "held"}, "data": {"n": "0"}}, namespace)
    stop = threading.Event()

    def churn() -> None:
        counter = 0
        while not stop.is_set():
            counter += 1
            client.patch(CONFIG_MAP, "held", {"data": {"n": str(counter)}}, namespace)
            time.sleep(0.005)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(3):
            stored = objects.ensure_finalizer(client, CONFIG_MAP, "held", "test/one", namespace)
        objects.ensure_finalizer(client, CONFIG_MAP, "held", "test/two", namespace)
    finally:
        stop.set()
        thread.join()
    assert stored["metadata"]["finalizers"] == ["test/one"]
    current = client.get(CONFIG_MAP, "held", namespace)
    assert current["metadata"]["finalizers"] == ["test/one", "test/two"]

    client.delete(CONFIG_MAP, "held", namespace)
    assert client.get(CONFIG_MAP, "held", namespace)["metadata"]["deletionTimestamp"]
    remaining = objects.drop_finalizer(client, CONFIG_MAP, "held", "test/one", namespace)
    assert remaining is not None
    assert remaining["metadata"]["finalizers"] == ["test/two"]
    last = objects.drop_finalizer(client, CONFIG_MAP, "held", "test/two", namespace)
    assert last is None or not last["metadata"].get("finalizers")
    with pytest.raises(errors.NotFound):
        client.get(CONFIG_MAP, "held", namespace)
    assert objects.drop_finalizer(client, CONFIG_MAP, "held", "test/two", namespace) is None


def test_concurrent_finalizer_writers_both_land(cluster: Any, namespace: str) -> None:
    """Four threads each ensure their own finalizer on one object: none is lost to a race (the
    patch tests the list it read, so a concurrent finalizer change makes it retry). Four, so that
    even the unluckiest writer (losing to each of the others once) stays within the 5 tries."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    client.create(CONFIG_MAP, {"metadata": {"name": "crowded"}}, namespace)
    names = [f"test/writer-{index}" for index in range(4)]
    threads = [
        threading.Thread(
            target=objects.ensure_finalizer, args=(client, CONFIG_MAP, "crowded", name, namespace)
        )
        for name in names
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = client.get(CONFIG_MAP, "crowded", namespace)["metadata"]["finalizers"]
    assert sorted(stored) == names
    for name in names:
        objects.drop_finalizer(client, CONFIG_MAP, "crowded", name, namespace)
    assert not client.get(CONFIG_MAP, "crowded", namespace)["metadata"].get("finalizers")


def test_an_invalid_finalizer_is_a_validation_error_not_a_conflict(cluster: Any, namespace: str) -> None:
    """A finalizer name the API server refuses surfaces as Invalid at once (no conflict retries)."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    client.create(CONFIG_MAP, {"metadata": {"name": "strict"}}, namespace)
    with pytest.raises(errors.Invalid):
        objects.ensure_finalizer(client, CONFIG_MAP, "strict", "not a/valid name!", namespace)


def test_replace_status_writes_only_to_the_same_object(cluster: Any, namespace: str) -> None:
    """replace_status writes through the status subresource even from a stale read, does not
    write to a same-named replacement (another uid), and reports a vanished object."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    body = {"metadata": {"name": "target"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    read = client.create(POD, body, namespace)
    client.patch(POD, "target", {"metadata": {"labels": {"changed": "yes"}}}, namespace)  # read is stale now
    assert objects.replace_status(client, POD, read, {"phase": "Running"}) is True
    assert client.get(POD, "target", namespace)["status"]["phase"] == "Running"
    client.delete(POD, "target", namespace, grace_period_seconds=0)
    client.create(POD, body, namespace)
    assert objects.replace_status(client, POD, read, {"phase": "Failed"}) is False
    assert client.get(POD, "target", namespace)["status"].get("phase") != "Failed"
    client.delete(POD, "target", namespace, grace_period_seconds=0)
    assert objects.replace_status(client, POD, read, {"phase": "Failed"}) is False


def test_condition_is_true_reads_status_conditions() -> None:
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert objects.condition_is_true(ready)
    assert not objects.condition_is_true(not_ready)
    assert not objects.condition_is_true(ready, "Progressing")
    assert not objects.condition_is_true({})
    assert not objects.condition_is_true(None)
