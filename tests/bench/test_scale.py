"""The pure parts of ``bench.scale``: per-item percentiles, per-minute ARM rates, API counts,
bottleneck naming, the estate plan, the cluster's flags, and the manager config the bench derives
from config/manager/config.yaml (it may differ from the shipped file only where its docstring
says)."""

from __future__ import annotations

import pytest

import bench.scale
from bench.scale_cluster import CLUSTER_SETTINGS, with_settings
from bench.scale_config import (
    ADDED_RECONCILERS,
    DIFFERENCES,
    differing_paths,
    load_shipped,
    manager_config,
    undeclared_differences,
)
from bench.scale_figures import (
    ArmCall,
    ArmRates,
    api_counts,
    arm_operations,
    arm_rates,
    item_latencies,
    name_bottleneck,
)
from bench.scale_world import plan_estate
from nodewright.controllers.main import REGISTRY
from nodewright.runtime.process.config import parse_config


def _derived() -> dict[str, object]:
    return manager_config(
        load_shipped(),
        endpoint="https://127.0.0.1:4443",
        ca_bundle="/tmp/ca.pem",
        subscription="00000000-0000-4000-8000-000000000001",
        token="bench",
        metrics_port=18443,
        health_port=18081,
    )


def test_derived_config_differs_from_the_shipped_one_only_where_declared() -> None:
    """Every key in which the bench's config differs from config/manager/config.yaml is one
    DIFFERENCES declares, and it does differ (the bench is not running the shipped file by
    accident of an empty diff)."""
    shipped = load_shipped()
    derived = _derived()
    assert undeclared_differences(shipped, derived) == set()
    changed = differing_paths(shipped, derived)
    assert "reconcilers.identity-assignment.options.cloud.armEndpoint" in changed
    assert not any(path.startswith(("leaderElection", "cache", "logging")) for path in changed)
    assert derived["leaderElection"] == shipped["leaderElection"]


def test_derived_config_keeps_the_shipped_cloud_tuning_and_enables_every_reconciler() -> None:
    """Rate limits and worker counts stay as shipped; every built-in reconciler is enabled and the
    result is a config the manager accepts."""
    shipped = load_shipped()
    derived = _derived()
    reconcilers = derived["reconcilers"]
    assert isinstance(reconcilers, dict)
    shipped_cloud = shipped["reconcilers"]["identity-assignment"]["options"]["cloud"]
    for entry in reconcilers.values():
        assert entry["enabled"] is True
        assert entry["options"]["cloud"]["mutationQps"] == shipped_cloud["mutationQps"]
        assert entry["options"]["cloud"]["mutationBurst"] == shipped_cloud["mutationBurst"]
    assert set(reconcilers) == set(REGISTRY.names()) | set()
    assert set(ADDED_RECONCILERS) <= set(reconcilers)
    config = parse_config(derived, "bench")
    assert config.reconcilers["identity-assignment"].max_concurrent_reconciles == 4


def test_bench_docstring_names_every_declared_difference() -> None:
    """The bench's docstring lists each key path its config may change."""
    doc = bench.scale.__doc__ or ""
    for pattern in DIFFERENCES:
        stem = pattern.removesuffix(".*").removesuffix(".credential")
        assert stem.rsplit(".", 1)[-1] in doc, pattern


def test_undeclared_difference_is_caught() -> None:
    """A change outside DIFFERENCES (a tuning) is reported."""
    derived = _derived()
    derived["reconcilers"]["identity-assignment"]["maxConcurrentReconciles"] = 16  # type: ignore[index]
    assert undeclared_differences(load_shipped(), derived) == {
        "reconcilers.identity-assignment.maxConcurrentReconciles"
    }


@pytest.mark.parametrize(
    ("due", "done", "expected"),
    [
        pytest.param({"a": 110.0, "b": 112.0}, {"a": 111.0, "b": 115.0}, (2, 1.0, 3.0, 0), id="two-items"),
        pytest.param({"a": 0.0}, {"a": 105.0}, (1, 5.0, 5.0, 0), id="due-before-phase-counts-from-start"),
        pytest.param({"a": 110.0}, {}, (0, None, None, 1), id="never-done-is-missing"),
        pytest.param({"a": 10.0}, {"a": 50.0}, (0, None, None, 0), id="done-before-phase-not-counted"),
        pytest.param({"a": 120.0}, {"a": 110.0}, (1, 0.0, 0.0, 0), id="done-before-due-is-zero"),
        pytest.param({"a": 300.0}, {}, (0, None, None, 0), id="due-after-phase-ignored"),
    ],
)
def test_item_latencies(
    due: dict[str, float], done: dict[str, float], expected: tuple[int, float | None, float | None, int]
) -> None:
    """Per item, in a phase from 100 s to 200 s: done minus max(due, phase start), only for
    items done within the phase; an item due and never done is missing."""
    result = item_latencies(due, done, 100.0, 200.0)
    assert (result.count, result.p50, result.p99, result.missing) == expected


def test_item_latencies_percentiles_are_nearest_rank() -> None:
    """p50 and p99 of 100 items 1..100 s are 50 and 99 s."""
    due = {str(i): 0.0 for i in range(1, 101)}
    done = {str(i): float(i) for i in range(1, 101)}
    result = item_latencies(due, done, 0.0, 1000.0)
    assert (result.count, result.p50, result.p99) == (100, 50.0, 99.0)


def test_arm_rates_per_minute_and_busiest_minute() -> None:
    """120 reads over 2 minutes are 60/min; deletes count as writes; 429s are counted by status;
    the peak is the most calls within any 60 s."""
    calls = [ArmCall(float(i), "reads", 200) for i in range(100)]  # 100 in the first 100 s
    calls += [ArmCall(100.0 + i * 1.0, "reads", 200) for i in range(20)]
    calls += [ArmCall(5.0, "writes", 200), ArmCall(6.0, "deletes", 202), ArmCall(7.0, "writes", 429)]
    rates = arm_rates(calls, 120.0)
    assert rates.reads == 120
    assert rates.reads_per_minute == pytest.approx(60.0)
    assert rates.writes == 3
    assert rates.throttled == 1
    assert rates.throttled_per_minute == pytest.approx(0.5)
    assert rates.peak_reads_minute == 60
    assert rates.peak_writes_minute == 3


def test_arm_operations_count_each_class_and_operation_most_first() -> None:
    """A GET and a PUT of the same operation name are two rows, and so are its successes and its
    errors (by status); ties are ordered by name."""
    calls = [ArmCall(0.0, "reads", 200, "NetworkInterfaces.get") for _ in range(3)]
    calls += [ArmCall(0.0, "writes", 200, "VirtualMachineScaleSetVMs.update")]
    calls += [ArmCall(0.0, "reads", 200, "VirtualMachineScaleSetVMs.get")]
    calls += [ArmCall(0.0, "reads", 429, "")]
    calls += [ArmCall(0.0, "writes", 412, "VirtualMachineScaleSetVMs.update")]
    assert list(arm_operations(calls).items()) == [
        ("reads NetworkInterfaces.get", 3),
        ("reads ? 429", 1),
        ("reads VirtualMachineScaleSetVMs.get", 1),
        ("writes VirtualMachineScaleSetVMs.update", 1),
        ("writes VirtualMachineScaleSetVMs.update 412", 1),
    ]


def test_api_counts_sum_requests_and_writes_by_verb() -> None:
    before = {"GET": 10.0, "LIST": 5.0, "PATCH": 2.0}
    after = {"GET": 30.0, "LIST": 6.0, "PATCH": 7.0, "POST": 3.0, "WATCH": 1.0}
    assert api_counts(before, after) == (20 + 1 + 5 + 3 + 1, 5 + 3)


def _rates(*, reads: int = 0, writes: int = 0, throttled: int = 0) -> ArmRates:
    return ArmRates(0.0, 0.0, 0.0, reads, writes, reads, writes, throttled)


@pytest.mark.parametrize(
    ("cpu", "rates", "expected"),
    [
        pytest.param(
            {"manager": 5.0, "kube-apiserver": 9.0, "kwok": 1.0}, _rates(), "kube-apiserver", id="cpu"
        ),
        pytest.param({"manager": 5.0}, _rates(writes=500), "ARM write budget", id="writes-near-refill"),
        pytest.param({"manager": 5.0}, _rates(reads=1300), "ARM read budget", id="reads-near-refill"),
        pytest.param({"manager": 5.0}, _rates(reads=10, throttled=1), "ARM read budget", id="throttled"),
        pytest.param({"manager": 5.0}, _rates(writes=100, reads=100), "manager", id="well-inside"),
        pytest.param({}, None, "unknown", id="nothing"),
    ],
)
def test_name_bottleneck(cpu: dict[str, float], rates: ArmRates | None, expected: str) -> None:
    """ARM's budget when throttled or a bucket's busiest minute used 80 % of its refill, else the
    process with the most CPU."""
    assert name_bottleneck(cpu, rates) == expected


def test_estate_plan_splits_nodes_into_pools_of_at_most_100() -> None:
    assert plan_estate(50).pool_sizes == (25, 25)
    assert plan_estate(200).pool_sizes == (100, 100)
    plan = plan_estate(1_050)
    assert sum(plan.pool_sizes) == 1_050
    assert max(plan.pool_sizes) <= 100
    assert plan.identities == plan.pools + 1


def test_cluster_settings_replace_the_components_flags() -> None:
    """kwok's lease duration is replaced, not given twice; other flags are kept."""
    arguments = ["/bin/kwok", "--kubeconfig=k", "--node-lease-duration-seconds=40"]
    changed = with_settings("kwok", arguments)
    assert changed == [
        "/bin/kwok",
        "--kubeconfig=k",
        f"--node-lease-duration-seconds={CLUSTER_SETTINGS['kwok']['--node-lease-duration-seconds']}",
    ]
    assert with_settings("etcd", ["etcd", "--x=1"]) == ["etcd", "--x=1"]
