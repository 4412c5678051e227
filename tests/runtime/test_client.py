"""The API client against a real API server: every verb, and a typed error for each reason."""

from __future__ import annotations

import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client, collector_paused
from nodewright.runtime.kube.kinds import CONFIG_MAP, POD, POD_DISRUPTION_BUDGET, Kind
from nodewright.runtime.kube.list_pager import continue_token_of


@pytest.fixture
def client(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


NO_SCHEDULER = "none"
"""A scheduler that does not exist: the cluster's scheduler and kwok leave such pods alone, so
the test's own status writes do not race theirs."""


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "test"}}, "data": dict(data)}


def test_create_get_list_update_delete_round_trip(client: Client, namespace: str) -> None:
    """Each verb reaches the server and answers with the stored object."""
    created = client.create(CONFIG_MAP, config_map("one", a="1"), namespace)
    assert created["metadata"]["namespace"] == namespace
    client.create(CONFIG_MAP, {"metadata": {"name": "two", "namespace": namespace}})

    fetched = client.get(CONFIG_MAP, "one", namespace)
    assert fetched["data"] == {"a": "1"}

    listed = client.list(CONFIG_MAP, namespace, label_selector="app=test")
    assert [item["metadata"]["name"] for item in listed.items] == ["one"]
    assert listed.items[0]["kind"] == "ConfigMap"
    assert int(listed.resource_version) >= int(created["metadata"]["resourceVersion"])

    fetched["data"]["b"] = "2"
    updated = client.update(CONFIG_MAP, fetched)
    assert updated["data"] == {"a": "1", "b": "2"}

    deleted = client.delete(CONFIG_MAP, "one", namespace)
    assert deleted is not None
    with pytest.raises(errors.NotFound):
        client.get(CONFIG_MAP, "one", namespace)
    assert client.delete(CONFIG_MAP, "one", namespace, ignore_not_found=True) is None


def test_list_follows_continue_tokens(client: Client, namespace: str) -> None:
    """A paginated list returns every object across pages."""
    for index in range(7):
        client.create(CONFIG_MAP, config_map(f"cm-{index}"), namespace)
    pages = list(client.list_pages(CONFIG_MAP, namespace, limit=3))
    assert [len(page.items) for page in pages] == [3, 3, 1]
    names = sorted(item["metadata"]["name"] for page in pages for item in page.items)
    assert names == [f"cm-{index}" for index in range(7)]


def test_the_next_page_token_is_read_from_the_head_of_the_body(client: Client, namespace: str) -> None:
    """The prefetch's assumption, held against the real API server: a list body names its
    ``continue`` token in ``metadata``, before ``items``."""
    for index in range(4):
        client.create(CONFIG_MAP, config_map(f"cm-{index}"), namespace)
    body = client.request("GET", CONFIG_MAP.path(namespace), params={"limit": 3}).content
    token = json.loads(body)["metadata"]["continue"]
    assert token
    assert continue_token_of(body) == token
    assert body.find(b'"continue"') < body.find(b'"items"')


@pytest.mark.parametrize(
    ("patch_type", "body", "expected"),
    [
        pytest.param("merge", {"data": {"b": "2", "a": None}}, {"b": "2"}, id="merge-removes-null"),
        pytest.param(
            "json", [{"op": "replace", "path": "/data/a", "value": "9"}], {"a": "9"}, id="json-patch"
        ),
        pytest.param("strategic", {"data": {"c": "3"}}, {"a": "1", "c": "3"}, id="strategic"),
        pytest.param(
            "apply",
            {"metadata": {"name": "target"}, "data": {"a": "1", "z": "26"}},
            {"a": "1", "z": "26"},
            id="server-side-apply",
        ),
    ],
)
def test_patch_types(
    client: Client, namespace: str, patch_type: Any, body: Any, expected: dict[str, str]
) -> None:
    """Each patch type is sent with its content type and applied by the server."""
    client.create(CONFIG_MAP, config_map("target", a="1"), namespace)
    patched = client.patch(
        CONFIG_MAP, "target", body, namespace, patch_type=patch_type, force=patch_type == "apply"
    )
    assert patched["data"] == expected
    if patch_type == "apply":
        managers = {entry["manager"] for entry in patched["metadata"]["managedFields"]}
        assert "nodewright" in managers


def test_status_update_and_status_patch(client: Client, namespace: str) -> None:
    """update_status and patch(subresource="status") write only the status."""
    pod = client.create(
        POD,
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": NO_SCHEDULER},
        },
        namespace,
    )
    pod["status"] = {"phase": "Running"}
    pod["spec"]["activeDeadlineSeconds"] = 5  # ignored by the status endpoint
    stored = client.update_status(POD, pod)
    assert stored["status"]["phase"] == "Running"
    assert "activeDeadlineSeconds" not in stored["spec"]
    patched = client.patch(POD, "p", {"status": {"message": "hello"}}, namespace, subresource="status")
    assert patched["status"]["message"] == "hello"


def test_delete_with_preconditions_and_propagation(client: Client, namespace: str) -> None:
    """A stale uid precondition is refused with Conflict; the right one deletes."""
    created = client.create(CONFIG_MAP, config_map("guarded"), namespace)
    with pytest.raises(errors.Conflict):
        client.delete(CONFIG_MAP, "guarded", namespace, preconditions={"uid": "not-the-uid"})
    client.delete(
        CONFIG_MAP,
        "guarded",
        namespace,
        preconditions={"uid": created["metadata"]["uid"]},
        propagation_policy="Background",
        grace_period_seconds=0,
    )
    with pytest.raises(errors.NotFound):
        client.get(CONFIG_MAP, "guarded", namespace)


# ---- typed errors from real answers ---------------------------------------------------------


def test_not_found(client: Client, namespace: str) -> None:
    with pytest.raises(errors.NotFound) as caught:
        client.get(CONFIG_MAP, "missing", namespace)
    assert (caught.value.code, caught.value.reason) == (404, "NotFound")
    assert caught.value.status["kind"] == "Status"
    assert caught.value.details["name"] == "missing"


def test_already_exists_is_not_a_conflict(client: Client, namespace: str) -> None:
    """Both are 409; the Status reason tells them apart."""
    client.create(CONFIG_MAP, config_map("twice"), namespace)
    with pytest.raises(errors.AlreadyExists) as caught:
        client.create(CONFIG_MAP, config_map("twice"), namespace)
    assert caught.value.code == 409
    assert not isinstance(caught.value, errors.Conflict)


def test_conflict_on_stale_resource_version(client: Client, namespace: str) -> None:
    first = client.create(CONFIG_MAP, config_map("raced", a="1"), namespace)
    client.patch(CONFIG_MAP, "raced", {"data": {"a": "2"}}, namespace)
    first["data"]["a"] = "3"
    with pytest.raises(errors.Conflict) as caught:
        client.update(CONFIG_MAP, first)
    assert caught.value.reason == "Conflict"


def test_invalid_names_fields(client: Client, namespace: str) -> None:
    with pytest.raises(errors.Invalid) as caught:
        client.create(CONFIG_MAP, config_map("Not_A_Valid_Name"), namespace)
    assert caught.value.code == 422
    assert any(cause.get("field") == "metadata.name" for cause in caught.value.causes)


def test_bad_request_for_unparsable_selector(client: Client, namespace: str) -> None:
    with pytest.raises(errors.BadRequest):
        client.list(CONFIG_MAP, namespace, label_selector="a in in b")


def test_forbidden_for_an_unprivileged_user(client: Client, namespace: str) -> None:
    """The admin impersonates a user without RBAC bindings: the server answers Forbidden."""
    client.transport.headers["Impersonate-User"] = "nobody"
    try:
        with pytest.raises(errors.Forbidden) as caught:
            client.get(CONFIG_MAP, "anything", namespace)
    finally:
        del client.transport.headers["Impersonate-User"]
    assert caught.value.code == 403
    assert "nobody" in caught.value.message


def test_unauthorized_for_a_bad_token(cluster: Any, tmp_path: Path, namespace: str) -> None:
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    for user in config["users"]:
        user["user"] = {"token": "not-a-real-token"}
    path = tmp_path / "bad.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(errors.Unauthorized) as caught:
        Client.from_kubeconfig(path).get(CONFIG_MAP, "anything", namespace)
    assert caught.value.code == 401


def test_eviction_blocked_by_disruption_budget_is_too_many_requests(client: Client, namespace: str) -> None:
    """An eviction the budget forbids answers 429; with no budget the pod is evicted."""
    labels = {"app": "guarded"}
    for name in ("guarded", "free"):
        pod = client.create(
            POD,
            {
                "metadata": {"name": name, "labels": labels if name == "guarded" else {}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": NO_SCHEDULER},
            },
            namespace,
        )
        pod["status"] = {"phase": "Running"}  # the test plays kubelet; budgets ignore pending pods
        client.update_status(POD, pod)
    client.create(
        POD_DISRUPTION_BUDGET,
        {"metadata": {"name": "budget"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}},
        namespace,
    )
    with pytest.raises(errors.TooManyRequests) as caught:
        client.evict("guarded", namespace)
    assert caught.value.code == 429
    client.evict("free", namespace, delete_options={"gracePeriodSeconds": 0})
    evicted = client.get(POD, "free", namespace) if _exists(client, "free", namespace) else None
    assert evicted is None or evicted["metadata"].get("deletionTimestamp")


def _exists(client: Client, name: str, namespace: str) -> bool:
    try:
        client.get(POD, name, namespace)
    except errors.NotFound:
        return False
    return True


def test_not_found_for_an_unknown_resource_type(client: Client) -> None:
    unknown = Kind("example.invalid/v1", "Nothing", "nothings", namespaced=False)
    with pytest.raises(errors.NotFound):
        client.list(unknown)


def test_connection_failed_when_nothing_listens(tmp_path: Path, cluster: Any) -> None:
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    path = tmp_path / "nowhere.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(errors.ConnectionFailed) as caught:
        Client.from_kubeconfig(path).list(CONFIG_MAP, "default")
    assert caught.value.code == 0


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        pytest.param({"reason": "Expired", "code": 410}, None, errors.Gone, id="expired-is-gone"),
        pytest.param({"reason": "Gone"}, 410, errors.Gone, id="gone"),
        pytest.param({"reason": "Timeout", "code": 504}, None, errors.ServerTimeout, id="timeout"),
        pytest.param({"reason": "InternalError"}, 500, errors.InternalError, id="internal"),
        pytest.param({"reason": "ServiceUnavailable"}, 503, errors.ServiceUnavailable, id="503"),
        pytest.param({"reason": "AlreadyExists"}, 409, errors.AlreadyExists, id="reason-wins"),
        pytest.param({}, 409, errors.Conflict, id="code-when-no-reason"),
        pytest.param({"reason": "Strange"}, 418, errors.ApiError, id="unknown"),
    ],
)
def test_error_from_status_table(
    status: dict[str, Any], code: int | None, expected: type[errors.ApiError]
) -> None:
    """The reason chooses the class; the code is only the fallback."""
    error = errors.error_from_status(status, code)
    assert type(error) is expected


def test_too_many_requests_reads_retry_after_from_details() -> None:
    error = errors.error_from_status(
        {"reason": "TooManyRequests", "code": 429, "details": {"retryAfterSeconds": 7}}
    )
    assert isinstance(error, errors.TooManyRequests)
    assert error.retry_after == 7.0


def test_resource_version_too_large_is_recognised() -> None:
    error = errors.error_from_status(
        {
            "reason": "Timeout",
            "code": 504,
            "message": "Too large resource version: 99, current: 10",
            "details": {"causes": [{"reason": "ResourceVersionTooLarge"}]},
        }
    )
    assert errors.is_resource_version_too_large(error)
    assert not errors.is_resource_version_too_large(errors.ServerTimeout("slow"))


# ---- watch ----------------------------------------------------------------------------------


def test_watch_streams_events_and_close_wakes_the_reader(client: Client, namespace: str) -> None:
    """A watch yields the events after its resourceVersion; close() from another thread ends a
    blocked read at once."""
    start = client.list(CONFIG_MAP, namespace).resource_version
    client.create(CONFIG_MAP, config_map("watched"), namespace)
    seen: list[tuple[str, str]] = []
    stream = client.watch(CONFIG_MAP, namespace, resource_version=start, timeout_seconds=60)

    def read() -> None:
        for event in stream:
            seen.append((event.type, event.object["metadata"]["name"]))

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    closed_at = time.monotonic()
    stream.close()
    reader.join(5)
    assert not reader.is_alive()
    assert time.monotonic() - closed_at < 2
    assert seen[0] == ("ADDED", "watched")


def test_pool_size_is_configurable(cluster: Any) -> None:
    client = Client.from_kubeconfig(cluster.kubeconfig, pool_size=77)
    assert client.transport._pool.pool is not None
    assert client.transport._pool.pool.maxsize == 77


def test_the_collector_is_paused_only_while_a_list_page_is_decoded() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # a second informer listing at the same time
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()  # an application that runs without the collector keeps it off
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
