"""Standalone VMs as a ScalingGroup (groupID a resource group, ``virtualMachines`` the model new
VMs are built from), against the real API server, the ARM emulator and the node simulator: a heir
VM (and its NIC, in the group's subnet) is created from the model with the new image, the
simulator joins it as a Node, the donor is drained only once its heir is Ready and is deleted
with its NIC; a bad image is caught at the canary and rolled back; a manager killed at every step
ends in the same state; a group naming nothing usable is a False condition with one Warning
Event and changes nothing."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from nodewright.controllers.node_image.grouping import (
    DONOR_ANNOTATION,
    HEIR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    SCALING_GROUP_ANNOTATION,
)
from nodewright.controllers.node_image.resources import AUTOSCALING_STRATEGY, SCALING_GROUP
from nodewright.controllers.node_image.standalone import CREATING_ANNOTATION
from nodewright.runtime.kube.kinds import POD
from nodewright.runtime.kube.objects import condition_is_true as node_ready
from tests.controllers.node_image.support import CUSTOM_LABEL, NEW_IMAGE, OLD_IMAGE, RolloutBench
from tests.controllers.node_image.test_canary_rollback import (
    BadImage,
    _guard_every_node,
    _on_new,
    _rolled_back,
    run_bad_image_with_restarts,
)
from tests.controllers.node_image.test_restarts import BOUNDARIES, _done, crash_at_each_boundary

pytestmark = pytest.mark.slow

WRITES = ("PUT", "PATCH", "DELETE", "POST")
WRITES_PER_NODE = 4
"""NIC PUT and VM PUT for the heir; the donor's delete options PATCHed (it was not created with
them) and its DELETE (NIC and disk go with it)."""


class Watch(threading.Thread):
    """Samples Nodes and pods every 50 ms: a donor seen cordoned, or a pod seen gone from a donor,
    while the donor's heir is not Ready is a violation; also the most machines alive at once."""

    def __init__(self, bench: RolloutBench) -> None:
        super().__init__(daemon=True, name="standalone-watch")
        self.bench = bench
        self.violations: list[str] = []
        self.most_machines = 0
        self.evicted: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        nodes_before: dict[str, dict[str, Any]] = {}
        pods_before: dict[str, str] = {}
        while not self._halt.is_set():
            nodes = {n["metadata"]["name"]: n for n in self.bench.nodes()}
            pods = {
                p["metadata"]["name"]: p["spec"].get("nodeName", "")
                for p in self.bench.client.list(POD, self.bench.namespace).items
                if not p["metadata"].get("deletionTimestamp")
            }
            self.most_machines = max(self.most_machines, len(self.bench.live_machines()))
            for name, node in nodes.items():
                cordoned = node["spec"].get("unschedulable") and not nodes_before.get(name, {}).get(
                    "spec", {}
                ).get("unschedulable")
                if cordoned:
                    self._check(name, nodes_before, nodes, f"donor {name} cordoned")
            for pod, node_name in pods_before.items():
                if pod not in pods and node_name:
                    self.evicted.append(pod)
                    self._check(node_name, nodes_before, nodes, f"pod {pod} left {node_name}")
            nodes_before, pods_before = nodes, pods
            time.sleep(0.05)

    def _check(self, donor: str, before: dict[str, Any], now: dict[str, Any], what: str) -> None:
        """The donor's heir must be Ready in the sample that first shows the cordon or the pod
        gone (the previous sample may predate both: the reconciler can act within 50 ms)."""
        node = now.get(donor) or before.get(donor) or {}
        heir = (node.get("metadata", {}).get("annotations") or {}).get(HEIR_ANNOTATION)
        if not heir or not node_ready(now.get(heir)):
            self.violations.append(f"{what} while its heir {heir!r} was not Ready")

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def _pod_on_every_node(bench: RolloutBench) -> None:
    for node in bench.nodes():
        name = node["metadata"]["name"]
        bench.client.create(
            POD,
            {
                "metadata": {"name": f"web-{name}", "namespace": bench.namespace},
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )


def _network_interfaces(bench: RolloutBench) -> set[str]:
    with bench.emulator.state.locked():
        return {nic.document["name"] for nic in bench.emulator.state.network_interfaces.values()}


def _assert_clean(bench: RolloutBench, group: str, image: str) -> None:
    """Every node on ``image`` and in the group; one VM per node, one NIC per VM; nothing pending."""
    nodes = bench.nodes()
    for node in nodes:
        annotations = node["metadata"]["annotations"]
        assert annotations[NODE_IMAGE_ANNOTATION] == image
        assert annotations[SCALING_GROUP_ANNOTATION].lower() == bench.standalone_groups[0].lower()
        assert DONOR_ANNOTATION not in annotations
        assert HEIR_ANNOTATION not in annotations
        assert not node["spec"].get("unschedulable")
    machines = bench.machines()
    assert sorted(m["name"] for m in machines) == sorted(n["metadata"]["name"] for n in nodes), "orphan VM"
    assert all(m["image"].get("communityGalleryImageId") == image for m in machines)
    assert _network_interfaces(bench) == {f"{m['name']}-nic" for m in machines}, "orphan or missing NIC"
    assert not bench.pending_nodes(), "orphan PendingNode"
    annotations = bench.client.get(SCALING_GROUP, group)["metadata"].get("annotations") or {}
    assert CREATING_ANNOTATION not in annotations


def test_standalone_vms_roll_to_the_new_image(bench: RolloutBench) -> None:
    """Three standalone VMs, maxSurge 1: each gets a heir VM built from the group's model with the
    new image; no donor is cordoned and no pod leaves before its heir is Ready; donors' VMs and
    NICs are deleted; at most WRITES_PER_NODE ARM writes per replaced node."""
    bench.add_standalone_machines("s", 3)
    bench.start_simulator()
    originals = set(bench.label_nodes())
    _pod_on_every_node(bench)
    bench.create_node_image(max_surge=1)
    group = bench.create_standalone_scaling_group("s", tags={"pool": "s"})
    watch = Watch(bench)
    watch.start()
    started = time.monotonic()
    bench.start()
    try:
        bench.wait_for(lambda: _done(bench) and len(bench.nodes()) == 3, 180, "the standalone group rolled")
    finally:
        watch.stop()
    bench.stop()
    writes = [e for e in bench.emulator.requests.entries(since=started) if e.method in WRITES]
    by_operation: dict[str, int] = {}
    for entry in writes:
        by_operation[entry.operation] = by_operation.get(entry.operation, 0) + 1

    assert not watch.violations, watch.violations
    assert len(watch.evicted) == 3, watch.evicted
    _assert_clean(bench, group, NEW_IMAGE)
    nodes = bench.nodes()
    assert not originals & {n["metadata"]["name"] for n in nodes}
    assert sorted(n["metadata"]["labels"][CUSTOM_LABEL] for n in nodes) == sorted(originals)
    assert not {f"{name}-nic" for name in originals} & _network_interfaces(bench)
    assert watch.most_machines == 4, watch.most_machines  # one heir at a time (maxSurge 1)
    assert len(writes) <= WRITES_PER_NODE * 3, by_operation
    assert by_operation.get("VirtualMachines.delete") == 3, by_operation
    with bench.emulator.state.locked():
        tags = [vm.document.get("tags") for vm in bench.emulator.state.virtual_machines.values()]
    assert tags == [{"pool": "s"}] * 3
    print(f"ARM writes for 3 replaced nodes: {len(writes)} {by_operation}")  # noqa: T201 - for the report


@pytest.mark.parametrize("seed", [17])
def test_a_bad_image_is_rolled_back_at_the_canary(bench: RolloutBench, seed: int) -> None:
    """Heir VMs on the new image never become Ready (donors held by their budget): the canary's
    gate fails, the group's image goes back to the old one, the canary VM and its NIC are deleted,
    and at most one VM ever ran the bad image; with the manager killed at random steps."""
    bench.add_standalone_machines("c", 3)
    bench.start_simulator()
    originals = {n["metadata"]["name"] for n in bench.nodes()}
    _guard_every_node(bench)
    bench.create_node_image(max_surge=2, canary=1, heirReadyTimeout="6s")
    group = bench.create_standalone_scaling_group("c")
    bad = BadImage(bench, lambda: True)
    census, crashed = run_bad_image_with_restarts(bench, seed, bad)
    assert _rolled_back(bench)
    assert census.most_on_new == 1, f"{census.most_on_new} VMs ran the bad image at once (canary 1)"
    assert not any(_on_new(m) for m in bench.live_machines())
    assert bad.stopped, "the bad image never ran"
    status = bench.node_image().status
    assert (status.rollout_state, status.failure_reason) == ("RolledBack", "HeirNeverReady")
    assert bench.events(bench.node_image().name, "RollingBack"), "no Warning Event for the rollback"
    assert {n["metadata"]["name"] for n in bench.nodes()} == originals, crashed
    recorded = bench.client.get(SCALING_GROUP, group)["status"]["imageReference"]
    assert recorded == OLD_IMAGE
    _assert_clean(bench, group, OLD_IMAGE)


@pytest.mark.parametrize("seed", [29])
def test_a_canary_that_fails_its_soak_is_replaced_by_a_vm_on_the_old_image(
    bench: RolloutBench, seed: int
) -> None:
    """The canary VM replaces its donor and soaks, then goes NotReady: the rollback builds a new
    VM from the group's model with the previous image (the image recorded in the group goes back
    first) and removes the canary with its NIC; with the manager killed at random steps."""
    bench.add_standalone_machines("k", 3)
    bench.start_simulator()
    originals = {n["metadata"]["name"] for n in bench.nodes()}
    bench.create_node_image(max_surge=2, canary=1, soakDuration="20s")
    group = bench.create_standalone_scaling_group("k")
    bad = BadImage(bench, lambda: bench.node_image().status.rollout_state == "Soaking")
    census, _ = run_bad_image_with_restarts(bench, seed, bad)
    assert bad.stopped, "the canary never soaked"
    assert census.most_on_new == 1, census.most_on_new
    status = bench.node_image().status
    assert (status.rollout_state, status.failure_reason) == ("RolledBack", "NodeNotReady")
    rebuilt = {n["metadata"]["name"] for n in bench.nodes()} - originals
    assert len(rebuilt) == 1, rebuilt  # the canary's donor left; its place is taken by an old-image VM
    assert not rebuilt & bad.stopped
    _assert_clean(bench, group, OLD_IMAGE)


def test_killed_at_every_step_boundary_a_standalone_rollout_ends_the_same(bench: RolloutBench) -> None:
    """A crash before each kind of write (a scale set's model write aside: there is none), one
    after another: every node replaced, labels moved, autoscaling restored, no orphan VM, NIC or
    PendingNode, no creation record left."""
    bench.add_standalone_machines("r", 3)
    bench.start_simulator()
    originals = bench.label_nodes()
    strategy = bench.create_autoscaling_strategy(enabled=True)
    bench.create_node_image(max_surge=1)
    group = bench.create_standalone_scaling_group("r")
    _pod_on_every_node(bench)
    # No scale-set model to set, and no capacity step whose PATCH is left in flight.
    crash_at_each_boundary(bench, BOUNDARIES - {"set-image", "scale-out-sent"})
    bench.switch.arm_any(set())
    bench.start()
    bench.wait_for(lambda: _done(bench) and len(bench.nodes()) == 3, 120, "the rollout to finish")
    bench.wait_for(
        lambda: bench.client.get(AUTOSCALING_STRATEGY, strategy)["spec"]["enabled"] is True,
        30,
        "autoscaling restored",
    )
    bench.stop()
    _assert_clean(bench, group, NEW_IMAGE)
    nodes = bench.nodes()
    assert sorted(n["metadata"]["labels"][CUSTOM_LABEL] for n in nodes) == sorted(originals)


@pytest.mark.parametrize(
    ("what", "reason"),
    [
        pytest.param("subnet", "SubnetNotFound", id="subnet-missing"),
        pytest.param("resource-group", "ResourceGroupNotFound", id="resource-group-missing"),
    ],
)
def test_a_standalone_group_naming_nothing_usable_changes_nothing(
    bench: RolloutBench, what: str, reason: str
) -> None:
    """A subnet or resource group that does not exist: ImageApplied False with the reason and one
    Warning Event (not one per resync), no image recorded, and no node, VM or NIC changes."""
    group_id = bench.add_standalone_machines("b", 2)
    bench.start_simulator()
    before = (sorted(n["metadata"]["name"] for n in bench.nodes()), _network_interfaces(bench))
    bench.create_node_image(max_surge=1)
    if what == "subnet":
        name = bench.create_standalone_scaling_group("b", subnet=bench.subnet.replace("/nodes", "/missing"))
    else:
        name = bench.create_standalone_scaling_group("b", group=group_id + "-missing")
    bench.start(bench.settings(scaling_group_resync_seconds=0.5))

    def condition() -> tuple[str, str]:
        status = bench.client.get(SCALING_GROUP, name).get("status") or {}
        found = [
            (c["status"], c["reason"]) for c in status.get("conditions") or [] if c["type"] == "ImageApplied"
        ]
        return found[0] if found else ("", "")

    bench.wait_for(lambda: condition() == ("False", reason), 30, f"ImageApplied False {reason}")
    with bench.watched(passes=4, controller="scalinggroup"):  # several resyncs (0.5 s)
        pass
    events = bench.events(name, reason)
    assert [e["type"] for e in events] == ["Warning"], events
    assert (events[0].get("count") or 1) == 1
    assert not (bench.client.get(SCALING_GROUP, name).get("status") or {}).get("imageReference")
    assert (sorted(n["metadata"]["name"] for n in bench.nodes()), _network_interfaces(bench)) == before
    assert all(not n["spec"].get("unschedulable") for n in bench.nodes())
    assert all(m["image"].get("communityGalleryImageId") == OLD_IMAGE for m in bench.machines())
    assert not bench.pending_nodes()
    if what == "subnet":  # the group's nodes are claimed: the NodeImage says why nothing moves
        assert bench.condition(kind="Degraded") == ("True", "ScalingGroupFailed")
