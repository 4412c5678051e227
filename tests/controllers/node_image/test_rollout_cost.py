"""A NodeImage's cost follows its own pool, not the cluster, and its reads come from the cache
(issue 32, item 4): the pool index and the Node watch's map (table tests); on the real API server,
changes to other Nodes do not wake it, a pass decodes only its pool's Nodes, and a rollout asks
the API server for pods only once per node it removes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION
from nodewright.controllers.node_image.grouping import DRAIN_STARTED_ANNOTATION, SCALING_GROUP_ANNOTATION
from nodewright.controllers.node_image.pools import (
    GROUP_ID_INDEX,
    POOL_INDEX,
    UNPLACED,
    node_images_of_drained_pod,
    node_images_of_node,
    node_pool_keys,
    pod_controller_keys,
    pool_nodes,
    scaling_group_id_keys,
    unplaced_nodes,
)
from nodewright.controllers.node_image.rollout_state import READY_SEEN_ANNOTATION
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.runtime.control.reconcile import Request
from nodewright.runtime.informers.informer import Store
from nodewright.runtime.kube.kinds import NODE, POD, POD_DISRUPTION_BUDGET, Kind
from nodewright.runtime.process.manager import Manager
from tests.controllers.node_image.support import NEW_IMAGE, OLD_IMAGE, RESOURCE_GROUP, RolloutBench

OTHER_NODES = 60
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
GROUP = "/subscriptions/0000/resourceGroups/RG"
SCALE_SET = GROUP + "/providers/Microsoft.Compute/virtualMachineScaleSets/Pool-A"
VM = "azure://" + GROUP + "/providers/Microsoft.Compute/virtualMachines/"


def node(name: str, provider_id: str = "", scale_set: str = "") -> dict[str, Any]:
    annotations = {SCALING_GROUP_ANNOTATION: scale_set} if scale_set else {}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {"providerID": provider_id}}


@pytest.mark.parametrize(
    ("obj", "keys"),
    [
        pytest.param(
            node("i", "azure://" + SCALE_SET + "/virtualMachines/3"), [SCALE_SET.lower()], id="instance"
        ),
        pytest.param(node("f", VM + "f", SCALE_SET), [SCALE_SET.lower()], id="flexible-member-placed"),
        pytest.param(node("v", VM + "v"), [GROUP.lower(), UNPLACED], id="vm-not-placed"),
        pytest.param(node("s", VM + "s", GROUP), [GROUP.lower()], id="standalone-annotated"),
        pytest.param(node("k", "kind://docker/k"), [], id="not-azure"),
        pytest.param(node("n"), [], id="no-provider-id"),
    ],
)
def test_pool_index_of_a_node(obj: dict[str, Any], keys: list[str]) -> None:
    """A Node's pool: its annotation, else its providerID's scale set, or for a VM its resource
    group and the not-placed mark (only the cloud can tell a Flexible member); nothing otherwise."""
    assert node_pool_keys(obj) == keys


@pytest.mark.parametrize(
    ("references", "keys"),
    [
        pytest.param(
            [{"kind": "ReplicaSet", "name": "web-1", "uid": "u1", "controller": True}],
            ["ns/ReplicaSet/web-1/u1"],
            id="controlled",
        ),
        pytest.param([{"kind": "ConfigMap", "name": "c", "uid": "u2"}], [], id="owned-not-controlled"),
        pytest.param([], [], id="bare"),
    ],
)
def test_controller_index_of_a_pod(references: list[dict[str, Any]], keys: list[str]) -> None:
    """A Pod is indexed under its namespace and controller, as an eviction record names them."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "ownerReferences": references}}
    assert pod_controller_keys(pod) == keys


def test_a_node_change_maps_to_the_node_images_of_its_pool_only() -> None:
    """A Node maps to the NodeImages whose ScalingGroups name its pool (any case), never to the
    others; a VM not placed yet maps to every NodeImage until it is known standalone; a pass reads
    its pools' Nodes and the VMs still to place through the index; a pod's deletion maps to its
    node's NodeImage only while that node is being drained."""
    groups, images, nodes = Store(), Store(), Store()
    groups.ensure_indexer(GROUP_ID_INDEX, scaling_group_id_keys)
    nodes.ensure_indexer(POOL_INDEX, node_pool_keys)
    for name, group_id, image in (("a", SCALE_SET.upper(), "pool-a"), ("b", GROUP, "standalone")):
        groups.put(name, {"metadata": {"name": name}, "spec": {"groupID": group_id, "nodeImage": image}})
    for name in ("pool-a", "standalone", "idle"):
        images.put(name, {"metadata": {"name": name}})
    instance = node("i", "azure://" + SCALE_SET + "/virtualMachines/3")
    other = node(
        "o",
        "azure://" + GROUP + "/providers/Microsoft.Compute/virtualMachineScaleSets/other/virtualMachines/1",
    )
    vm = node("v", VM + "v")
    for obj in (instance, other, vm):
        nodes.put(obj["metadata"]["name"], obj)

    def never(_: str) -> bool:
        return False

    assert node_images_of_node(instance, groups, images, never) == [Request("", "pool-a")]
    assert node_images_of_node(other, groups, images, never) == []
    assert {r.name for r in node_images_of_node(vm, groups, images, never)} == {
        "pool-a",
        "standalone",
        "idle",
    }
    known = {VM + "v"}.__contains__
    assert node_images_of_node(vm, groups, images, known) == [Request("", "standalone")]
    assert [o["metadata"]["name"] for o in pool_nodes(nodes, [SCALE_SET.lower()])] == ["i"]
    assert [o["metadata"]["name"] for o in unplaced_nodes(nodes, never)] == ["v"]
    assert unplaced_nodes(nodes, known) == []

    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "i"}}
    assert node_images_of_drained_pod(pod, nodes, groups) == []  # its node is not being drained
    nodes.put("i", {**instance, "metadata": {"name": "i", "annotations": {DRAIN_STARTED_ANNOTATION: "x"}}})
    assert node_images_of_drained_pod(pod, nodes, groups) == [Request("", "pool-a")]
    assert node_images_of_drained_pod({"metadata": {"name": "q"}, "spec": {}}, nodes, groups) == []


def _sample(bench: RolloutBench, series_name: str, **labels: str) -> float:
    """The value of one series on the running manager's /metrics (0 when absent)."""
    assert bench.running is not None
    text = bench.running.manager.metrics.render().decode()
    for family in text_string_to_metric_families(text):
        for series in family.samples:
            if series.name == series_name and all(series.labels.get(k) == v for k, v in labels.items()):
                return float(series.value)
    return 0.0


def _passes(bench: RolloutBench) -> float:
    """Every pass the ``nodeimage`` controller has run so far, whatever its result."""
    return sum(
        _sample(bench, "controller_runtime_reconcile_total", controller="nodeimage", result=result)
        for result in ("success", "error", "requeue", "requeue_after")
    )


def _idle(bench: RolloutBench) -> bool:
    """Nothing queued for the ``nodeimage`` controller and no pass running."""
    depth = _sample(bench, "workqueue_depth", name="nodeimage")
    return depth == 0 and _sample(bench, "controller_runtime_active_workers", controller="nodeimage") == 0


def _label_own_node(bench: RolloutBench, node: str, value: str) -> float:
    """Change a label on one of the pool's own Nodes (a change a rollout reads: it copies labels)
    and wait for the pass it causes and for the queue to drain; returns the pass count then."""
    before = _passes(bench)
    bench.client.patch(NODE, node, {"metadata": {"labels": {"example.com/round": value}}})
    bench.wait_for(lambda: _passes(bench) > before, 30, f"a pass after labelling {node}")
    bench.wait_for(lambda: _idle(bench), 30, "the nodeimage queue drained")
    return _passes(bench)


def test_other_nodes_do_not_wake_a_node_image_and_a_pass_reads_only_its_pool(bench: RolloutBench) -> None:
    """A NodeImage on a 3-node pool, in a cluster with 60 other Nodes (another scale set's, made
    Ready and heartbeated by kwok): relabelling the other Nodes twice over (120 changes of the kind
    a rollout watches) adds no pass, while a label on one of its own Nodes does (the barrier that
    shows the controller saw every change before it); each pass decodes the pool's 3 Nodes only."""
    scale_set = bench.add_scale_set("p", 3)
    other_scale_set = (
        f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/other{bench.suffix}"
    )
    labels = {SIMULATED_LABEL: f"{bench.owner}-stray"}
    others = [f"other-{bench.suffix}-{index}" for index in range(OTHER_NODES)]
    for index, name in enumerate(others):
        spec = {"providerID": f"azure://{other_scale_set}/virtualMachines/{index}"}
        bench.create(NODE, {"metadata": {"name": name, "labels": labels}, "spec": spec})
    bench.start_simulator()  # waits until kwok made every Node of the bench Ready, the others too
    assert len(bench.nodes()) == 3 + OTHER_NODES
    bench.create_node_image(image=OLD_IMAGE)
    bench.create_scaling_group(scale_set)
    bench.start()
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "the pool up to date")
    own = sorted(n["metadata"]["name"] for n in bench.nodes() if n["metadata"]["name"] not in others)

    def pool_settled() -> bool:
        """The last changes the pool's Nodes get, each waking one more pass: the rollout's
        ready-seen mark, and the beta OS label the cluster adds seconds after a Node is Ready."""
        pool = [bench.client.get(NODE, name)["metadata"] for name in own]
        return all(
            READY_SEEN_ANNOTATION in (metadata.get("annotations") or {})
            and "beta.kubernetes.io/os" in (metadata.get("labels") or {})
            for metadata in pool
        )

    bench.wait_for(pool_settled, 30, "the pool's nodes marked ready-seen and labelled")
    settled = _label_own_node(bench, own[0], "before-0")
    for attempt in range(1, 10):  # quiet once a change to its own pool costs exactly one pass
        before, settled = settled, _label_own_node(bench, own[0], f"before-{attempt}")
        if settled - before == 1:
            break
    else:
        raise AssertionError("the pool never went quiet (the cluster keeps changing its Nodes)")

    for round_value in ("first", "second"):
        for name in others:
            bench.client.patch(NODE, name, {"metadata": {"labels": {"example.com/round": round_value}}})
            time.sleep(0.02)  # spread the changes, so that a queue would not fold them into one pass
    after = _label_own_node(bench, own[0], "after")

    assert after - settled <= 2, (
        f"{after - settled:.0f} passes for 120 changes to other Nodes and 1 to its own"
    )
    assert _sample(bench, "nodewright_rollout_nodes_read", node_image=f"cluster-{bench.suffix}") == 3


class PodLists:
    """Counts the pod LISTs the manager's reconcilers send through its client (a spy: every call
    still goes to the API server; the informers list through ``list_pages``, not counted)."""

    def __init__(self) -> None:
        self.count = 0

    def attach(self, manager: Manager) -> None:
        real = manager.client.list

        def counted(kind: Kind, *args: Any, **kwargs: Any) -> Any:
            if kind == POD:
                self.count += 1
            return real(kind, *args, **kwargs)

        setattr(manager.client, "list", counted)  # noqa: B010 - an instance attribute over the method


def test_a_rollout_reads_pods_from_the_cache_and_once_fresh_per_removed_node(bench: RolloutBench) -> None:
    """Three nodes running a Deployment's three replicas are replaced (maxSurge 1): the pods it
    drains, announces and checks after eviction are the cache's, so the reconcilers send one pod
    LIST per removed node (the fresh look before its Leave), not several per pass."""
    scale_set = bench.add_scale_set("p", 3)
    bench.start_simulator()
    labels = {"app": "web"}
    template = {
        "metadata": {"labels": labels},
        "spec": {
            "nodeSelector": {SIMULATED_LABEL: bench.owner},
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    spec = {"replicas": 3, "selector": {"matchLabels": labels}, "template": template}
    bench.client.create(DEPLOYMENT, {"metadata": {"name": "web", "namespace": bench.namespace}, "spec": spec})
    bench.create_node_image(image=NEW_IMAGE)
    bench.create_scaling_group(scale_set)
    lists = PodLists()
    bench.start(also=lists.attach)
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 120, "the pool replaced")
    bench.wait_for(lambda: not bench.pending_nodes(), 60, "every Leave done")
    assert 3 <= lists.count <= 3 + 2, f"{lists.count} pod LISTs for a rollout of 3 nodes"


def test_a_drained_node_is_handed_over_as_its_last_pod_goes_not_at_the_next_poll(bench: RolloutBench) -> None:
    """With a drain poll of 60 s, a one-node pool whose donor runs one pod its disruption budget
    keeps from eviction: once the drain waits (the donor cordoned, the controller idle), the pod
    is deleted by hand; its deletion wakes the NodeImage, which hands the donor to its Leave within
    seconds instead of at the next poll."""
    scale_set = bench.add_scale_set("p", 1)
    bench.start_simulator()
    donor = bench.nodes()[0]["metadata"]["name"]
    labels = {"app": "held"}
    pod = {
        "metadata": {"name": "held", "namespace": bench.namespace, "labels": labels},
        "spec": {"nodeName": donor, "containers": [{"name": "c", "image": "busybox"}]},
    }
    bench.client.create(POD, pod)
    budget: dict[str, Any] = {"metadata": {"name": "held", "namespace": bench.namespace}}
    budget["spec"] = {"minAvailable": 1, "selector": {"matchLabels": labels}}
    bench.client.create(POD_DISRUPTION_BUDGET, budget)
    bench.create_node_image(image=NEW_IMAGE)
    bench.create_scaling_group(scale_set)
    bench.start(bench.settings(drain_poll_seconds=60.0, resync_seconds=60.0))

    bench.wait_for(lambda: bench.client.get(NODE, donor)["spec"].get("unschedulable"), 60, "donor cordoned")

    def waiting() -> bool:  # idle twice over, the same passes: the drain waits for its poll
        passes = _passes(bench)
        if not _idle(bench):
            return False
        time.sleep(0.5)  # idle twice over: the pass count (not the clock) is what is compared
        return _idle(bench) and _passes(bench) == passes

    bench.wait_for(waiting, 30, "the drain waiting for the budget")
    assert bench.client.list(POD, bench.namespace).items, "the budget kept the pod"
    bench.client.delete(POD, "held", bench.namespace)
    deleted_at = time.monotonic()

    def handed_over() -> bool:
        leave = any(p.spec.node_name == donor and p.spec.goal.value == "Leave" for p in bench.pending_nodes())
        return leave or donor not in {n["metadata"]["name"] for n in bench.nodes()}

    bench.wait_for(handed_over, 40, "the donor handed to its Leave")
    assert time.monotonic() - deleted_at < 15
