"""The pure decisions of the node_network_config reconciler, table-style: the controller owner
reference and CNS's IsControlledBy check, the release rule per consumer mode, the requested-count
check, the node pool of a Node, the pods a heir's announcement adds to its demand, the subnet's
time to exhaustion, and the NIC book's hysteresis and idle clocks."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodewright.api.nodewright.v1alpha1 import INCOMING_PODS_ANNOTATION, IncomingPods
from nodewright.controllers.node_network_config.demand import incoming_pods
from nodewright.controllers.node_network_config.metrics import (
    IpamGauges,
    IpamMetrics,
    NodeFigures,
    node_pool_of,
)
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.options import NodeNetworkConfigSettings
from nodewright.controllers.node_network_config.plan import count_rule
from nodewright.controllers.node_network_config.resources import (
    controller_reference,
    is_controlled_by,
    owner_references_for,
)
from nodewright.controllers.node_network_config.subnets import time_to_exhaustion
from nodewright.ipam import CountFacts, PoolScaler, RequestedCount, requested_count
from nodewright.runtime.observe.metrics import Metrics

NODE = {"metadata": {"name": "node-1", "uid": "uid-1"}}


def _with_references(*references: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "node-1", "ownerReferences": list(references)}}


def test_controller_reference_is_what_set_controller_ref_writes() -> None:
    """controller and blockOwnerDeletion true, the Node's name and uid."""
    assert controller_reference(NODE) == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-1",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


@pytest.mark.parametrize(
    ("references", "controlled"),
    [
        pytest.param([], False, id="no-references"),
        pytest.param([{"kind": "Node", "uid": "uid-1"}], False, id="owner-not-controller"),
        pytest.param([{"kind": "Node", "uid": "uid-1", "controller": False}], False, id="controller-false"),
        pytest.param([{"kind": "Node", "uid": "uid-0", "controller": True}], False, id="older-node"),
        pytest.param([{"kind": "Node", "uid": "uid-1", "controller": True}], True, id="controlled"),
    ],
)
def test_is_controlled_by(references: list[dict[str, Any]], controlled: bool) -> None:
    """As metav1.IsControlledBy: a controller reference with the owner's uid."""
    assert is_controlled_by(_with_references(*references), NODE) is controlled


def test_owner_references_migration() -> None:
    """Legacy or stale Node references are replaced, others kept; nothing to do when controlled;
    never a second controller; nothing without the Node's uid."""
    legacy = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-1",
        "uid": "uid-1",
        "blockOwnerDeletion": False,
    }
    keeper = {"apiVersion": "v1", "kind": "ConfigMap", "name": "k", "uid": "k"}
    assert owner_references_for(_with_references(legacy, keeper), NODE) == [
        keeper,
        controller_reference(NODE),
    ]
    stale = {**legacy, "uid": "uid-0", "controller": True}
    assert owner_references_for(_with_references(stale), NODE) == [controller_reference(NODE)]
    assert owner_references_for(_with_references(controller_reference(NODE)), NODE) is None
    foreign = {**keeper, "controller": True}
    assert owner_references_for(_with_references(foreign), NODE) is None
    assert owner_references_for(_with_references(), {"metadata": {"name": "n"}}) is None


SHRINKS = PoolScaler(batch_size=1, request_threshold_percent=0, max_ip_count=20)  # target = demand
CRD = NodeNetworkConfigSettings(scale_down_delay_seconds=30, demand_from_pods=True, scaler=SHRINKS)
NODESUBNET = dataclasses.replace(CRD, consumer="nodesubnet")
HELD = [(f"ip-{i}", f"10.0.0.{i}") for i in range(4)]


def _count(settings: NodeNetworkConfigSettings, *, follow: bool = False, **facts: Any) -> RequestedCount:
    values: dict[str, Any] = {
        "demand": 0,
        "assignments": HELD,
        "in_use_addresses": set(),
        "requested_ip_count": 4,
        "ips_not_in_use": [],
        "now": 100.0,
    }
    return requested_count(count_rule(settings, follow=follow), CountFacts(**{**values, **facts}))


@pytest.mark.parametrize(
    ("settings", "lasted", "marked"),
    [
        pytest.param(CRD, 10.0, 0, id="crd-surplus-too-young"),
        pytest.param(CRD, 30.0, 4, id="crd-any-free-after-hysteresis"),
        pytest.param(NODESUBNET, 10_000.0, 0, id="nodesubnet-never-releases"),
    ],
)
def test_the_release_rule_per_consumer(
    settings: NodeNetworkConfigSettings, lasted: float, marked: int
) -> None:
    """Hysteresis first; NodeSubnet releases nothing, ever (4 free IPs, no demand)."""
    count = _count(settings, surplus_since=100.0 - lasted)
    assert len(count.request.newly_marked) == marked
    assert count.requested == 4 - marked


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        pytest.param(10, (10, None), id="within"),
        pytest.param(20, (20, None), id="at-maximum"),
        pytest.param(21, (20, "RequestedIPCountAboveMaximum"), id="above-maximum-capped"),
        pytest.param(-1, (None, "InvalidRequestedIPCount"), id="negative-changes-nothing"),
    ],
)
def test_a_followed_requested_count_is_bounded(
    requested: int, expected: tuple[int | None, str | None]
) -> None:
    """The node agent's count, served up to the node's usable maximum (the scaler's 20)."""
    count = _count(NodeNetworkConfigSettings(scaler=SHRINKS), requested_ip_count=requested)
    assert count.requested == requested
    assert (count.allocate, count.problem[0] if count.problem else None) == expected


@pytest.mark.parametrize(
    ("node", "pool"),
    [
        pytest.param(
            {"metadata": {"labels": {"kubernetes.azure.com/agentpool": "user1"}}}, "user1", id="label"
        ),
        pytest.param(
            {
                "metadata": {},
                "spec": {
                    "providerID": "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
                    "virtualMachineScaleSets/vmss1/virtualMachines/3"
                },
            },
            "vmss1",
            id="scale-set",
        ),
        pytest.param({"metadata": {}, "spec": {}}, "standalone", id="no-provider-id"),
    ],
)
def test_node_pool_of(node: dict[str, Any], pool: str) -> None:
    assert node_pool_of(node) == pool


def test_time_to_exhaustion() -> None:
    """100 addresses used in 10 s with 500 left: 50 s to go; none while not consumed."""
    assert time_to_exhaustion((0.0, 600), 10.0, 500) == pytest.approx(50.0)
    assert time_to_exhaustion((0.0, 600), 10.0, 600) is None
    assert time_to_exhaustion(None, 10.0, 600) is None


def test_the_hysteresis_clock_is_kept_in_the_book_and_decided_by_the_rule() -> None:
    """A surplus's age restarts when it goes away; the book keeps the clock the rule returns."""
    book = NicBook(backoff_base_seconds=1, backoff_cap_seconds=2, leak_grace_seconds=5)
    started = _count(CRD, surplus_since=book.memory("NIC").surplus_since, now=100.0)
    assert started.surplus_since == 100.0
    book.set_surplus_since("NIC", started.surplus_since)
    lasting = _count(CRD, surplus_since=book.memory("nic").surplus_since, now=130.0)
    assert (lasting.surplus_since, lasting.request.newly_marked) == (100.0, ("ip-3", "ip-2", "ip-1", "ip-0"))
    assert book.memory("nic").surplus_due(60.0) == 160.0
    gone = _count(CRD, surplus_since=100.0, demand=4, now=131.0)
    assert gone.surplus_since is None
    book.set_surplus_since("nic", gone.surplus_since)
    assert book.memory("nic").surplus_due(60.0) is None
    book.set_surplus_since("nic", 5.0)
    book.forget("nic")
    assert book.memory("nic").surplus_due(60.0) is None


def test_ipam_metrics_sum_per_node_pool_on_the_managers_registry() -> None:
    """Figures recorded per node are summed per node pool in the manager's /metrics text, next
    to the subnet's time to exhaustion."""
    metrics = Metrics()
    ipam_metrics = IpamMetrics(lambda _now: {"pods": 120.0})
    IpamGauges(metrics).add(ipam_metrics)
    ipam_metrics.record(
        "a", NodeFigures(pool="vmss1", allocated=16, available=10, requested=16, pending_release=0)
    )
    ipam_metrics.record(
        "b", NodeFigures(pool="vmss1", allocated=32, available=4, requested=32, pending_release=2)
    )
    ipam_metrics.record(
        "c", NodeFigures(pool="user2", allocated=8, available=8, requested=8, pending_release=0)
    )
    text = metrics.render().decode()
    assert 'nodewright_ipam_allocated_ips{node_pool="vmss1"} 48.0' in text
    assert 'nodewright_ipam_available_ips{node_pool="vmss1"} 14.0' in text
    assert 'nodewright_ipam_pending_release_ips{node_pool="vmss1"} 2.0' in text
    assert 'nodewright_ipam_requested_ips{node_pool="user2"} 8.0' in text
    assert 'nodewright_ipam_subnet_exhaustion_seconds{subnet="pods"} 120.0' in text
    ipam_metrics.forget("c")
    assert 'node_pool="user2"' not in metrics.render().decode()


def _node_announcing(value: str | None) -> dict[str, Any]:
    annotations = {} if value is None else {INCOMING_PODS_ANNOTATION: value}
    return {"metadata": {"name": "heir", "annotations": annotations}}


ANNOUNCED = IncomingPods(donor="old-0", pods=10, expires=datetime(2026, 12, 1, 12, 0, tzinfo=UTC))


@pytest.mark.parametrize(
    ("node", "now", "expected"),
    [
        pytest.param(_node_announcing(None), ANNOUNCED.expires, 0, id="none-announced"),
        pytest.param(
            _node_announcing(ANNOUNCED.format()), ANNOUNCED.expires - timedelta(minutes=1), 10, id="announced"
        ),
        pytest.param(_node_announcing(ANNOUNCED.format()), ANNOUNCED.expires, 0, id="lapsed"),
        pytest.param(_node_announcing("ten"), ANNOUNCED.expires, 0, id="unreadable"),
        pytest.param(_node_announcing(ANNOUNCED.format()), None, 0, id="time-unknown"),
    ],
)
def test_incoming_pods_add_to_a_nodes_demand(
    node: dict[str, Any], now: datetime | None, expected: int
) -> None:
    """A heir's announced pods count in its demand until the announcement lapses."""
    assert incoming_pods(node, now) == expected
