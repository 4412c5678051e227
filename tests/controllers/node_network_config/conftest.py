"""Fixtures for the node_network_config cluster tests: the acn CRDs installed once per session,
and an ``ipam`` harness per test (stopped, with its Nodes removed, afterwards)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pykube
import pytest

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.acn.v1alpha1 import ClusterSubnetState
from nodewright.cloud.emulator import ArmEmulator
from tests.conftest import Cluster
from tests.controllers.node_network_config.harness import IpamHarness


def _establish(kube_api: pykube.HTTPClient, crd: dict[str, Any]) -> None:
    kind = pykube.object_factory(kube_api, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    crd_object = kind(kube_api, crd)
    if crd_object.exists():
        crd_object.reload()
        crd_object.obj["spec"] = crd["spec"]
        crd_object.update()
    else:
        crd_object.create()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd_object.reload()
        conditions = {
            c["type"]: c["status"] for c in (crd_object.obj.get("status") or {}).get("conditions") or []
        }
        if conditions.get("Established") == "True":
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {crd['metadata']['name']} not established")


@pytest.fixture(scope="session")
def acn_crds(kube_api: pykube.HTTPClient) -> None:
    """The NodeNetworkConfig and ClusterSubnetState CRDs, as generated, in the session's API server."""
    _establish(kube_api, NodeNetworkConfig.custom_resource_definition())
    _establish(kube_api, ClusterSubnetState.custom_resource_definition())
    time.sleep(1.0)  # let the API server serve the new resources before the informers list them


@pytest.fixture
def ipam(
    acn_crds: None, cluster: Cluster, namespace: str, arm_emulator: ArmEmulator
) -> Iterator[IpamHarness]:
    """A harness (not started: the test adds machines, then calls ``start``). After every test
    that started it, the invariants are checked: no IP in two NodeNetworkConfigs, every status IP
    on its NIC, no unaccounted IP configuration, every pod address in its node's status."""
    harness = IpamHarness(cluster=cluster, namespace=namespace, emulator=arm_emulator)
    try:
        yield harness
        if harness.started:
            harness.settle_and_check()
    finally:
        harness.stop()
