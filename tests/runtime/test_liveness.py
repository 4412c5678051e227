"""/healthz means something: it fails while a reconcile is stuck past the deadline and once an
informer has stopped, on a real manager against the real API server; /readyz needs synced
caches."""

from __future__ import annotations

import threading
from typing import Any

import pykube

from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.observe.health import workers_not_stuck
from tests.runtime.manager_helpers import RunningManager, http_get, make_manager
from tests.waiting import wait_for

CONFIG_MAP = Kind("v1", "ConfigMap", "configmaps")


def create_config_map(kube_api: pykube.HTTPClient, namespace: str, name: str) -> None:
    pykube.ConfigMap(kube_api, {"metadata": {"name": name, "namespace": namespace}, "data": {}}).create()


def test_healthz_fails_while_a_reconcile_is_stuck_and_recovers(
    cluster: Any, namespace: str, kube_api: pykube.HTTPClient
) -> None:
    """A reconcile blocked past stuckWorkerDeadline turns /healthz to 503 naming the workers
    check; once it returns, /healthz is 200 again."""
    manager = make_manager(
        cluster, namespace, health={"bindAddress": "127.0.0.1:0", "stuckWorkerDeadline": 1}
    )
    release = threading.Event()
    entered = threading.Event()

    def reconcile(request: Request) -> Result:
        if request.name == "wedge":
            entered.set()
            release.wait(60)
        return Result()

    manager.controller("wedged").for_(CONFIG_MAP, namespace=namespace).complete(reconcile)
    running = RunningManager(manager)
    try:
        wait_for(manager.started.is_set, timeout=30, message="manager started")
        port = manager.health_port or 0
        assert http_get(port, "/healthz")[0] == 200
        assert http_get(port, "/readyz")[0] == 200
        create_config_map(kube_api, namespace, "wedge")
        wait_for(entered.is_set, timeout=30, message="the reconcile entered")
        wait_for(lambda: http_get(port, "/healthz")[0] == 503, timeout=30, message="/healthz 503")
        body = http_get(port, "/healthz")[1]
        assert "[-]workers failed" in body
        assert "[+]informers ok" in body
        release.set()
        wait_for(lambda: http_get(port, "/healthz")[0] == 200, timeout=30, message="healthy again")
    finally:
        release.set()
        running.stop()
    assert running.error is None


def test_healthz_fails_once_an_informer_stopped(cluster: Any, namespace: str) -> None:
    """An informer whose threads ended (here: stopped under the running manager) fails /healthz,
    naming the informers check."""
    manager = make_manager(cluster, namespace)
    manager.controller("watching").for_(CONFIG_MAP, namespace=namespace).complete(lambda _: Result())
    running = RunningManager(manager)
    try:
        wait_for(manager.started.is_set, timeout=30, message="manager started")
        port = manager.health_port or 0
        assert http_get(port, "/healthz")[0] == 200
        manager.cache.informers()[0].stop()
        status, body = http_get(port, "/healthz")
        assert status == 503, body
        assert "[-]informers failed" in body
        assert http_get(port, "/healthz/workers")[0] == 200
    finally:
        running.stop()


def test_workers_check_compares_each_controller_with_the_deadline() -> None:
    """Over the deadline fails, at or under passes, and a deadline of 0 turns the check off."""
    running = [("fast", 1.0), ("slow", 700.0)]
    assert workers_not_stuck(lambda: running, 600)() is False
    assert workers_not_stuck(lambda: running, 700)() is True
    assert workers_not_stuck(lambda: running, 0)() is True
    assert workers_not_stuck(list, 1)() is True
