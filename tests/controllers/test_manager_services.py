"""Two managers in one process, as the tests run them, share nothing: each plug-in reaches Azure
through its own manager's clouds, whose writes pass that manager's fence and whose calls are
counted on that manager's /metrics only. Real API server, real Azure SDK against the emulator."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import pykube
import pytest

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.factory import Cloud
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import ScaleSetId, parse_scale_set_id
from nodewright.controllers.cloud_access import clouds_of
from nodewright.controllers.node_network_config.metrics import IPAM_GAUGES, IpamMetrics, NodeFigures
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.fence import FencedWriteError
from nodewright.runtime.kube.kinds import CONFIG_MAP, LEASE
from nodewright.runtime.kube.times import format_micro_time
from nodewright.runtime.process.manager import Manager
from nodewright.runtime.process.registry import ReconcilerPlugin, ReconcilerRegistry
from nodewright.runtime.process.services import ServiceKey
from tests.cloud.helpers import publish_test_images
from tests.runtime.manager_helpers import RunningManager, http_get, make_manager
from tests.waiting import wait_for

GROUP = "rg-services"
IMAGE = ImageReference(publisher="p", offer="o", sku="s", version="1.0.0")
TAGGED = "tag-me"


SEEN: ServiceKey[list[Cloud]] = ServiceKey("seen-clouds", lambda _manager: [])
"""The Clouds a manager's plug-ins were handed (a service of the test's own)."""


def _setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """A plug-in: on each ConfigMap named ``tag-me`` it sets the scale set's image through the
    Cloud its manager hands it, if ``options.writes`` (and notes that Cloud in the manager's
    ``SEEN``)."""
    cloud = clouds_of(manager).from_options(options)
    manager.services.get(SEEN).append(cloud)
    scale_set = parse_scale_set_id(str(options["scaleSet"]))

    def reconcile(request: Request) -> Result:
        if request.name == TAGGED and options["writes"]:
            cloud.compute.set_scale_set_image(scale_set, IMAGE)
        return Result()

    namespace = str(options["namespace"])
    manager.controller(str(options["controller"])).for_(CONFIG_MAP, namespace=namespace).complete(reconcile)


REGISTRY = ReconcilerRegistry()
for _name in ("setter", "setter-too"):
    REGISTRY.register(ReconcilerPlugin(_name, _setup))


def _cloud_block(emulator: ArmEmulator, token: str) -> dict[str, Any]:
    return {
        "subscriptionId": DEFAULT_SUBSCRIPTION,
        "armEndpoint": emulator.endpoint,
        "caBundle": str(emulator.ca_file),
        "pollingInterval": 0,
        "credential": {"kind": "static-token", "staticToken": token},
    }


def _manager(
    cluster: Any, namespace: str, emulator: ArmEmulator, *, lease: str, token: str, scale_set: str
) -> tuple[Manager, list[Cloud]]:
    """A manager with its own Lease whose two reconcilers name the same ``cloud`` block, and the
    Clouds their setup was handed."""
    common = {"cloud": _cloud_block(emulator, token), "scaleSet": scale_set, "namespace": namespace}
    election = {
        "enabled": True,
        "namespace": namespace,
        "name": lease,
        "leaseDuration": 3,
        "renewDeadline": 2,
        "retryPeriod": 0.5,
        "writeFenceMargin": 0.5,
    }
    manager = make_manager(
        cluster,
        namespace,
        leaderElection=election,
        reconcilers={
            "setter": {"options": {**common, "controller": f"set-{lease}", "writes": True}},
            "setter-too": {"options": {**common, "controller": f"set-too-{lease}", "writes": False}},
        },
    )
    assert manager.setup_reconcilers(REGISTRY) == ["setter", "setter-too"]
    return manager, manager.services.get(SEEN)


def _held_elsewhere(cluster: Any, namespace: str, name: str) -> None:
    """A Lease another replica holds for an hour: a manager standing for it stays a standby."""
    now = format_micro_time(datetime.datetime.now(datetime.UTC))
    spec = {
        "holderIdentity": "another-replica",
        "leaseDurationSeconds": 3600,
        "acquireTime": now,
        "renewTime": now,
    }
    client = Client.from_kubeconfig(str(cluster.kubeconfig))
    client.create(LEASE, {"metadata": {"name": name, "namespace": namespace}, "spec": spec}, namespace)


def _scale_set(emulator: ArmEmulator) -> ScaleSetId:
    emulator.estate.add_resource_group(GROUP)
    publish_test_images(emulator)
    vnet = emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.4.0.0/24"})
    return parse_scale_set_id(
        emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=vnet + "/subnets/nodes")
    )


def _scrape(manager: Manager) -> str:
    status, text = http_get(manager.metrics_port or 0, "/metrics")
    assert status == 200
    return text


def test_two_managers_in_one_process_share_no_cloud_fence_or_metrics(
    cluster: Any, namespace: str, kube_api: pykube.HTTPClient, arm_emulator: ArmEmulator
) -> None:
    """Manager A leads its Lease, manager B stands by for one held elsewhere. Each manager's two
    reconcilers get one Cloud, and the two managers' Clouds differ (settings, budget); equal
    settings give each manager a Cloud of its own. A's
    reconciler writes to ARM under A's token and A's /metrics count it; B's write through B's
    Cloud is refused unsent by B's fence and counted on B's /metrics only; IPAM figures added to
    one manager's gauges show on that manager's /metrics only."""
    scale_set = _scale_set(arm_emulator)
    _held_elsewhere(cluster, namespace, "lease-b")
    a, a_clouds = _manager(
        cluster, namespace, arm_emulator, lease="lease-a", token="a", scale_set=str(scale_set)
    )
    b, b_clouds = _manager(
        cluster, namespace, arm_emulator, lease="lease-b", token="b", scale_set=str(scale_set)
    )
    assert len(a_clouds) == 2
    assert a_clouds[0] is a_clouds[1]
    assert len(b_clouds) == 2
    assert b_clouds[0] is b_clouds[1]
    a_cloud, b_cloud = a_clouds[0], b_clouds[0]
    assert a_cloud is not b_cloud
    assert a_cloud.clients.settings.credential.static_token == "a"
    assert b_cloud.clients.settings.credential.static_token == "b"
    assert a_cloud.clients.budget is not b_cloud.clients.budget
    a_with_b_settings = clouds_of(a).cloud(b_cloud.clients.settings)  # equal settings, other manager
    assert a_with_b_settings is not b_cloud
    assert a_with_b_settings.clients.budget is a_cloud.clients.budget  # one budget per manager
    assert clouds_of(a) is not clouds_of(b)
    assert clouds_of(a).metrics is a.metrics
    assert clouds_of(b).metrics is b.metrics
    ipam = IpamMetrics(lambda _now: {})
    a.services.get(IPAM_GAUGES).add(ipam)
    ipam.record(
        "node-1", NodeFigures(pool="pool-a", allocated=7, available=3, requested=8, pending_release=0)
    )
    running = [RunningManager(a), RunningManager(b)]
    try:
        wait_for(lambda: a.started.is_set() and b.started.is_set(), message="both managers started")
        wait_for(a.is_leader, message="A leads lease-a")
        assert not b.is_leader()
        pykube.ConfigMap(kube_api, {"metadata": {"name": TAGGED, "namespace": namespace}}).create()
        success = 'operation="compute.set_scale_set_image",outcome="success"'
        written = f"nodewright_azure_calls_total{{{success}}} 1.0"
        wait_for(lambda: written in _scrape(a), message="A's reconciler wrote through A's cloud")

        with pytest.raises(FencedWriteError):
            b_cloud.compute.set_scale_set_image(scale_set, IMAGE)

        writes = [entry for entry in arm_emulator.requests.entries() if entry.method != "GET"]
        assert [(entry.method, entry.bearer_token) for entry in writes] == [("PATCH", "a")]
        a_text, b_text = _scrape(a), _scrape(b)
        refused = 'nodewright_fenced_writes_total{by="client",target="arm"}'
        assert f"{refused} 0.0" in a_text
        assert f"{refused} 1.0" in b_text
        assert written not in b_text
        assert success not in b_text
        assert 'nodewright_ipam_allocated_ips{node_pool="pool-a"} 7.0' in a_text
        assert "nodewright_ipam_allocated_ips{" not in b_text
    finally:
        for handle in running:
            handle.stop()
    assert all(handle.error is None for handle in running)
