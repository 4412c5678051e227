"""A real Prometheus scrapes `make run`'s local environment the way a cluster's would.

One environment for the module: `make run`'s (``LocalEnvironment``: control plane, ARM emulator,
node simulator, samples, the demo Deployment and the manager with the demo's config), the manager
wrapped only to record its spans in memory (``traced_manager``), and Prometheus with `make run`'s
scrape config (``LocalEnvironment.scrape_jobs``: HTTPS, the token of a ServiceAccount bound to
nodewright-metrics-reader, config/prometheus/rules.yaml) plus one job whose ServiceAccount lacks
the role. Once the demo reached steady state: every expression of the Grafana dashboard, with its
template variables substituted as Grafana would, returns series with the labels its panel's
legend uses; the job without the role is a failed target (403); ARM 429s, a full subnet and a
rolled-back rollout fire their alerts, read through Prometheus' alerts API; and a reconcile of
each reconciler is one trace whose ARM requests are its child spans."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_image.rollout_state import READY_SEEN_ANNOTATION
from nodewright.devenv.demo import (
    DEPLOYMENT,
    NAMESPACE,
    NODE,
    NODE_IMAGE,
    NODE_IMAGE_ANNOTATION,
    REPOSITORY,
    WORKLOAD,
    LocalEnvironment,
)
from nodewright.devenv.prometheus import (
    Prometheus,
    grant_metrics_reader,
    scrape_config,
    scrape_job,
    scraper_token,
)
from tests.config.test_grafana import DASHBOARD, queries
from tests.devenv.test_demo import all_reconciled
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(900)]

UNAUTHORIZED_JOB = "nodewright-no-role"
RATE_INTERVAL = "1m"
"""What ``$__rate_interval`` stands for: at least four scrape intervals (5 s), as Grafana makes it."""
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
BAD_IMAGE = (
    "/subscriptions/00000000-0000-4000-8000-000000000001/resourceGroups/rg-images/providers/"
    "Microsoft.Compute/galleries/nodes/images/ubuntu/versions/9.9.9"
)


@dataclass
class Stack:
    environment: LocalEnvironment
    prometheus: Prometheus
    spans: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work_dir = tmp_path_factory.mktemp("prometheus-demo")
    spans = work_dir / "spans.jsonl"
    environment = LocalEnvironment(
        work_dir,
        seed=REPOSITORY / "config" / "emulator" / "seed-sample.yaml",
        samples=REPOSITORY / "config" / "samples",
        prometheus=False,
        manager_module="tests.devenv.traced_manager",
        manager_arguments=("--spans", str(spans)),
    )
    prometheus: Prometheus | None = None
    try:
        environment.start(lambda _message: None)
        assert environment.client is not None
        grant_metrics_reader(environment.client, "no-role", NAMESPACE, bound=False)
        no_role = scraper_token(environment.client, "no-role", NAMESPACE, work_dir / "no-role-token")
        jobs = [
            *environment.scrape_jobs(),
            scrape_job(UNAUTHORIZED_JOB, f"127.0.0.1:{environment.metrics_port}", no_role),
        ]
        prometheus = Prometheus(
            work_dir / "prometheus", scrape_config(jobs), work_dir / "logs" / "prometheus.log"
        )
        prometheus.start()
        wait_for(lambda: all_reconciled(environment.progress()), 240, "the demo's steady state", interval=2)
        yield Stack(environment, prometheus, spans)
    finally:
        if prometheus is not None:
            prometheus.stop()
        environment.stop()


def substituted(expression: str, jobs: list[str]) -> str:
    """The expression as Grafana sends it: ``$job`` (All of a multi-value variable) as the
    alternation of its values, ``$__rate_interval`` as ``RATE_INTERVAL``."""
    job = "(" + "|".join(re.escape(name) for name in jobs) + ")" if len(jobs) > 1 else re.escape(jobs[0])
    return expression.replace("$__rate_interval", RATE_INTERVAL).replace("$job", job)


def panel_targets() -> list[tuple[str, str, str]]:
    """(panel title, expression, legend format) of every panel's every query."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"], target.get("legendFormat", ""))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def test_every_dashboard_expression_returns_the_series_its_panel_shows(stack: Stack) -> None:
    """Each query of each panel, evaluated by Prometheus once the demo is steady, returns a
    non-empty result, and every series carries each label its legend names."""
    prometheus = stack.prometheus
    jobs = wait_for(
        lambda: prometheus.api("label/job/values", **{"match[]": "controller_runtime_reconcile_total"}),
        60,
        "the job variable's values (label_values(controller_runtime_reconcile_total, job))",
        interval=1,
    )
    assert jobs == ["nodewright"]
    dashboard = json.loads(DASHBOARD.read_text())
    assert any("label_values(controller_runtime_reconcile_total, job)" in q for q in queries(dashboard))
    targets = panel_targets()
    assert len(targets) >= 30
    missing: dict[str, str] = {}
    deadline = time.monotonic() + 120  # two scrapes at least for every rate()
    for title, expression, legend in targets:
        query = substituted(expression, jobs)
        result = prometheus.query(query)
        while not result and time.monotonic() < deadline:
            time.sleep(2)  # the poll of a wait for Prometheus's next scrape (its deadline above)
            result = prometheus.query(query)
        if not result:
            missing[title] = query
            continue
        labels = set(LEGEND_LABEL.findall(legend))
        for series in result:
            assert labels <= set(series["metric"]), (title, query, series["metric"])
    assert not missing, f"panels with no data: {json.dumps(missing, indent=1)}"


def test_a_scrape_without_the_role_is_refused_and_shows_as_a_failed_target(stack: Stack) -> None:
    """The job whose token's ServiceAccount lacks nodewright-metrics-reader gets 403 and is down;
    the job with the role is up."""

    def both_scraped() -> dict[str, dict[str, Any]] | None:
        found = {target["labels"]["job"]: target for target in stack.prometheus.targets()}
        return (
            found
            if all(found.get(j, {}).get("health") in {"up", "down"} for j in ("nodewright", UNAUTHORIZED_JOB))
            else None
        )

    targets = wait_for(both_scraped, 60, "both targets scraped", interval=1)
    assert targets["nodewright"]["health"] == "up", targets["nodewright"]
    refused = targets[UNAUTHORIZED_JOB]
    assert refused["health"] == "down", refused
    assert "403" in refused["lastError"], refused["lastError"]
    assert stack.prometheus.query(f'up{{job="{UNAUTHORIZED_JOB}"}} == 0')


def test_a_reconcile_of_each_reconciler_is_one_trace_with_its_arm_requests_as_children(stack: Stack) -> None:
    """From the manager's in-memory exporter: for identity assignment, node network config and
    node image, some reconcile span is the root of its trace and parent of ``ARM ...`` spans."""
    wanted = {"reconcile identity-assignment", "reconcile nodenetworkconfig", "reconcile nodeimage"}

    def traced() -> dict[str, list[str]] | None:
        spans = [json.loads(line) for line in stack.spans.read_text().splitlines() if line.strip()]
        by_trace: dict[str, list[dict[str, Any]]] = {}
        for span in spans:
            by_trace.setdefault(span["trace"], []).append(span)
        found: dict[str, list[str]] = {}
        for members in by_trace.values():
            roots = [s for s in members if s["parent"] is None]
            if len(roots) != 1 or roots[0]["name"] not in wanted:
                continue
            children = [
                s["name"] for s in members if s["parent"] == roots[0]["span"] and s["name"].startswith("ARM ")
            ]
            if children:
                found.setdefault(roots[0]["name"], children)
        return found if wanted <= set(found) else None

    found = wait_for(traced, 120, f"a trace with ARM children for each of {sorted(wanted)}", interval=2)
    assert all(
        name.split()[1] in {"GET", "PUT", "PATCH", "POST", "DELETE"}
        for names in found.values()
        for name in names
    )


class BadImage(threading.Thread):
    """A kernel that breaks after boot: stops the machine of every Node on ``BAD_IMAGE`` once the
    rollout saw it Ready, so it goes NotReady and the rollout's health gate fails."""

    def __init__(self, environment: LocalEnvironment) -> None:
        super().__init__(daemon=True, name="bad-image")
        self.environment = environment
        self.stopped: set[str] = set()
        self.halt = threading.Event()

    def run(self) -> None:
        client, emulator = self.environment.client, self.environment.emulator
        assert client is not None
        assert emulator is not None
        while not self.halt.wait(0.2):
            for node in client.list(NODE).items:
                metadata = node["metadata"]
                annotations = metadata.get("annotations") or {}
                on_bad = str(annotations.get(NODE_IMAGE_ANNOTATION, "")).lower() == BAD_IMAGE.lower()
                if on_bad and READY_SEEN_ANNOTATION in annotations and metadata["name"] not in self.stopped:
                    emulator.state.set_power_state(
                        str(parse_provider_id(node["spec"]["providerID"])), "stopped"
                    )
                    self.stopped.add(metadata["name"])


def fill_subnet(environment: LocalEnvironment, name: str) -> int:
    """Take every free address of the emulator's subnet ``name`` (as other tenants would)."""
    assert environment.emulator is not None
    taken = 0
    with environment.emulator.state.locked() as state:
        subnet = next(s for key, s in state.subnets.items() if key.endswith(f"/subnets/{name}"))
        while True:
            try:
                subnet.pool.allocate(f"{subnet.pool.subnet_id}/other-tenant/{taken}")
            except ArmError:
                return taken
            taken += 1


def firing(prometheus: Prometheus) -> set[str]:
    return {alert["labels"]["alertname"] for alert in prometheus.alerts() if alert["state"] == "firing"}


def diagnosis(prometheus: Prometheus) -> str:
    """What the alerts' series say, for a failure message."""
    expressions = [
        "ALERTS",
        "sum by (outcome) (increase(nodewright_azure_requests_total[5m]))",
        "nodewright_ipam_subnet_exhausted",
        "nodewright_rollout_state",
    ]
    return "\n".join(
        f"{e}: {[(r['metric'], r['value'][1]) for r in prometheus.query(e)]}" for e in expressions
    )


def test_arm_throttling_a_full_subnet_and_a_rollback_fire_their_alerts(stack: Stack) -> None:
    """The shipped rules, evaluated every 5 s, each after its `for:`: a new image whose canary
    goes NotReady after Ready is rolled back (NodewrightRolloutRolledBack); the node subnet's free
    addresses taken by others while the demo Deployment grows marks it exhausted
    (NodewrightSubnetFull); then every ARM read answered 429 (NodewrightArmThrottled). None of
    them fires before the faults."""
    environment, prometheus = stack.environment, stack.prometheus
    assert environment.client is not None
    assert environment.emulator is not None
    wanted = {"NodewrightArmThrottled", "NodewrightSubnetFull", "NodewrightRolloutRolledBack"}
    assert not firing(prometheus) & wanted, diagnosis(prometheus)
    bad_image = BadImage(environment)
    bad_image.start()
    throttle = None
    try:
        environment.client.patch(NODE_IMAGE, "user-pool", {"spec": {"image": BAD_IMAGE}})
        wait_for(
            lambda: prometheus.query('nodewright_rollout_state{node_image="user-pool"} == 5'),
            240,
            "the rollout RolledBack (nodewright_rollout_state 5)",
            interval=2,
        )
        assert bad_image.stopped, "the canary was never stopped"
        assert fill_subnet(environment, "nodes") > 0
        environment.client.patch(DEPLOYMENT, WORKLOAD, {"spec": {"replicas": 40}}, "default")
        wait_for(
            lambda: prometheus.query('nodewright_ipam_subnet_exhausted{subnet="nodes"} == 1'),
            180,
            "subnet nodes exhausted (nodewright_ipam_subnet_exhausted 1)",
            interval=2,
        )
        throttle = environment.emulator.faults.throttle(method="GET", times=None, retry_after=0.5)
        deadline = time.monotonic() + 240
        while not wanted <= firing(prometheus):
            if time.monotonic() > deadline:
                pytest.fail(f"{sorted(wanted)} not all firing within 240 s:\n{diagnosis(prometheus)}")
            time.sleep(2)  # the poll of a wait for the alerts' for: periods (deadline above)
    finally:
        if throttle is not None:
            environment.emulator.faults.remove(throttle.identifier)
        bad_image.halt.set()
        bad_image.join(5)
    alerts = {a["labels"]["alertname"]: a for a in prometheus.alerts() if a["state"] == "firing"}
    assert alerts["NodewrightRolloutRolledBack"]["labels"]["node_image"] == "user-pool"
    assert alerts["NodewrightSubnetFull"]["labels"]["subnet"] == "nodes"
    assert alerts["NodewrightArmThrottled"]["labels"]["severity"] == "warning"
