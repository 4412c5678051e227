"""Builder against a real API server: for_, owns, watches with map functions and predicates."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykube
import pytest

from nodewright.runtime.control.predicates import labels_changed
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.kube.kinds import CONFIG_MAP, SECRET
from tests.runtime.manager_helpers import RunningManager, make_manager
from tests.waiting import wait_for


class Recorder:
    """A Reconciler object that records the requests it saw."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.lock = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        with self.lock:
            self.seen.append(request)
        return Result()

    def count(self, request: Request) -> int:
        with self.lock:
            return self.seen.count(request)


def test_for_owns_and_watches(cluster: Any, namespace: str, kube_api: pykube.HTTPClient) -> None:
    """for_ reconciles the object; owns reconciles a Secret's controlling ConfigMap; watches
    maps Secrets to requests, filtered by a predicate on updates."""
    recorder = Recorder()
    manager = make_manager(cluster, namespace, leaderElection={"enabled": False})
    (
        manager.controller("wiring")
        .for_(CONFIG_MAP, namespace=namespace)
        .owns(SECRET, namespace=namespace)
        .watches(
            SECRET,
            lambda obj: [Request(namespace, "mapped-" + obj["metadata"]["name"])],
            predicate=labels_changed,
            namespace=namespace,
        )
        .with_options(max_concurrent_reconciles=2)
        .complete(recorder)
    )
    assert manager.controllers[0].max_concurrent_reconciles == 2
    running = RunningManager(manager)
    try:
        wait_for(manager.started.is_set)
        owner = pykube.ConfigMap(kube_api, {"metadata": {"name": "owner", "namespace": namespace}})
        owner.create()
        wait_for(lambda: recorder.count(Request(namespace, "owner")) >= 1, message="for_")
        owned = pykube.Secret(
            kube_api,
            {
                "metadata": {
                    "name": "child",
                    "namespace": namespace,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "name": "owner",
                            "uid": owner.obj["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "stringData": {"k": "v"},
            },
        )
        before = recorder.count(Request(namespace, "owner"))
        owned.create()
        wait_for(lambda: recorder.count(Request(namespace, "owner")) > before, message="owns")
        wait_for(lambda: recorder.count(Request(namespace, "mapped-child")) == 1, message="watches on create")
        owned.reload()
        owned.obj["stringData"] = {"k": "changed"}  # not a label change: filtered out
        owned.update()
        time.sleep(0.5)  # the filtered event's chance to queue a pass: none may run, so none to count
        assert recorder.count(Request(namespace, "mapped-child")) == 1
        owned.reload()
        owned.obj["metadata"].setdefault("labels", {})["tier"] = "x"
        owned.update()
        wait_for(lambda: recorder.count(Request(namespace, "mapped-child")) == 2, message="label change")
    finally:
        running.stop()


def test_config_max_concurrent_reconciles_wins(cluster: Any, namespace: str) -> None:
    """maxConcurrentReconciles in the config overrides the code's with_options."""
    manager = make_manager(
        cluster, namespace, reconcilers={"tuned": {"maxConcurrentReconciles": 5, "module": "json"}}
    )
    controller = (
        manager.controller("tuned")
        .for_(CONFIG_MAP)
        .with_options(max_concurrent_reconciles=2)
        .complete(lambda _request: Result())
    )
    assert controller.max_concurrent_reconciles == 5


def test_named_controller_without_for(cluster: Any, namespace: str, kube_api: pykube.HTTPClient) -> None:
    """A controller with only watches() (controller-runtime's Named() without For()) reconciles
    the keys its map function names, here one key per label value."""
    manager = make_manager(cluster, namespace)
    seen: list[Request] = []

    def by_team(obj: dict[str, Any]) -> list[Request]:
        return [Request("", f"team-{obj['metadata'].get('labels', {}).get('team', 'none')}")]

    def reconcile(request: Request) -> Result:
        seen.append(request)
        return Result()

    manager.controller("teams").watches(CONFIG_MAP, by_team, namespace=namespace).complete(reconcile)
    running = RunningManager(manager)
    try:
        body = {"metadata": {"name": "a", "namespace": namespace, "labels": {"team": "blue"}}}
        pykube.ConfigMap(kube_api, body).create()
        wait_for(lambda: Request("", "team-blue") in seen, message="mapped key reconciled")
    finally:
        running.stop()


def test_builder_misuse_is_reported(cluster: Any, namespace: str) -> None:
    """complete() with no watch at all, owns() without for_, a second for_, and duplicate
    controller names are errors."""
    manager = make_manager(cluster, namespace)
    with pytest.raises(ValueError, match="for_"):
        manager.controller("x").complete(lambda _request: Result())
    with pytest.raises(ValueError, match="owns"):
        manager.controller("x").owns(SECRET)
    with pytest.raises(ValueError, match="already"):
        manager.controller("x").for_(CONFIG_MAP).for_(SECRET)
    manager.controller("dup").for_(CONFIG_MAP).complete(lambda _request: Result())
    with pytest.raises(ValueError, match="exists"):
        manager.controller("dup").for_(CONFIG_MAP).complete(lambda _request: Result())
