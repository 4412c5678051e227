"""RecentWrites: a process reads its own writes while the informer's cache is behind, and the
cache wins again once it shows that version or a later one (against a real API server), or
once the entry is older than its ttl; RecentDeletes and OwnWrites, the per-controller record the
controller's client keeps and its cache view reads (``test_read_your_writes`` runs them in a
controller)."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.runtime.informers.cache import Cache, field_indexer
from nodewright.runtime.informers.cache_view import StoreView
from nodewright.runtime.informers.informer import Store
from nodewright.runtime.informers.recent_writes import OwnWrites, RecentDeletes, RecentWrites
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP, SECRET
from tests.waiting import wait_for


@pytest.fixture
def client(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


def test_the_written_object_is_read_until_the_cache_shows_it(client: Client, namespace: str) -> None:
    client.create(CONFIG_MAP, {"metadata": {"name": "a"}, "data": {"step": "1"}}, namespace)
    cache = Cache(client)
    maps = cache.informer(CONFIG_MAP, namespace=namespace)
    cache.start()
    try:
        assert cache.wait_for_sync(10)
        stale = cache.get(CONFIG_MAP, "a", namespace)
        recent = RecentWrites()
        recent.remember(client.patch(CONFIG_MAP, "a", {"data": {"step": "2"}}, namespace))

        assert recent.newer(stale)["data"] == {"step": "2"}, "the cache's old copy is not decided on"
        assert [obj["data"] for obj in recent.overlay([stale])] == [{"step": "2"}]
        wait_for(lambda: (maps.store.get(f"{namespace}/a") or {}).get("data") == {"step": "2"})
        fresh = cache.get(CONFIG_MAP, "a", namespace)
        assert recent.newer(fresh) is fresh
        assert len(recent) == 0, "forgotten once the cache caught up"

        recent.remember(client.patch(CONFIG_MAP, "a", {"data": {"step": "3"}}, namespace))
        client.patch(CONFIG_MAP, "a", {"data": {"step": "someone else's"}}, namespace)
        wait_for(lambda: (maps.store.get(f"{namespace}/a") or {}).get("data") == {"step": "someone else's"})
        later = cache.get(CONFIG_MAP, "a", namespace)
        assert recent.newer(later) is later, "a later write by someone else wins over ours"
    finally:
        cache.stop()


def _object(name: str, version: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}, "data": data}


def test_an_entry_expires_after_its_ttl() -> None:
    now = [100.0]
    recent = RecentWrites(ttl=30.0, clock=lambda: now[0])
    recent.remember(_object("a", "12", step="written"))
    stale = _object("a", "10", step="old")
    assert recent.newer(stale)["data"] == {"step": "written"}
    now[0] += 31.0
    assert recent.newer(stale) is stale
    assert len(recent) == 0


def test_versions_that_are_not_integers_are_compared_for_equality_only() -> None:
    recent = RecentWrites()
    recent.remember(_object("a", "v2", step="written"))
    other = _object("a", "v9", step="other")
    assert recent.newer(other)["data"] == {"step": "written"}
    same = _object("a", "v2", step="written")
    assert recent.newer(same) is same


def test_only_cached_objects_are_replaced_and_the_oldest_go_past_the_limit() -> None:
    recent = RecentWrites(limit=2)
    for name in ("a", "b", "c"):
        recent.remember(_object(name, "5", step="written"))
    assert len(recent) == 2
    assert recent.overlay([_object("c", "1")])[0]["data"] == {"step": "written"}
    assert recent.overlay([_object("a", "1")])[0]["data"] == {}, "the oldest was let go"
    assert recent.overlay([]) == [], "an object the cache lacks is not brought back"
    recent.forget(_object("b", "5"))
    assert recent.overlay([_object("b", "1")])[0]["data"] == {}


def _with_uid(uid: str, name: str = "a") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "n", "uid": uid}}


def test_recent_deletes_claims_its_own_delete_events_only_within_ttl() -> None:
    now = [100.0]
    deletes = RecentDeletes(ttl=10.0, clock=lambda: now[0])
    deletes.deleting("n/a", "u1")
    deletes.deleting("n/b")  # by name only: the answer, or the first event, tells the uid
    deletes.deleting("n/c", "u3")
    deletes.failed("n/c")  # the delete request failed: its event is not ours
    assert deletes.caused(_with_uid("u1"))
    assert deletes.caused(_with_uid("u1")), "every watch of the kind may ask"
    assert not deletes.caused(_with_uid("other")), "another object of that name"
    assert deletes.caused(_with_uid("u2", "b"))
    assert not deletes.caused(_with_uid("u9", "b")), "the first event bound the uid"
    assert not deletes.caused(_with_uid("u3", "c"))
    now[0] += 11.0
    assert not deletes.caused(_with_uid("u2", "b")), "too old to be the event of our delete"
    deletes.deleting("n/no-uid")
    assert not deletes.caused({"metadata": {"name": "no-uid", "namespace": "n"}})


def test_a_deleted_object_is_hidden_only_once_the_answer_says_it_is_gone() -> None:
    deletes = RecentDeletes()
    deletes.deleting("n/a")
    assert not deletes.hides(_with_uid("u1")), "no answer yet"
    deletes.deleted("n/a", "u1", gone=False)  # finalizers hold it
    assert not deletes.hides(_with_uid("u1"))
    deletes.deleted("n/a", "u1", gone=True)
    assert deletes.hides(_with_uid("u1"))
    assert not deletes.hides(_with_uid("u2")), "an object made again under the name is shown"


def _answer(name: str, version: str, **metadata: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "n", "uid": f"uid-{name}", "resourceVersion": version, **metadata}
    return {"kind": "ConfigMap", "metadata": meta, "data": {"step": version}}


def test_own_writes_keeps_kinds_apart_and_takes_a_last_finalizer_off_as_a_delete() -> None:
    own = OwnWrites()
    own.wrote(
        CONFIG_MAP,
        {**_answer("a", "7"), "metadata": {**_answer("a", "7")["metadata"], "managedFields": [{}]}},
    )
    cached = _answer("a", "5")
    newer = own.newer(CONFIG_MAP, cached)
    assert newer is not None
    assert newer["data"] == {"step": "7"}
    assert "managedFields" not in newer["metadata"], "kept as an informer keeps objects"
    assert own.newer(SECRET, cached) is cached, "a Secret of the same name is not the ConfigMap"
    gone = _answer("b", "9", deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[])
    own.wrote(CONFIG_MAP, gone)
    assert own.deletes(CONFIG_MAP).caused(_answer("b", "8"))
    assert own.newer(CONFIG_MAP, _answer("b", "8")) is None
    terminating = _answer("c", "9", deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    own.deleting(CONFIG_MAP, "n/c", "")
    own.deleted(CONFIG_MAP, "n/c", terminating)
    shown = own.newer(CONFIG_MAP, _answer("c", "8"))
    assert shown is not None
    assert shown["metadata"]["deletionTimestamp"], "in its grace period: still there"
    own.deleted(CONFIG_MAP, "n/c", {"kind": "Status", "status": "Success", "details": {"uid": "uid-c"}})
    assert own.newer(CONFIG_MAP, _answer("c", "8")) is None


def test_an_indexed_read_places_a_written_object_by_its_written_fields() -> None:
    store, own = Store(), OwnWrites()
    store.ensure_indexer("colour", field_indexer("data.colour"))
    for name in ("a", "b"):
        store.put(f"n/{name}", {**_answer(name, "5"), "data": {"colour": "red"}})
    own.wrote(CONFIG_MAP, {**_answer("a", "6"), "data": {"colour": "blue"}})
    view = StoreView(store, CONFIG_MAP, own)
    assert [o["metadata"]["name"] for o in view.by_index("colour", "red")] == ["b"]
    assert [o["data"] for o in view.by_index("colour", "blue")] == [{"colour": "blue"}]
    assert sorted(o["metadata"]["name"] for o in store.by_index("colour", "red")) == ["a", "b"], "the cache"
    store.put("n/a", {**_answer("a", "6"), "data": {"colour": "blue"}})
    assert view.by_index("colour", "blue") == [store.get("n/a")], "caught up: the cache's own object"
