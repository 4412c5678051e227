"""Manager against a real API server: probes, metrics, the sample reconciler, two managers, one Lease."""

from __future__ import annotations

import re
import time
from typing import Any

import pykube
import pytest

from nodewright.runtime.control.ratelimit import ItemExponentialRateLimiter
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.kube.kinds import CONFIG_MAP, Kind
from nodewright.runtime.process.manager import CacheSyncTimeoutError
from nodewright.runtime.process.registry import ReconcilerRegistry
from tests.runtime.manager_helpers import RunningManager, http_get, make_manager
from tests.waiting import wait_for

ABSENT_KIND = Kind("absent.example.com/v1", "Widget", "widgets")


def create_config_map(kube_api: pykube.HTTPClient, namespace: str, name: str, labels: dict[str, str]) -> None:
    body = {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": {}}
    pykube.ConfigMap(kube_api, body).create()


def config_map_data(kube_api: pykube.HTTPClient, namespace: str, name: str) -> dict[str, Any]:
    obj = pykube.ConfigMap.objects(kube_api, namespace=namespace).get_by_name(name)
    return dict(obj.obj.get("data") or {})


def test_readyz_is_503_until_caches_sync(cluster: Any, namespace: str) -> None:
    """With an informer that cannot sync, /healthz is 200 and /readyz 503; run() then fails."""
    manager = make_manager(cluster, namespace, cacheSyncTimeout=2)
    manager.controller("widgets").for_(ABSENT_KIND).complete(lambda _request: Result())
    running = RunningManager(manager)
    port = wait_for(lambda: manager.health_port, message="health server")
    assert http_get(port, "/healthz")[0] == 200
    status, body = http_get(port, "/readyz")
    assert status == 503
    assert "[-]informers-synced failed" in body
    running.thread.join(10)
    assert isinstance(running.error, CacheSyncTimeoutError)
    assert manager.controllers[0].queue.shutting_down is False  # controllers never started


def test_sample_reconciler_end_to_end_with_probes_and_metrics(
    cluster: Any, namespace: str, kube_api: pykube.HTTPClient
) -> None:
    """The sample module named in config is set up and run by a real Manager: it reconciles
    labelled ConfigMaps only; /readyz turns 200 after sync; /metrics shows its series."""
    manager = make_manager(
        cluster,
        namespace,
        reconcilers={"sample": {"module": "tests.runtime.sample_reconciler", "options": {"greeting": "hi"}}},
    )
    assert manager.setup_reconcilers(ReconcilerRegistry()) == ["sample"]
    create_config_map(kube_api, namespace, "before-start", {"sample": "yes"})
    running = RunningManager(manager)
    try:
        wait_for(manager.started.is_set, message="manager started")
        assert http_get(manager.health_port or 0, "/readyz")[0] == 200
        create_config_map(kube_api, namespace, "unlabelled", {"sample": "no"})
        create_config_map(kube_api, namespace, "after-start", {"sample": "yes"})
        for name in ("before-start", "after-start"):

            def greeted(name: str = name) -> bool:
                return config_map_data(kube_api, namespace, name).get("greeting") == "hi"

            wait_for(greeted, message=f"{name} reconciled")
        # after-start was created after unlabelled and reconciled by the one worker: had the
        # unlabelled one been queued, it would have been reconciled first.
        assert "greeting" not in config_map_data(kube_api, namespace, "unlabelled")
        status, text = http_get(manager.metrics_port or 0, "/metrics")
        assert status == 200
        assert 'controller_runtime_reconcile_total{controller="sample",result="success"}' in text
        assert 'controller_runtime_active_workers{controller="sample"} 0.0' in text
        assert 'workqueue_adds_total{name="sample"}' in text
        assert 'leader_election_master_status{name="manager-lease"} 1.0' in text
        assert "controller_runtime_reconcile_time_seconds_bucket" in text
        written = re.search(r"^sample_greetings_written_total (\S+)$", text, re.MULTILINE)
        assert written is not None  # the plug-in's own counter, on its manager's /metrics
        assert float(written.group(1)) >= 2.0  # one per labelled ConfigMap (a stale read may add one)
    finally:
        running.stop()
    assert running.error is None


@pytest.mark.slow
def test_two_managers_one_lease_only_leader_reconciles(
    cluster: Any, namespace: str, kube_api: pykube.HTTPClient
) -> None:
    """Two managers share a Lease: only the leader reconciles; stopping it hands over at once."""
    seen: dict[str, list[Request]] = {"a": [], "b": []}
    managers = {}
    running = {}
    for name in ("a", "b"):
        manager = make_manager(cluster, namespace)

        def reconcile(request: Request, name: str = name) -> Result:
            seen[name].append(request)
            return Result()

        manager.controller("count").for_(CONFIG_MAP, namespace=namespace).complete(reconcile)
        managers[name] = manager
        running[name] = RunningManager(manager)
    try:
        leader_name = wait_for(
            lambda: next((n for n, m in managers.items() if m.is_leader()), None), message="a leader"
        )
        standby_name = "b" if leader_name == "a" else "a"
        create_config_map(kube_api, namespace, "one", {})
        wait_for(lambda: Request(namespace, "one") in seen[leader_name], message="leader reconciled")
        time.sleep(1.0)  # the standby's chance to reconcile wrongly: it has no pass to count
        assert seen[standby_name] == []
        assert not managers[standby_name].is_leader()

        stopped_at = time.monotonic()
        running[leader_name].stop()
        wait_for(managers[standby_name].is_leader, timeout=3, message="standby leads")
        assert time.monotonic() - stopped_at < 3.0  # released, not expired (lease is 3 s)
        wait_for(lambda: Request(namespace, "one") in seen[standby_name], message="standby reconciled")
    finally:
        for handle in running.values():
            handle.stop()
    assert all(handle.error is None for handle in running.values())


def test_graceful_stop_drains_in_flight_reconcile(
    cluster: Any, namespace: str, kube_api: pykube.HTTPClient
) -> None:
    """stop() lets a running reconcile finish and starts no new one (leader election off)."""
    finished: list[str] = []
    started: list[str] = []

    def reconcile(request: Request) -> Result:
        started.append(request.name)
        time.sleep(1.0)  # a reconcile still running when stop() comes
        finished.append(request.name)
        return Result()

    manager = make_manager(cluster, namespace, leaderElection={"enabled": False})
    manager.controller("slow").for_(CONFIG_MAP, namespace=namespace).complete(reconcile)
    create_config_map(kube_api, namespace, "first", {})
    create_config_map(kube_api, namespace, "second", {})
    running = RunningManager(manager)
    wait_for(lambda: started, message="a reconcile started")
    running.stop()
    assert finished == started
    assert len(finished) == 1


def test_failing_reconcile_is_counted_and_retried_on_metrics(
    cluster: Any, namespace: str, kube_api: pykube.HTTPClient
) -> None:
    """A reconcile that raises three times is retried with backoff by the same worker until it
    succeeds; /metrics shows the errors, the retries and the success."""
    calls: list[float] = []

    def reconcile(request: Request) -> Result:
        calls.append(time.monotonic())
        if len(calls) <= 3:
            raise RuntimeError("API said no")
        return Result()

    manager = make_manager(cluster, namespace, leaderElection={"enabled": False})
    # 50 ms x 2^n (not the default 5 ms) so that the growth stands out from scheduling noise
    # on a loaded machine: 50, 100, 200 ms
    backoff = ItemExponentialRateLimiter(0.05, 10.0)
    controller = (
        manager.controller("flaky")
        .for_(CONFIG_MAP, namespace=namespace)
        .with_options(rate_limiter=backoff)
        .complete(reconcile)
    )
    create_config_map(kube_api, namespace, "flaky", {})
    running = RunningManager(manager)
    try:
        wait_for(lambda: len(calls) == 4, message="fourth call")
        assert calls[3] - calls[2] > calls[1] - calls[0]  # backoff grew
        assert all(worker.is_alive() for worker in controller._workers)
        recorder = manager.event_recorder("flaky")
        assert manager.event_recorder("flaky") is recorder

        def scraped() -> str:
            return http_get(manager.metrics_port or 0, "/metrics")[1]

        wait_for(lambda: 'result="success"} 1.0' in scraped(), message="success on /metrics")
        text = scraped()
        assert 'controller_runtime_reconcile_errors_total{controller="flaky"} 3.0' in text
        assert 'controller_runtime_reconcile_total{controller="flaky",result="error"} 3.0' in text
        assert 'workqueue_retries_total{name="flaky"} 3.0' in text
    finally:
        running.stop()
