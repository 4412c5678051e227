"""The shared cache against a real API server: informer sharing, late informers, cached reads
by namespace, label selector and field index."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.runtime import errors
from nodewright.runtime.informers.cache import Cache, field_indexer, label_selector_matcher
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP, POD
from tests.waiting import wait_for


@pytest.fixture
def client(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


def pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }


def test_informers_are_shared_per_scope(client: Client, namespace: str) -> None:
    cache = Cache(client)
    first = cache.informer(CONFIG_MAP, namespace=namespace)
    assert cache.informer(CONFIG_MAP, namespace=namespace) is first
    assert cache.informer(CONFIG_MAP, namespace=namespace, label_selector="a=b") is not first
    assert cache.informer(POD, namespace=namespace) is not first
    assert len(cache.informers()) == 3


def test_cached_reads_by_namespace_label_and_field_index(client: Client, namespace: str) -> None:
    """get/list answer from the cache; an index on spec.nodeName finds pods without a scan;
    a late informer starts at once."""
    for name, node, app in (("a", "node-1", "web"), ("b", "node-1", "db"), ("c", "node-2", "web")):
        client.create(POD, pod(name, node, {"app": app}), namespace)
    cache = Cache(client)
    pods = cache.informer(POD, namespace=namespace)
    pods.ensure_indexer("spec.nodeName", field_indexer("spec.nodeName"))
    cache.start()
    try:
        assert cache.wait_for_sync(10)
        assert cache.has_synced()
        assert cache.get(POD, "a", namespace)["spec"]["nodeName"] == "node-1"
        with pytest.raises(errors.NotFound):
            cache.get(POD, "missing", namespace)
        on_node_1 = cache.list(POD, namespace, index=("spec.nodeName", "node-1"))
        assert sorted(p["metadata"]["name"] for p in on_node_1) == ["a", "b"]
        web = cache.list(POD, namespace, label_selector="app=web")
        assert sorted(p["metadata"]["name"] for p in web) == ["a", "c"]
        assert len(cache.list(POD, namespace)) == 3

        client.create(POD, pod("d", "node-2", {"app": "db"}), namespace)
        wait_for(lambda: len(cache.list(POD, namespace, index=("spec.nodeName", "node-2"))) == 2)

        late = cache.informer(CONFIG_MAP, namespace=namespace)
        client.create(CONFIG_MAP, {"metadata": {"name": "late"}}, namespace)
        assert late.wait_for_sync(10)
        wait_for(lambda: late.store.get(f"{namespace}/late") is not None)
        assert cache.get(CONFIG_MAP, "late", namespace)["metadata"]["name"] == "late"
    finally:
        cache.stop()


def test_get_for_an_unwatched_kind_creates_and_syncs_an_informer(client: Client, namespace: str) -> None:
    client.create(CONFIG_MAP, {"metadata": {"name": "x"}}, namespace)
    cache = Cache(client)
    cache.start()
    try:
        assert cache.get(CONFIG_MAP, "x", namespace)["metadata"]["name"] == "x"
        assert [i.kind for i in cache.informers()] == [CONFIG_MAP]
    finally:
        cache.stop()


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        pytest.param("app=web", {"app": "web"}, True, id="equals"),
        pytest.param("app==web", {"app": "db"}, False, id="double-equals-mismatch"),
        pytest.param("app!=web", {}, True, id="not-equals-absent"),
        pytest.param("app in (web, db),tier", {"app": "db", "tier": "x"}, True, id="in-and-exists"),
        pytest.param("app notin (web)", {"app": "web"}, False, id="notin"),
        pytest.param("!canary", {"canary": "1"}, False, id="not-exists"),
        pytest.param("", {"any": "thing"}, True, id="empty-matches-all"),
    ],
)
def test_label_selector_matcher(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert label_selector_matcher(selector)(labels) is expected


def test_label_selector_matcher_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="cannot parse"):
        label_selector_matcher("a b c")


@pytest.mark.parametrize(
    ("selector", "complaint"),
    [
        pytest.param("pool=" + "a" * 300, "300 characters long", id="value-of-300-characters"),
        pytest.param("pool=" + "a" * 64, "64 characters long", id="value-of-64-characters"),
        pytest.param("pool in (web, wéb)", "not a label value", id="non-ascii-value-in-set"),
        pytest.param("tier=web,pool!=-edge", "not a label value", id="value-starting-with-dash"),
        pytest.param("k" * 64 + "=x", "name part of 64 characters", id="key-name-of-64-characters"),
        pytest.param("Example.COM/pool=x", "not a DNS subdomain", id="key-prefix-in-capitals"),
        pytest.param("/pool", "not a DNS subdomain", id="key-with-empty-prefix"),
    ],
)
def test_label_selector_matcher_refuses_what_no_label_can_hold(selector: str, complaint: str) -> None:
    """A selector naming a key or value the API server would refuse on any object (too long, not
    ASCII) is refused when parsed, with the reason: it could never match."""
    with pytest.raises(ValueError, match=complaint) as refused:
        label_selector_matcher(selector)
    assert len(str(refused.value)) < 250, "the message shows a long selector cut short"


def test_label_selector_matcher_takes_the_longest_valid_labels() -> None:
    selector = f"{'p' * 253}/{'k' * 63}={'v' * 63},app in (web, {'d' * 63})"
    assert label_selector_matcher(selector)({f"{'p' * 253}/{'k' * 63}": "v" * 63, "app": "d" * 63})
