"""A heir is never drained into while its IP pool is short, against the real API server, the ARM
emulator and the node simulator. The first test plays the IPAM side: it publishes the
NodeNetworkConfig status (the pool) that the node-network-config reconciler or Azure CNS would
write. The donor keeps serving (not cordoned) while the heir has no NodeNetworkConfig, then while
its pool is one IP short of the donor's pods plus the buffer; it is cordoned only after the pool
is filled. The others run the node-network-config reconciler beside the NodeImage reconciler, no
pool set by hand: IPAM must size the heir for the donor's pods before the gate asks (issue 32:
with more than 8 pods on the donor the two waited on each other for ever), and, wired as the
manager wires it beside node-image, with one NIC write, counted in the emulator's request log;
a new Node no rollout pairs is sized once the pairing wait is over."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from nodewright.api.acn.v1alpha1 import RESOURCES as SUBNET_RESOURCES
from nodewright.api.nodewright.v1alpha1 import INCOMING_PODS_ANNOTATION, IncomingPods
from nodewright.cloud.emulator.request_log import RecordedRequest
from nodewright.cloud.resource_ids import ScaleSetInstanceId, parse_provider_id
from nodewright.controllers import node_network_config
from nodewright.controllers.node_image.grouping import DONOR_ANNOTATION
from nodewright.controllers.node_image.heir_network import pool_size
from nodewright.controllers.node_image.resources import NODE_NETWORK_CONFIG, PENDING_NODE
from nodewright.devenv.crds import install_crds
from nodewright.runtime import errors, format_time, parse_time
from nodewright.runtime.kube.kinds import NODE, POD
from nodewright.runtime.process.manager import Manager
from tests.controllers.node_image.support import RolloutBench

pytestmark = pytest.mark.slow

PODS = 3
BUFFER = 2
"""The scaler below keeps ceil(4 * 50 / 100) = 2 IPs spare."""


def _publish_pool(bench: RolloutBench, node: str, addresses: int) -> None:
    """Create (once) and fill a NodeNetworkConfig's status as the IPAM side would."""
    try:
        config = bench.client.get(NODE_NETWORK_CONFIG, node, bench.namespace)
    except errors.NotFound:
        config = bench.client.create(
            NODE_NETWORK_CONFIG,
            {
                "metadata": {"name": node, "namespace": bench.namespace},
                "spec": {"requestedIPCount": addresses},
            },
        )
    config["status"] = {
        "assignedIPCount": addresses,
        "scaler": {
            "batchSize": 4,
            "requestThresholdPercent": 50,
            "releaseThresholdPercent": 150,
            "maxIPCount": 250,
        },
        "networkContainers": [
            {
                "id": f"nc-{node}",
                "primaryIP": "10.240.0.4",
                "ipAssignments": [{"name": f"ip-{i}", "ip": f"10.240.1.{i + 1}"} for i in range(addresses)],
            }
        ],
    }
    bench.client.update_status(NODE_NETWORK_CONFIG, config)


class CordonWatch(threading.Thread):
    """The monotonic time the donor was first seen cordoned."""

    def __init__(self, bench: RolloutBench, donor: str) -> None:
        super().__init__(daemon=True, name="cordon-watch")
        self.bench, self.donor = bench, donor
        self.cordoned_at: float | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set() and self.cordoned_at is None:
            try:
                node: dict[str, Any] = self.bench.client.get(NODE, self.donor)
            except errors.NotFound:
                return
            if node["spec"].get("unschedulable"):
                self.cordoned_at = time.monotonic()
            time.sleep(0.05)

    def first_cordon(self) -> float | None:
        return self.cordoned_at

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _heir(bench: RolloutBench) -> str | None:
    for node in bench.nodes():
        if (node["metadata"].get("annotations") or {}).get(DONOR_ANNOTATION):
            return str(node["metadata"]["name"])
    return None


def test_the_donor_waits_for_its_heirs_ip_pool(bench: RolloutBench) -> None:
    """No heir pool: the donor waits (Progressing WaitingForHeirNetwork); a pool one IP short: it
    still waits; a full pool (pods + buffer): it is cordoned, drained and replaced."""
    bench.add_scale_set("n", 1)
    bench.start_simulator()
    (donor,) = [n["metadata"]["name"] for n in bench.nodes()]
    for index in range(PODS):
        bench.client.create(
            POD,
            {
                "metadata": {"name": f"web-{index}", "namespace": bench.namespace},
                "spec": {"nodeName": donor, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
    _publish_pool(bench, donor, 8)
    bench.create_node_image()
    bench.create_scaling_group(bench.scale_sets[0])
    watch = CordonWatch(bench, donor)
    watch.start()
    bench.start(bench.settings(node_network_config_namespace=bench.namespace))
    try:
        heir = bench.wait_for(lambda: _heir(bench), 60, "a heir paired with the donor")
        bench.wait_for(
            lambda: bench.condition(kind="Progressing") == ("True", "WaitingForHeirNetwork"), 30, "waiting"
        )
        _publish_pool(bench, heir, PODS + BUFFER - 1)
        with bench.watched(passes=3):  # passes that see the heir's short pool
            pass
        assert watch.first_cordon() is None, "donor cordoned while its heir's pool was short"
        assert bench.condition(kind="Progressing") == ("True", "WaitingForHeirNetwork")
        filled_at = time.monotonic()
        _publish_pool(bench, heir, PODS + BUFFER)
        bench.wait_for(lambda: watch.cordoned_at is not None, 30, "donor cordoned after the pool filled")
        bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "rollout finished")
    finally:
        watch.stop()
    cordoned_at = watch.first_cordon()
    assert cordoned_at is not None
    assert cordoned_at >= filled_at
    assert [n["metadata"]["name"] for n in bench.nodes()] == [heir]


def _create_pods(bench: RolloutBench, node: str, count: int) -> None:
    for index in range(count):
        bench.client.create(
            POD,
            {
                "metadata": {"name": f"web-{index}", "namespace": bench.namespace},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )


def _pool(bench: RolloutBench, node: str) -> int:
    try:
        return pool_size(bench.client.get(NODE_NETWORK_CONFIG, node, bench.namespace))
    except errors.NotFound:
        return 0


def _announced(bench: RolloutBench, node: str) -> IncomingPods | None:
    try:
        annotations = bench.client.get(NODE, node)["metadata"].get("annotations") or {}
    except errors.NotFound:
        return None
    return IncomingPods.parse(annotations.get(INCOMING_PODS_ANNOTATION))


def _release_finalizers(bench: RolloutBench) -> None:
    """Let the namespace go: the stopped IPAM reconciler can no longer finalize its objects."""
    for config in bench.client.list(NODE_NETWORK_CONFIG, bench.namespace).items:
        with contextlib.suppress(errors.NotFound):
            bench.client.patch(
                NODE_NETWORK_CONFIG,
                config["metadata"]["name"],
                {"metadata": {"finalizers": None}},
                bench.namespace,
            )


def _donor_with_pods(bench: RolloutBench, pods: int) -> str:
    """One node of a new scale set (IPAM's ClusterSubnetState CRD installed), holding ``pods``
    pods; its name."""
    install_crds(bench.client, SUBNET_RESOURCES, timeout=30)  # IPAM publishes ClusterSubnetStates
    bench.add_scale_set("n", 1)
    bench.start_simulator()
    (donor,) = [n["metadata"]["name"] for n in bench.nodes()]
    _create_pods(bench, donor, pods)
    return str(donor)


@pytest.mark.parametrize(
    ("pods", "consumer"),
    [pytest.param(10, "crd", id="10-pods-crd"), pytest.param(20, "nodesubnet", id="20-pods-nodesubnet")],
)
def test_ipam_sizes_the_heir_for_its_donors_pods(bench: RolloutBench, pods: int, consumer: str) -> None:
    """With IPAM running and no pool set by hand, a donor with more pods than a fresh heir's pool
    holds spare (16 IPs, 8 of them buffer) is cordoned within a bounded time: the heir announces
    the pods, IPAM sizes its pool for them plus the buffer, the gate passes; the announcement is
    gone once the donor is replaced."""
    donor = _donor_with_pods(bench, pods)
    settings = node_network_config.NodeNetworkConfigSettings(
        namespace=bench.namespace,
        node_selector=bench.node_selector,
        consumer="nodesubnet" if consumer == "nodesubnet" else "crd",
        demand_from_pods=True,  # nodewright as the node agent: it sizes the heir itself
        nic_refresh_seconds=1.0,
    )

    def with_ipam(manager: Manager) -> None:
        node_network_config.install(manager, settings, bench.cloud.network, bench.cloud.compute)

    watch = CordonWatch(bench, donor)
    watch.start()
    bench.start(bench.settings(node_network_config_namespace=bench.namespace), also=with_ipam)
    try:
        # As in a cluster that ran IPAM before the rollout: the donor's pool holds its pods.
        bench.wait_for(lambda: _pool(bench, donor) >= pods, 60, "IPAM sized the donor's pool")
        bench.create_node_image()
        bench.create_scaling_group(bench.scale_sets[0])
        heir = bench.wait_for(lambda: _heir(bench), 60, "a heir paired with the donor")
        announced = bench.wait_for(lambda: _announced(bench, heir), 60, "the heir announced its pods")
        assert (announced.donor, announced.pods) == (donor, pods)
        bench.wait_for(lambda: watch.cordoned_at is not None, 90, "donor cordoned: the gate passed")
        assert _pool(bench, heir) >= pods + 8, "the donor went before the heir's pool could take its pods"
        bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 90, "rollout finished")
        bench.wait_for(lambda: _announced(bench, heir) is None, 30, "the announcement removed")
    finally:
        watch.stop()
        bench.stop()
        _release_finalizers(bench)
    assert [n["metadata"]["name"] for n in bench.nodes()] == [heir]


NIC_WRITE = "VirtualMachineScaleSetVMs.update"
"""A Uniform instance's NIC is written through its instance model (one PUT per pool change)."""


def _ip_configurations(body: Any) -> int:
    """The IP configurations a NIC write's body asks for (every NIC of the instance model)."""
    if isinstance(body, dict):
        found = body.get("ipConfigurations")
        nested = sum(_ip_configurations(value) for key, value in body.items() if key != "ipConfigurations")
        return (len(found) if isinstance(found, list) else 0) + nested
    if isinstance(body, list):
        return sum(_ip_configurations(item) for item in body)
    return 0


def _nic_writes(bench: RolloutBench, node: str, since: float, until: float) -> list[RecordedRequest]:
    """The writes of ``node``'s NIC the emulator answered between two monotonic times."""
    machine = parse_provider_id(str(bench.client.get(NODE, node)["spec"]["providerID"]))
    assert isinstance(machine, ScaleSetInstanceId)
    path = f"/virtualMachineScaleSets/{machine.scale_set_name}/virtualMachines/{machine.instance_id}"
    writes = bench.emulator.requests.entries(NIC_WRITE, since=since)
    return [w for w in writes if w.monotonic <= until and w.path.lower().endswith(path.lower())]


def test_the_heirs_nic_is_written_once_for_its_donors_pods(bench: RolloutBench) -> None:
    """With IPAM beside the rollout (as the manager wires it when node-image is enabled), a heir
    is sized once, already for its donor's pods: before the donor is cordoned its NIC saw exactly
    one write, carrying at least the donor's 10 pods plus the buffer (before the pairing wait: two,
    16 then 32, because IPAM sized the new Node for its own pods before the pairing announced the donor's)."""
    pods = 10
    donor = _donor_with_pods(bench, pods)
    settings = node_network_config.NodeNetworkConfigSettings(
        namespace=bench.namespace,
        node_selector=bench.node_selector,
        demand_from_pods=True,
        nic_refresh_seconds=1.0,
    )

    def with_ipam(manager: Manager) -> None:
        compute = bench.cloud.compute
        node_network_config.install(manager, settings, bench.cloud.network, compute, rollouts=True)

    watch = CordonWatch(bench, donor)
    watch.start()
    bench.start(bench.settings(node_network_config_namespace=bench.namespace), also=with_ipam)
    try:
        bench.wait_for(lambda: _pool(bench, donor) >= pods, 60, "IPAM sized the donor's pool")
        since = time.monotonic()
        bench.create_node_image()
        bench.create_scaling_group(bench.scale_sets[0])
        heir = bench.wait_for(lambda: _heir(bench), 60, "a heir paired with the donor")
        cordoned_at = bench.wait_for(watch.first_cordon, 90, "donor cordoned: the gate passed")
        writes = _nic_writes(bench, heir, since, cordoned_at)
        asked = [_ip_configurations(write.body) - 1 for write in writes]  # less the primary
        assert len(writes) == 1, f"the heir's NIC was written {len(writes)} times ({asked} IPs) before"
        (secondary,) = asked
        assert secondary >= pods + 8, f"the heir's one write asked for {secondary} IPs"
        bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 90, "rollout finished")
    finally:
        watch.stop()
        bench.stop()
        _release_finalizers(bench)


def test_a_new_node_no_rollout_pairs_is_sized_once_the_wait_is_over(bench: RolloutBench) -> None:
    """A Node a Join PendingNode names, with no NodeImage to pair it (the rollout is off or
    stuck), is not left without IPs: its first NIC write comes once ``heirPairingWaitSeconds``
    have passed since the Node was created, not before."""
    install_crds(bench.client, SUBNET_RESOURCES, timeout=30)
    wait = 10.0
    bench.add_scale_set("n", 1)
    bench.start_simulator()
    (node,) = bench.nodes()
    name = str(node["metadata"]["name"])
    created = parse_time(node["metadata"]["creationTimestamp"])
    assert created is not None
    join = {
        "providerID": node["spec"]["providerID"],
        "groupID": bench.scale_sets[0],
        "nodeName": name,
        "goal": "Join",
        "deadline": format_time(created + timedelta(hours=1)),
    }
    bench.create(PENDING_NODE, {"metadata": {"name": name}, "spec": join})
    settings = node_network_config.NodeNetworkConfigSettings(
        namespace=bench.namespace,
        node_selector=bench.node_selector,
        demand_from_pods=True,
        heir_pairing_wait_seconds=wait,
    )

    def with_ipam(manager: Manager) -> None:
        compute = bench.cloud.compute
        node_network_config.install(manager, settings, bench.cloud.network, compute, rollouts=True)

    bench.start(bench.settings(node_network_config_namespace=bench.namespace), also=with_ipam)
    started = time.time()
    try:
        assert started < created.timestamp() + wait - 2, "the manager started too late to see the wait"
        bench.wait_for(lambda: _pool(bench, name) > 0, 60, "the node's pool sized after the wait")
    finally:
        bench.stop()
        _release_finalizers(bench)
    writes = _nic_writes(bench, name, 0.0, time.monotonic())
    assert writes, "no NIC write for the node"
    # creationTimestamp has whole seconds: the Node may be up to 1 s older than it says
    assert writes[0].timestamp >= created.timestamp() + wait - 1, "sized before the wait was over"
