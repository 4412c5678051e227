"""A controller reads its own writes through its cache view while the watch is behind, never
brings back an object someone else deleted, and ignores its own deletes when asked (real API
server; the watch is held back by an event handler that blocks the informer's delivery)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from nodewright.runtime import errors
from nodewright.runtime.control.builder import Builder
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.informers.informer import Informer
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP
from nodewright.runtime.process.manager import Manager
from tests.runtime.manager_helpers import RunningManager, make_manager
from tests.waiting import wait_for

Object = dict[str, Any]


class WatchGate:
    """An event handler that, once armed, blocks on the next event it is given: the informer has
    stored that event's object, and delivers nothing after it until ``release``."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.holding = threading.Event()
        self.released = threading.Event()

    def _maybe_hold(self) -> None:
        if self.armed.is_set() and not self.released.is_set():
            self.holding.set()
            self.released.wait(30)

    def on_add(self, obj: Object) -> None:
        self._maybe_hold()

    def on_update(self, old: Object, new: Object) -> None:
        self._maybe_hold()

    def on_delete(self, obj: Object) -> None:
        self._maybe_hold()

    def hold(self, client: Client, namespace: str) -> None:
        """Arm, then write the gate object so that the informer blocks on its event."""
        self.armed.set()
        client.patch(CONFIG_MAP, "gate", {"data": {"held": "yes"}}, namespace)
        wait_for(self.holding.is_set, message="the informer held at the gate")

    def release(self) -> None:
        self.released.set()


def _step(obj: Object | None) -> str | None:
    return None if obj is None else str((obj.get("data") or {}).get("step"))


class Stepper:
    """Reads ``step`` of each ConfigMap (but the gate) through the controller's cache and, while
    ``writes`` is positive, writes the next step through the controller's client."""

    def __init__(self, builder: Builder[Request]) -> None:
        self.client, self.cache = builder.client, builder.cache
        self.seen: list[tuple[str, str | None]] = []
        self.writes = 0
        self.lock = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        if request.name == "gate":
            return Result()
        try:
            step = _step(self.cache.get(CONFIG_MAP, request.name, request.namespace))
        except errors.NotFound:
            step = None
        with self.lock:
            self.seen.append((request.name, step))
            write, self.writes = self.writes > 0, max(0, self.writes - 1)
        if write and step is not None:
            self.client.patch(
                CONFIG_MAP, request.name, {"data": {"step": str(int(step) + 1)}}, request.namespace
            )
        return Result()

    def passes(self, name: str) -> list[str | None]:
        with self.lock:
            return [step for seen, step in self.seen if seen == name]


@pytest.fixture
def client(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


def _start(cluster: Any, namespace: str, client: Client, *names: str) -> tuple[Manager, Stepper, WatchGate]:
    for name in ("gate", *names):
        client.create(CONFIG_MAP, {"metadata": {"name": name}, "data": {"step": "0"}}, namespace)
    manager = make_manager(cluster, namespace, leaderElection={"enabled": False})
    builder = manager.controller("stepper").for_(CONFIG_MAP, namespace=namespace)
    stepper = Stepper(builder)
    builder.complete(stepper)
    gate = WatchGate()
    manager.cache.informer(CONFIG_MAP, namespace=namespace).add_event_handler(gate)
    return manager, stepper, gate


def _informer(manager: Manager, namespace: str) -> Informer:
    return manager.cache.informer(CONFIG_MAP, namespace=namespace)


def test_a_pass_run_again_before_the_watch_delivers_reads_its_own_write(
    cluster: Any, namespace: str, client: Client
) -> None:
    manager, stepper, gate = _start(cluster, namespace, client, "a")
    controller = manager.controllers[0]
    running = RunningManager(manager)
    try:
        wait_for(lambda: stepper.passes("a") == ["0"], message="the first pass")
        gate.hold(client, namespace)
        stepper.writes = 1
        controller.enqueue(Request(namespace, "a"))
        wait_for(lambda: len(stepper.passes("a")) == 2, message="the writing pass")
        controller.enqueue(Request(namespace, "a"))
        wait_for(lambda: len(stepper.passes("a")) == 3, message="the pass run again")

        key = f"{namespace}/a"
        assert _step(_informer(manager, namespace).store.get(key)) == "0", "the watch is behind"
        assert stepper.passes("a") == ["0", "0", "1"], "the pass after the write read the write"
        assert _step(manager.cache.get(CONFIG_MAP, "a", namespace)) == "0", "other readers: the cache"
        listed = stepper.cache.list(CONFIG_MAP, namespace)
        assert {o["metadata"]["name"]: _step(o) for o in listed}["a"] == "1"

        gate.release()
        wait_for(lambda: _step(_informer(manager, namespace).store.get(key)) == "1", message="the watch")
        cached = _informer(manager, namespace).store.get(key)
        assert stepper.cache.get(CONFIG_MAP, "a", namespace) is cached, "the cache wins once caught up"
        assert len(stepper.cache.own.writes(CONFIG_MAP)) == 0
    finally:
        gate.release()
        running.stop()


def test_an_object_deleted_by_someone_else_is_not_brought_back(
    cluster: Any, namespace: str, client: Client
) -> None:
    manager, stepper, gate = _start(cluster, namespace, client, "b", "c")
    controller = manager.controllers[0]
    running = RunningManager(manager)
    try:
        wait_for(
            lambda: stepper.passes("b") == ["0"] and stepper.passes("c") == ["0"], message="first passes"
        )
        gate.hold(client, namespace)
        stepper.writes = 2
        controller.enqueue(Request(namespace, "b"))
        controller.enqueue(Request(namespace, "c"))
        wait_for(lambda: len(stepper.passes("b")) == len(stepper.passes("c")) == 2, message="writes")
        assert _step(stepper.cache.get(CONFIG_MAP, "b", namespace)) == "1", "our write, while held"
        client.delete(CONFIG_MAP, "b", namespace)  # someone else's delete, after our write
        client.patch(CONFIG_MAP, "c", {"data": {"step": "theirs"}}, namespace)  # and a later write
        gate.release()

        informer = _informer(manager, namespace)
        wait_for(lambda: informer.store.get(f"{namespace}/b") is None, message="the delete delivered")
        wait_for(lambda: _step(informer.store.get(f"{namespace}/c")) == "theirs", message="their write")
        with pytest.raises(errors.NotFound):
            stepper.cache.get(CONFIG_MAP, "b", namespace)
        names = {o["metadata"]["name"]: _step(o) for o in stepper.cache.list(CONFIG_MAP, namespace)}
        assert "b" not in names, "an object someone else deleted is never resurrected"
        assert names["c"] == "theirs", "a later write by someone else wins over ours"
    finally:
        gate.release()
        running.stop()


class Deleter:
    """Records its passes; deletes the objects named in ``to_delete`` through its client."""

    def __init__(self, builder: Builder[Request]) -> None:
        self.client = builder.client
        self.to_delete: set[str] = set()
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        with self.lock:
            self.seen.append(request.name)
            delete = request.name in self.to_delete
            self.to_delete.discard(request.name)
        if delete:
            self.client.delete(CONFIG_MAP, request.name, request.namespace)
        return Result()

    def count(self, name: str) -> int:
        with self.lock:
            return self.seen.count(name)


@pytest.mark.parametrize("ignore", [True, False], ids=["ignore_own_deletes", "default"])
def test_own_deletes_are_ignored_with_the_option_and_others_deletes_still_delivered(
    cluster: Any, namespace: str, client: Client, ignore: bool
) -> None:
    for name in ("mine", "theirs"):
        client.create(CONFIG_MAP, {"metadata": {"name": name}}, namespace)
    manager = make_manager(cluster, namespace, leaderElection={"enabled": False})
    builder = manager.controller("deleter").for_(CONFIG_MAP, namespace=namespace)
    if ignore:
        builder = builder.ignore_own_deletes()
    deleter = Deleter(builder)
    builder.complete(deleter)
    running = RunningManager(manager)
    try:
        wait_for(lambda: deleter.count("mine") == deleter.count("theirs") == 1, message="first passes")
        deleter.to_delete.add("mine")
        manager.controllers[0].enqueue(Request(namespace, "mine"))
        informer = manager.cache.informer(CONFIG_MAP, namespace=namespace)
        wait_for(lambda: informer.store.get(f"{namespace}/mine") is None, message="our delete delivered")
        client.delete(CONFIG_MAP, "theirs", namespace)
        # Our delete's event came first, and one worker takes the queue in order.
        wait_for(lambda: deleter.count("theirs") == 2, message="their delete reconciled")
        assert deleter.count("mine") == (2 if ignore else 3)
    finally:
        running.stop()
