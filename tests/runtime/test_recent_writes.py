"""RecentWrites: a process reads its own writes while the informer's cache is behind, and the
cache wins again once it shows that version or a later one (against a real API server), or
once the entry is older than its ttl."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.runtime.cache import Cache
from nodewright.runtime.client import Client
from nodewright.runtime.kinds import CONFIG_MAP
from nodewright.runtime.recent_writes import RecentDeletes, RecentWrites
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


def _with_uid(uid: str) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "n", "uid": uid}}


def test_recent_deletes_claims_its_own_delete_event_once_and_only_within_ttl() -> None:
    now = [100.0]
    deletes = RecentDeletes(ttl=10.0, clock=lambda: now[0])
    deletes.note(_with_uid("u1"))
    deletes.note(_with_uid("u2"))
    deletes.note(_with_uid("u3"))
    deletes.discard(_with_uid("u3"))  # the delete request failed: its event is not ours
    assert deletes.caused(_with_uid("u1"))
    assert not deletes.caused(_with_uid("u1")), "claimed once"
    assert not deletes.caused(_with_uid("u3"))
    assert not deletes.caused(_with_uid("other"))
    now[0] += 11.0
    assert not deletes.caused(_with_uid("u2")), "too old to be the event of our delete"
    deletes.note({"metadata": {"name": "no-uid"}})
    assert not deletes.caused({"metadata": {"name": "no-uid"}})
