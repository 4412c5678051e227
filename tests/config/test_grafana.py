"""config/grafana's dashboard asks only for series nodewright exports: every metric name in its
queries appears on a manager's /metrics once each instrument has recorded something."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodewright.cloud.throttle import CallEvent
from nodewright.controllers.cloud_access import MetricsCallObserver
from nodewright.runtime import metrics as metrics_module
from nodewright.runtime.metrics import Metrics
from nodewright.runtime.ratelimit import ItemExponentialRateLimiter
from nodewright.runtime.workqueue import WorkQueue

DASHBOARD = Path(__file__).resolve().parents[2] / "config" / "grafana" / "nodewright-dashboard.json"
METRIC = re.compile(r"\b((?:controller_runtime|workqueue|leader_election|nodewright)_[a-z_]+)\b")


def queries(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield str(target["expr"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            yield str(query["query"])


@pytest.fixture
def exported() -> set[str]:
    """Sample names on /metrics after every instrument recorded once (as in a working manager)."""
    metrics = Metrics()
    metrics_module.activate(metrics)
    metrics.controller_registered("nodenetworkconfig", 4)
    metrics.reconcile_total.add(1, {"controller": "nodenetworkconfig", "result": "success"})
    metrics.reconcile_time.record(0.1, {"controller": "nodenetworkconfig"})
    metrics.leader_election_status.set(1, {"name": "nodewright-leader"})
    queue: WorkQueue[str] = WorkQueue(
        "nodenetworkconfig",
        rate_limiter=ItemExponentialRateLimiter(),
        metrics=metrics.queue_metrics("nodenetworkconfig"),
    )
    metrics.watch_queue(queue)
    queue.add("a")
    item = queue.get(timeout=5)
    assert item == "a"
    queue.done(item)
    queue.add_rate_limited("b")
    observer = MetricsCallObserver()
    observer.record(CallEvent("call", "network.put_nic", "success", 0.2))
    observer.record(CallEvent("request", "network.put_nic", "429", 0.1))
    text = metrics.render().decode()
    queue.shut_down()
    metrics.shutdown()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_every_metric_the_dashboard_queries_is_exported(exported: set[str]) -> None:
    """No panel asks for a series nodewright does not export (a renamed metric fails here)."""
    dashboard = json.loads(DASHBOARD.read_text())
    referenced = {name for query in queries(dashboard) for name in METRIC.findall(query)}
    assert len(referenced) >= 15
    missing = sorted(referenced - exported)
    assert not missing, f"the dashboard queries metrics nobody exports: {missing}"


def test_dashboard_covers_reconciles_queues_arm_ipam_and_rollouts() -> None:
    """One row per area the issue names, and each panel reads the chosen data source."""
    dashboard = json.loads(DASHBOARD.read_text())
    rows = [panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"]
    for word in ("Reconciles", "queues", "Azure Resource Manager", "IPAM", "rollouts"):
        assert any(word in row for row in rows), (word, rows)
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
