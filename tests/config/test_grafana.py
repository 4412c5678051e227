"""config/grafana's dashboard asks only for series nodewright exports: every metric name in its
queries appears on a manager's /metrics once each instrument has recorded something (without a
cluster; tests/devenv/test_prometheus.py evaluates every query against a real Prometheus)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from nodewright.api.nodewright.v1alpha1 import RolloutState
from nodewright.cloud.throttle import CallEvent
from nodewright.controllers.cloud_access import MetricsCallObserver
from nodewright.controllers.node_image.rollout_metrics import RolloutMetrics
from nodewright.controllers.node_network_config.metrics import IPAM_GAUGES, IpamMetrics
from nodewright.controllers.status import AZURE_ASSIGNED_IDENTITY, NODE_IMAGE, NODE_NETWORK_CONFIG
from nodewright.controllers.status_metrics import register_status_metrics
from nodewright.runtime.control.ratelimit import ItemExponentialRateLimiter
from nodewright.runtime.control.workqueue import WorkQueue
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, Kind
from nodewright.runtime.process.config import ManagerConfig
from nodewright.runtime.process.manager import Manager

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


UNREACHABLE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "none", "user": {"token": "unused"}}],
    "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
    "current-context": "none",
}
"""The manager below is built, never run: nothing is sent to this address."""


def cached_objects(manager: Manager) -> None:
    """A NodeImage, a Node with its NodeNetworkConfig and an AzureAssignedIdentity in the
    manager's informer stores, as its reconcilers' informers would hold them."""
    objects: list[tuple[Kind, str | None, dict[str, Any]]] = [
        (NODE_IMAGE, None, {"metadata": {"name": "user-pool"}, "status": {"upToDateNodes": 1}}),
        (NODE, None, {"metadata": {"name": "node-1", "labels": {"kubernetes.azure.com/agentpool": "user"}}}),
        (NODE_NETWORK_CONFIG, "kube-system", {"metadata": {"name": "node-1", "namespace": "kube-system"}}),
        (AZURE_ASSIGNED_IDENTITY, "default", {"metadata": {"name": "a", "namespace": "default"}}),
    ]
    for kind, namespace, item in objects:
        key = f"{namespace}/{item['metadata']['name']}" if namespace else item["metadata"]["name"]
        manager.cache.informer(kind, namespace=namespace).store.put(key, item)


@pytest.fixture
def exported(tmp_path: Path) -> set[str]:
    """Sample names on /metrics after every instrument recorded once (as in a working manager)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(UNREACHABLE_KUBECONFIG))
    manager = Manager(ManagerConfig(), Client.from_kubeconfig(kubeconfig))
    metrics = manager.metrics
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
    observer = MetricsCallObserver(metrics)
    observer.record(CallEvent("call", "network.put_nic", "success", 0.2))
    observer.record(CallEvent("request", "network.put_nic", "429", 0.1))
    RolloutMetrics(metrics).rollout_state("user-pool", RolloutState.ROLLING)
    ipam = IpamMetrics(lambda _now: {}, lambda: {"nodes": False})
    manager.services.get(IPAM_GAUGES).add(ipam)
    register_status_metrics(manager)
    cached_objects(manager)
    text = metrics.render().decode()
    assert ipam.exhausted_subnets() == {"nodes": False}
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
