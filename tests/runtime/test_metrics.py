"""Metrics: controller-runtime's names scraped over HTTP, and per-manager isolation."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodewright.runtime.control.ratelimit import ItemExponentialRateLimiter
from nodewright.runtime.control.workqueue import WorkQueue
from nodewright.runtime.observe.metrics import Metrics

EXPECTED_FAMILIES = {
    "controller_runtime_reconcile_total": "counter",
    "controller_runtime_reconcile_errors_total": "counter",
    "controller_runtime_terminal_reconcile_errors_total": "counter",
    "controller_runtime_reconcile_panics_total": "counter",
    "controller_runtime_reconcile_time_seconds": "histogram",
    "controller_runtime_max_concurrent_reconciles": "gauge",
    "controller_runtime_active_workers": "gauge",
    "workqueue_depth": "gauge",
    "workqueue_adds_total": "counter",
    "workqueue_retries_total": "counter",
    "workqueue_queue_duration_seconds": "histogram",
    "workqueue_work_duration_seconds": "histogram",
    "workqueue_unfinished_work_seconds": "gauge",
    "workqueue_longest_running_processor_seconds": "gauge",
    "leader_election_master_status": "gauge",
}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        return str(response.read().decode())


def test_scraped_names_are_controller_runtimes() -> None:
    """Every metric name appears on /metrics exactly as controller-runtime spells it, with values."""
    metrics = Metrics()
    queue: WorkQueue[str] = WorkQueue(
        "q", rate_limiter=ItemExponentialRateLimiter(60, 60), metrics=metrics.queue_metrics("q")
    )
    metrics.watch_queue(queue)
    metrics.controller_registered("c", 2)
    queue.add("a")
    queue.add("b")
    assert queue.get() == "a"
    queue.done("a")
    assert queue.get() == "b"  # "b" stays in flight
    queue.add("c")
    queue.add_rate_limited("z")
    metrics.reconcile_time.record(0.1, {"controller": "c"})
    metrics.leader_election_status.set(1, {"name": "lease"})
    server = metrics.serve("127.0.0.1:0")
    try:
        text = scrape(server.port)
    finally:
        server.stop()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    # the parser drops "_total" from counter family names; check the raw lines as well
    for name, kind in EXPECTED_FAMILIES.items():
        family_name = name.removesuffix("_total") if kind == "counter" else name
        assert families[family_name].type == kind, name
        assert f"\n{name}{{" in text or f"\n{name}_bucket{{" in text, name
    assert 'workqueue_depth{name="q"} 1.0' in text
    assert 'workqueue_adds_total{name="q"} 3.0' in text
    assert 'workqueue_retries_total{name="q"} 1.0' in text
    assert 'controller_runtime_reconcile_total{controller="c",result="requeue_after"} 0.0' in text
    assert 'controller_runtime_max_concurrent_reconciles{controller="c"} 2.0' in text
    assert 'leader_election_master_status{name="lease"} 1.0' in text
    assert "otel_scope" not in text
    assert "target_info" not in text


def test_unknown_path_is_404() -> None:
    """Only /metrics is served."""
    metrics = Metrics()
    server = metrics.serve("127.0.0.1:0")
    try:
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=5)
        raised.value.close()
        assert raised.value.code == 404
    finally:
        server.stop()


def test_two_instances_do_not_share_series() -> None:
    """Two managers' metrics in one process keep separate values."""
    first, second = Metrics(), Metrics()
    first.workqueue_adds.add(5, {"name": "same"})
    second.workqueue_adds.add(1, {"name": "same"})
    assert 'workqueue_adds_total{name="same"} 5.0' in first.render().decode()
    assert 'workqueue_adds_total{name="same"} 1.0' in second.render().decode()


def test_other_layers_instruments_land_on_their_managers_metrics() -> None:
    """Other layers' instruments, made on a manager's ``metrics.provider``, land on its /metrics."""
    metrics = Metrics()
    metrics.provider.get_meter("nodewright.runtime.kube.client").create_counter(
        "rest_client_requests_total"
    ).add(3, {"code": "200"})
    assert 'rest_client_requests_total{code="200"} 3.0' in metrics.render().decode()
