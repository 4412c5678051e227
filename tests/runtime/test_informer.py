"""The informer against a real API server: list then watch, resume, quiet periods, 410 relists,
API-server restarts, indexes, handler isolation and resync."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodewright.runtime import errors
from nodewright.runtime.informers.cache import field_indexer
from nodewright.runtime.informers.informer import CompressedJson, Informer, Store, object_key
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP, NAMESPACE
from tests.waiting import wait_for


class Recorder:
    """An event handler that records (event, name, data) in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, str] | None]] = []
        self.lock = threading.Lock()

    def _record(self, event: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((event, obj["metadata"]["name"], obj.get("data")))

    def on_add(self, obj: dict[str, Any]) -> None:
        self._record("add", obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self._record("update", new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        self._record("delete", obj)

    def names(self, event: str) -> set[str]:
        with self.lock:
            return {name for kind, name, _ in self.events if kind == event}


def cache_equals_fresh_list(informer: Informer, client: Client, namespace: str) -> bool:
    fresh = {
        object_key(item): item["metadata"]["resourceVersion"]
        for item in client.list(CONFIG_MAP, namespace).items
    }
    cached = {object_key(item): item["metadata"]["resourceVersion"] for item in informer.store.list()}
    return fresh == cached


@pytest.fixture
def client(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


@contextlib.contextmanager
def running(informer: Informer) -> Iterator[Informer]:
    informer.start()
    try:
        assert informer.wait_for_sync(15), "informer did not sync"
        yield informer
    finally:
        informer.stop()


def make(client: Client, namespace: str, name: str, **data: str) -> dict[str, Any]:
    return client.create(CONFIG_MAP, {"metadata": {"name": name}, "data": dict(data)}, namespace)


@pytest.mark.parametrize("compress", [False, True], ids=["plain-store", "compressed-store"])
def test_lists_then_watches_every_change_in_order(client: Client, namespace: str, compress: bool) -> None:
    """Objects present before start arrive as adds, later changes as add/update/delete in order,
    and the store drops managedFields."""
    make(client, namespace, "before", v="0")
    recorder = Recorder()
    informer = Informer(client, CONFIG_MAP, namespace=namespace, compress=compress)
    informer.add_event_handler(recorder)
    with running(informer):
        assert recorder.events == [("add", "before", {"v": "0"})]
        make(client, namespace, "after", v="1")
        client.patch(CONFIG_MAP, "after", {"data": {"v": "2"}}, namespace)
        client.delete(CONFIG_MAP, "before", namespace)
        wait_for(lambda: len(recorder.events) == 4, message=str(recorder.events))
        assert recorder.events[1:] == [
            ("add", "after", {"v": "1"}),
            ("update", "after", {"v": "2"}),
            ("delete", "before", {"v": "0"}),
        ]
        stored = informer.store.get(f"{namespace}/after")
        assert stored is not None
        assert stored["data"] == {"v": "2"}
        assert "managedFields" not in stored["metadata"]
        assert informer.store.keys() == [f"{namespace}/after"]


def test_watch_resumes_from_last_resource_version_when_server_ends_stream(
    client: Client, namespace: str
) -> None:
    """With a 1 s server timeout the stream ends again and again; the reflector re-watches from
    the last resourceVersion it saw, never relists, and misses nothing."""
    recorder = Recorder()
    informer = Informer(client, CONFIG_MAP, namespace=namespace, watch_timeout=(1, 1))
    informer.add_event_handler(recorder)
    with running(informer):
        for index in range(6):
            make(client, namespace, f"cm-{index}")
            time.sleep(0.5)  # the clock: creates spread over the 1-s server timeouts
        wait_for(lambda: len(recorder.names("add")) == 6, message=str(recorder.events))
        wait_for(lambda: informer.stats.watches >= 3, message=str(informer.stats))
        assert informer.stats.lists == 1
        assert informer.stats.watch_errors == 0
        versions = [int(rv) for rv in informer.stats.watch_resource_versions or []]
        assert versions == sorted(versions)
        assert len(set(versions)) >= 2, "later watches must start from newer resourceVersions"
        assert cache_equals_fresh_list(informer, client, namespace)


@pytest.mark.slow
def test_survives_a_quiet_period_longer_than_ten_seconds(client: Client, namespace: str) -> None:
    """pykube's watch dies after 10 s of silence; ours keeps the same stream open and still
    delivers the next change promptly."""
    recorder = Recorder()
    informer = Informer(client, CONFIG_MAP, namespace=namespace)
    informer.add_event_handler(recorder)
    with running(informer):
        wait_for(lambda: informer.stats.watches == 1)
        time.sleep(12)  # the clock: a silence longer than pykube's 10 s
        make(client, namespace, "after-silence")
        wait_for(lambda: "after-silence" in recorder.names("add"), timeout=3)
        assert (informer.stats.lists, informer.stats.watches, informer.stats.watch_errors) == (1, 1, 0)


class Proxy:
    """A TCP proxy in front of the API server that a test can cut and restore, so that the
    informer misses a stretch of history while the server keeps running."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.blocked = False
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self.blocked:
                downstream.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.sockets += [downstream, upstream]
            for source, target in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            source.close()  # each socket is the source of exactly one pump

    def cut(self) -> None:
        self.blocked = True
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.sockets.clear()

    def restore(self) -> None:
        self.blocked = False

    def close(self) -> None:
        self.cut()
        self.listener.close()

    def kubeconfig(self, original: Path, directory: Path) -> Path:
        config = yaml.safe_load(original.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path = directory / "proxied.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path


def compacted(client: Client, namespace: str, resource_version: str) -> bool:
    """Whether a watch from ``resource_version`` is refused as expired."""
    try:
        with client.watch(
            CONFIG_MAP, namespace, resource_version=resource_version, timeout_seconds=1
        ) as stream:
            for _ in stream:
                pass
    except errors.Gone:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("compress", [False, True], ids=["plain-store", "compressed-store"])
def test_relists_after_410_gone_and_reports_what_changed_meanwhile(
    control_plane_factory: Callable[..., Any], tmp_path: Path, compress: bool
) -> None:
    """The informer loses its connection; objects are deleted, changed and added; etcd is
    compacted past its resourceVersion. On reconnect the server answers 410, the informer
    relists, reports the deletes it missed (synthetic, with the last known state), the updates
    and the adds, and ends equal to a fresh list."""
    plane = control_plane_factory(etcd_compaction_interval=1, watch_cache=False)
    admin = Client.from_kubeconfig(plane.kubeconfig)
    proxy = Proxy(plane.apiserver_port)
    try:
        proxied = Client.from_kubeconfig(proxy.kubeconfig(plane.kubeconfig, tmp_path))
        namespace = "relist"
        admin.create(NAMESPACE, {"metadata": {"name": namespace}})
        for name in ("keep", "change", "drop-1", "drop-2"):
            make(admin, namespace, name, v="0")
        recorder = Recorder()
        informer = Informer(proxied, CONFIG_MAP, namespace=namespace, max_backoff=1.0, compress=compress)
        informer.add_event_handler(recorder)
        with running(informer):
            wait_for(lambda: informer.stats.watches == 1)
            last_seen = informer.resource_version
            proxy.cut()
            admin.delete(CONFIG_MAP, "drop-1", namespace)
            admin.delete(CONFIG_MAP, "drop-2", namespace)
            admin.patch(CONFIG_MAP, "change", {"data": {"v": "1"}}, namespace)
            make(admin, namespace, "new", v="0")
            wait_for(lambda: compacted(admin, namespace, last_seen), timeout=15, message="compaction")
            proxy.restore()
            wait_for(lambda: informer.stats.lists == 2, timeout=15, message=str(informer.stats))
            assert recorder.names("delete") == {"drop-1", "drop-2"}
            deleted_state = [data for kind, _, data in recorder.events if kind == "delete"]
            assert deleted_state == [{"v": "0"}, {"v": "0"}]
            assert ("update", "change", {"v": "1"}) in recorder.events
            assert ("add", "new", {"v": "0"}) in recorder.events
            assert ("update", "keep", {"v": "0"}) not in recorder.events
            assert cache_equals_fresh_list(informer, admin, namespace)
            make(admin, namespace, "after-relist")
            wait_for(lambda: "after-relist" in recorder.names("add"))
    finally:
        proxy.close()


@pytest.mark.slow
def test_api_server_restart_loses_no_change(control_plane_factory: Callable[..., Any]) -> None:
    """A writer keeps changing objects while the API server goes down for 3 s and comes back;
    afterwards the cache equals a fresh list and the last write of every object was seen."""
    plane = control_plane_factory()
    client = Client.from_kubeconfig(plane.kubeconfig)
    namespace = "restart"
    client.create(NAMESPACE, {"metadata": {"name": namespace}})
    informer = Informer(client, CONFIG_MAP, namespace=namespace, max_backoff=1.0)
    latest: dict[str, str] = {}
    stop = threading.Event()

    def writer() -> None:
        counter = 0
        while not stop.is_set():
            counter += 1
            name = f"cm-{counter % 7}"
            try:
                try:
                    client.patch(CONFIG_MAP, name, {"data": {"n": str(counter)}}, namespace)
                except errors.NotFound:
                    make(client, namespace, name, n=str(counter))
                latest[name] = str(counter)
                if counter % 5 == 0:
                    client.delete(CONFIG_MAP, f"cm-{(counter + 3) % 7}", namespace)
                    latest.pop(f"cm-{(counter + 3) % 7}", None)
            except errors.ApiError:
                time.sleep(0.1)
            time.sleep(0.02)

    with running(informer):
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            time.sleep(1)  # the writer runs before the restart
            plane.restart_apiserver(down_for=3)
            time.sleep(2)  # and after it
        finally:
            stop.set()
            thread.join()
        wait_for(
            lambda: cache_equals_fresh_list(informer, client, namespace),
            timeout=20,
            message="cache never matched a fresh list",
        )
        cached = {obj["metadata"]["name"]: (obj.get("data") or {}).get("n") for obj in informer.store.list()}
        assert cached == latest
        assert informer.stats.watches >= 2


def test_a_failing_handler_does_not_stop_the_informer(client: Client, namespace: str) -> None:
    class Broken(Recorder):
        def on_add(self, obj: dict[str, Any]) -> None:
            super().on_add(obj)
            raise RuntimeError("handler bug")

    broken, healthy = Broken(), Recorder()
    informer = Informer(client, CONFIG_MAP, namespace=namespace)
    informer.add_event_handler(broken)
    informer.add_event_handler(healthy)
    with running(informer):
        make(client, namespace, "a")
        make(client, namespace, "b")
        wait_for(lambda: healthy.names("add") == {"a", "b"})
        assert broken.names("add") == {"a", "b"}
        assert informer.stats.watch_errors == 0


def test_a_late_handler_first_receives_every_stored_object(client: Client, namespace: str) -> None:
    for name in ("a", "b", "c"):
        make(client, namespace, name)
    informer = Informer(client, CONFIG_MAP, namespace=namespace)
    with running(informer):
        late = Recorder()
        informer.add_event_handler(late)
        assert late.names("add") == {"a", "b", "c"}
        make(client, namespace, "d")
        wait_for(lambda: "d" in late.names("add"))


@pytest.mark.parametrize("compress", [False, True], ids=["plain-store", "compressed-store"])
def test_indexers_follow_changes(client: Client, namespace: str, compress: bool) -> None:
    """An index added after sync covers stored objects and follows updates and deletes."""

    def by_colour(obj: dict[str, Any]) -> list[str]:
        colour = (obj.get("data") or {}).get("colour")
        return [colour] if colour else []

    make(client, namespace, "apple", colour="red")
    informer = Informer(client, CONFIG_MAP, namespace=namespace, compress=compress)
    with running(informer):
        informer.ensure_indexer("colour", by_colour)

        def names(colour: str) -> set[str]:
            return {obj["metadata"]["name"] for obj in informer.store.by_index("colour", colour)}

        assert names("red") == {"apple"}
        make(client, namespace, "cherry", colour="red")
        make(client, namespace, "lime", colour="green")
        wait_for(lambda: names("red") == {"apple", "cherry"} and names("green") == {"lime"})
        client.patch(CONFIG_MAP, "apple", {"data": {"colour": "green"}}, namespace)
        client.delete(CONFIG_MAP, "lime", namespace)
        wait_for(lambda: names("red") == {"cherry"} and names("green") == {"apple"})
        with pytest.raises(KeyError):
            informer.store.by_index("size", "big")


def test_resync_redelivers_every_object_as_an_update(client: Client, namespace: str) -> None:
    make(client, namespace, "a")
    make(client, namespace, "b")
    recorder = Recorder()
    informer = Informer(client, CONFIG_MAP, namespace=namespace, resync_period=0.5)
    informer.add_event_handler(recorder)
    with running(informer):
        wait_for(lambda: recorder.names("update") == {"a", "b"}, timeout=5)


def test_transform_runs_before_storing(client: Client, namespace: str) -> None:
    def keep_name_only(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": obj["metadata"]["name"], "namespace": namespace}}

    make(client, namespace, "slim", big="x" * 1000)
    informer = Informer(client, CONFIG_MAP, namespace=namespace, transform=keep_name_only)
    with running(informer):
        assert informer.store.list() == [{"metadata": {"name": "slim", "namespace": namespace}}]


def test_stop_returns_promptly_while_a_watch_is_open(client: Client, namespace: str) -> None:
    informer = Informer(client, CONFIG_MAP, namespace=namespace)
    informer.start()
    assert informer.wait_for_sync(10)
    wait_for(lambda: informer.stats.watches == 1)
    started = time.monotonic()
    informer.stop()
    assert time.monotonic() - started < 2
    assert not any(thread.is_alive() for thread in informer._threads)


def test_compressed_store_codec_serves_many_threads_at_once() -> None:
    """Workers read a compressed store concurrently while the reflector writes it: one codec,
    eight threads encoding and decoding different objects, every round trip exact."""
    codec = CompressedJson()
    failures: list[str] = []

    def round_trips(worker: int) -> None:
        for index in range(1500):
            obj = {"metadata": {"name": f"w{worker}-{index}"}, "data": {"v": "x" * (index % 700)}}
            if codec.decode(codec.encode(obj)) != obj:
                failures.append(f"w{worker}-{index}")

    threads = [threading.Thread(target=round_trips, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_compressed_store_keeps_little_and_hands_out_fresh_copies() -> None:
    """A compressed store holds bytes much smaller than the JSON it was given, reads decode to
    equal objects, and mutating a read cannot corrupt the store; indexes work as for a plain one."""
    store = Store(CompressedJson())
    store.ensure_indexer("node", lambda obj: [obj["spec"]["nodeName"]])
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": f"c{i}", "image": "registry/app:1.0"} for i in range(20)],
        },
    }
    assert store.put("ns/p", pod) is None
    stored = store._items["ns/p"]  # the encoded form itself
    assert isinstance(stored, bytes)
    assert len(stored) < len(json.dumps(pod)) / 3
    read = store.get("ns/p")
    assert read == pod
    assert read is not None
    read["spec"]["nodeName"] = "mutated"
    assert store.get("ns/p") == pod
    assert [obj["metadata"]["name"] for obj in store.by_index("node", "n1")] == ["p"]
    moved = {
        **pod,
        "metadata": {**pod["metadata"], "resourceVersion": "8"},
        "spec": {**pod["spec"], "nodeName": "n2"},
    }
    assert store.put("ns/p", moved) == pod
    assert store.by_index("node", "n1") == []
    assert store.by_index("node", "n2") == [moved]
    assert store.unchanged(store.encode(moved), store._items["ns/p"])
    assert not store.unchanged(store.encode(pod), store._items["ns/p"])
    assert store.remove("ns/p") == moved
    assert store.by_index("node", "n2") == []


def test_ensure_indexer_is_idempotent_and_refuses_another_function() -> None:
    """Reconcilers sharing an informer may each ask for the index they read: the same function
    (or one made alike by ``field_indexer``) is a no-op, another function under the name is refused."""
    store = Store()
    store.put("ns/p", {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}})
    store.ensure_indexer("spec.nodeName", field_indexer("spec.nodeName"))
    store.ensure_indexer("spec.nodeName", field_indexer("spec.nodeName"))
    assert store.index_names() == ["spec.nodeName"]
    assert [o["metadata"]["name"] for o in store.by_index("spec.nodeName", "n1")] == ["p"]
    with pytest.raises(ValueError, match="another function"):
        store.ensure_indexer("spec.nodeName", field_indexer("spec.hostname"))
    with pytest.raises(ValueError, match="another function"):
        store.ensure_indexer("spec.nodeName", lambda obj: [obj["spec"]["nodeName"]])
