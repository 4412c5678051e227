"""The NodeNetworkConfig is *controlled by* its Node, so Azure CNS follows it: a watcher that
filters events the way CNS's NNC reconciler does (``metav1.IsControlledBy(nnc, node)``) sees every
change of a scale up and a scale down, and an NNC written without a controller reference (by an
older nodewright) gets one on its next reconcile."""

from __future__ import annotations

import threading
from typing import Any

from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG
from nodewright.controllers.node_network_config.resources import is_controlled_by
from nodewright.ipam import PoolScaler
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import CONFIG_MAP, NODE
from nodewright.runtime.kube.retry import retry_on_conflict
from tests.controllers.node_network_config.harness import IpamHarness
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)


class ControlledByWatcher:
    """Watches NodeNetworkConfigs and keeps an event only if its Node (read by name, as CNS knows
    its own node) controls it; events it drops are kept apart so the test can assert on them."""

    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace
        self.passed: list[dict[str, Any]] = []
        self.dropped: list[dict[str, Any]] = []
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        version = self._client.list(NODE_NETWORK_CONFIG, self._namespace).resource_version
        self._stream = self._client.watch(
            NODE_NETWORK_CONFIG, self._namespace, resource_version=version, timeout_seconds=300
        )
        self._thread.start()

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        for event in self._stream:
            if event.type not in {"ADDED", "MODIFIED"}:
                continue
            obj = event.object
            try:
                node = self._client.get(NODE, obj["metadata"]["name"])
            except errors.NotFound:
                self.dropped.append(obj)
                continue
            (self.passed if is_controlled_by(obj, node) else self.dropped).append(obj)

    def seen(self, assigned: int, requested: int) -> bool:
        return any(
            (o.get("status") or {}).get("assignedIPCount") == assigned
            and (o.get("spec") or {}).get("requestedIPCount") == requested
            for o in list(self.passed)
        )


def test_every_change_reaches_a_watcher_that_filters_like_cns(ipam: IpamHarness) -> None:
    """Scale up (16 -> 32) and scale down (32 -> 16): each state reaches the IsControlledBy
    watcher, which never has to drop an event; the reference is controller + blockOwnerDeletion."""
    ipam.configure(scaler=SCALER, release_settle_seconds=0.5)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = eventually(ipam.node_names, message="a simulated node")[0]
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 16, message="first batch")
    watcher = ControlledByWatcher(ipam.client, ipam.namespace)
    watcher.start()
    try:
        pods = ipam.create_pods(node, 20)
        eventually(lambda: watcher.seen(assigned=32, requested=32), timeout=60, message="scale up seen")
        ipam.delete_pods(pods[:18])
        eventually(lambda: watcher.seen(assigned=16, requested=16), timeout=60, message="scale down seen")
    finally:
        watcher.stop()
    assert watcher.dropped == [], "an event CNS's filter would drop"
    raw = ipam.raw_config(node)
    node_object = ipam.client.get(NODE, node)
    assert is_controlled_by(raw, node_object)
    [reference] = raw["metadata"]["ownerReferences"]
    assert reference["controller"] is True
    assert reference["blockOwnerDeletion"] is True
    assert reference["uid"] == node_object["metadata"]["uid"]


def test_a_node_network_config_without_controller_reference_is_migrated(ipam: IpamHarness) -> None:
    """An NNC whose owner reference lacks ``controller: true`` (as older nodewright wrote it) is
    given the controller reference on its next reconcile, other owners kept."""
    ipam.add_scale_set(capacity=1)
    ipam.start(agent=False)
    node = eventually(ipam.node_names, message="a simulated node")[0]
    eventually(lambda: ipam.config(node) is not None, message="NodeNetworkConfig created")
    node_object = ipam.client.get(NODE, node)
    # A real object: kube-controller-manager's garbage collector drops references to absent owners.
    keeper = ipam.client.create(CONFIG_MAP, {"metadata": {"name": "keeper", "namespace": ipam.namespace}})
    other_owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "keeper",
        "uid": keeper["metadata"]["uid"],
    }
    legacy = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node,
        "uid": node_object["metadata"]["uid"],
        "blockOwnerDeletion": False,
    }

    def make_legacy() -> None:
        raw = ipam.raw_config(node)
        raw["metadata"]["ownerReferences"] = [legacy, other_owner]
        ipam.client.update(NODE_NETWORK_CONFIG, raw)

    retry_on_conflict(make_legacy)
    eventually(lambda: is_controlled_by(ipam.raw_config(node), node_object), timeout=30, message="migrated")
    references = ipam.raw_config(node)["metadata"]["ownerReferences"]
    assert other_owner["uid"] in {r["uid"] for r in references}
    assert len([r for r in references if r["kind"] == "Node"]) == 1
