"""The NodeImage controller's own cost per pass, read from a manager's ``/metrics``.

Owns ``PassCounts`` (the nodeimage passes, and the ``nodewright_rollout_pass_cpu_seconds``
histogram summed over NodeImages, with the difference of two readings), ``pass_counts`` (parse a
scrape) and ``scrape_manager`` (a bench's way past the authenticated metrics endpoint: a
ServiceAccount bound to the shipped metrics-reader ClusterRole and a TokenRequest token, as
Prometheus would hold one). The pass CPU time is the controller's decision time: the pure read,
decide and plan work of a pass on its worker thread, without the time it waits on the API
server or ARM.

Neighbours: ``bench.nodeimage`` (in-process manager) and ``bench.scale`` (manager process).
Side effects: ``scrape_manager`` creates a ServiceAccount, a ClusterRole and its binding.
"""

from __future__ import annotations

import contextlib
import math
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind

__all__ = ["PassCounts", "pass_counts", "scrape_manager"]

PASS_CPU = "nodewright_rollout_pass_cpu_seconds"  # noqa: S105 - a metric name
READER_ROLE = Path(__file__).resolve().parents[1] / "config" / "rbac" / "metrics_reader_role.yaml"
READER = "bench-metrics-reader"
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
CLUSTER_ROLE = Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING = Kind(
    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)


@dataclass(frozen=True)
class PassCounts:
    """Counts so far (or, from ``since``, over a window)."""

    passes: float = 0.0
    cpu_sum: float = 0.0
    cpu_count: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)
    """Cumulative histogram: upper bound (seconds) -> passes at or under it."""
    wall_sum: float = 0.0
    """Seconds the nodeimage passes took from start to end, waits on the API server and ARM
    included (``controller_runtime_reconcile_time_seconds``)."""

    def since(self, before: PassCounts) -> PassCounts:
        return PassCounts(
            self.passes - before.passes,
            self.cpu_sum - before.cpu_sum,
            self.cpu_count - before.cpu_count,
            {bound: value - before.buckets.get(bound, 0.0) for bound, value in self.buckets.items()},
            self.wall_sum - before.wall_sum,
        )

    @property
    def mean_wall_ms(self) -> float:
        """A pass's mean wall time: its CPU plus what it waited on."""
        return 1000 * self.wall_sum / max(self.passes, 1)

    @property
    def mean_ms(self) -> float:
        return 1000 * self.cpu_sum / max(self.cpu_count, 1)

    @property
    def p99_ms(self) -> float:
        """The upper bound of the bucket holding the 99th percentile (inf above the last)."""
        target = 0.99 * self.cpu_count
        return 1000 * next((b for b, v in sorted(self.buckets.items()) if v >= target), math.inf)


def pass_counts(text: str) -> PassCounts:
    """The nodeimage controller's figures in one Prometheus text scrape."""
    passes = cpu_sum = cpu_count = wall_sum = 0.0
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            ours = sample.labels.get("controller") == "nodeimage"
            if sample.name == "controller_runtime_reconcile_total":
                passes += sample.value if ours else 0.0
            elif sample.name == "controller_runtime_reconcile_time_seconds_sum":
                wall_sum += sample.value if ours else 0.0
            elif sample.name == f"{PASS_CPU}_sum":
                cpu_sum += sample.value
            elif sample.name == f"{PASS_CPU}_count":
                cpu_count += sample.value
            elif sample.name == f"{PASS_CPU}_bucket":  # one series per NodeImage: summed per bound
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return PassCounts(passes, cpu_sum, cpu_count, buckets, wall_sum)


def _reader_token(admin: Client, namespace: str) -> str:
    """A token of a ServiceAccount bound to the shipped metrics-reader ClusterRole."""
    role: dict[str, Any] = next(
        d for d in yaml.safe_load_all(READER_ROLE.read_text()) if d and d["kind"] == "ClusterRole"
    )
    role["metadata"] = {"name": READER}
    binding = {
        "metadata": {"name": READER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
        "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
    }
    for kind, body, where in (
        (SERVICE_ACCOUNT, {"metadata": {"name": READER}}, namespace),
        (CLUSTER_ROLE, role, None),
        (CLUSTER_ROLE_BINDING, binding, None),
    ):
        with contextlib.suppress(errors.AlreadyExists):
            admin.create(kind, body, where)
    response = admin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{READER}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(response.json()["status"]["token"])


def scrape_manager(admin: Client, port: int, namespace: str) -> PassCounts:
    """The manager's figures from ``https://127.0.0.1:port/metrics`` (its self-signed
    certificate is not verified: the bench started the process on loopback itself)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    request.add_header("Authorization", f"Bearer {_reader_token(admin, namespace)}")
    with urllib.request.urlopen(request, timeout=30, context=context) as response:  # noqa: S310
        return pass_counts(response.read().decode())
