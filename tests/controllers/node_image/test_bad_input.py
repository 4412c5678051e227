"""Bad input stops the rollout with a condition and one Warning Event, and deletes nothing: an
image reference that does not parse, a node the cloud does not know, a ScalingGroup naming a scale
set that does not exist (which must not touch any other pool or the autoscaler)."""

from __future__ import annotations

from typing import Any

from nodewright.controllers.node_image.resources import AUTOSCALING_STRATEGY, NODE_IMAGE, SCALING_GROUP
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.runtime.kube.kinds import NODE
from tests.controllers.node_image.support import NEW_IMAGE, OLD_IMAGE, RESOURCE_GROUP, RolloutBench


def _snapshot(bench: RolloutBench) -> tuple[list[tuple[str, bool]], list[str]]:
    """The nodes (name, cordoned) and the machines: what must not change."""
    nodes = sorted((n["metadata"]["name"], bool(n["spec"].get("unschedulable"))) for n in bench.nodes())
    return nodes, sorted(m["name"] for m in bench.live_machines())


def _conditions(bench: RolloutBench, scaling_group: str) -> list[tuple[str, str, str]]:
    status = bench.client.get(SCALING_GROUP, scaling_group).get("status") or {}
    return [(c["type"], c["status"], c["reason"]) for c in status.get("conditions") or []]


def _scale_set_image(bench: RolloutBench, scale_set: str) -> dict[str, Any]:
    document = bench.emulator.state.render(scale_set)
    assert document is not None
    image: dict[str, Any] = document["properties"]["virtualMachineProfile"]["storageProfile"][
        "imageReference"
    ]
    return image


def test_unknown_image_reference_is_reported_and_nothing_changes(bench: RolloutBench) -> None:
    """An image that is no image reference: NodeImage and ScalingGroup say InvalidImageReference
    with Warning Events; no node, machine or scale-set model changes. Fixing the spec resumes."""
    scale_set = bench.add_scale_set("i", 2)
    bench.start_simulator()
    before = _snapshot(bench)
    name = bench.create_node_image(image="ubuntu-latest")
    group = bench.create_scaling_group(scale_set)
    bench.start()

    bench.wait_for(
        lambda: bench.condition(kind="Degraded") == ("True", "InvalidImageReference"), 20, "Degraded"
    )
    assert bench.condition() == ("Unknown", "InvalidImageReference")
    bench.wait_for(lambda: bench.events(name, "InvalidImageReference"), 10, "NodeImage Warning Event")
    bench.wait_for(lambda: bench.events(group, "InvalidImageReference"), 10, "ScalingGroup Warning Event")
    bench.wait_for(
        lambda: _conditions(bench, group) == [("ImageApplied", "False", "InvalidImageReference")],
        10,
        "condition",
    )
    assert bench.events(name, "InvalidImageReference")[0]["type"] == "Warning"
    assert _snapshot(bench) == before
    assert not bench.pending_nodes()
    assert _scale_set_image(bench, scale_set) == {"communityGalleryImageId": OLD_IMAGE}

    bench.client.patch(NODE_IMAGE, name, {"spec": {"image": NEW_IMAGE}})
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "rollout after the fix")
    assert bench.condition(kind="Degraded") == ("False", "AsExpected")


def test_nodes_outside_the_scale_sets_are_not_claimed_and_unknown_machines_are_invalid(
    bench: RolloutBench,
) -> None:
    """A Node without providerID belongs to no ScalingGroup: the NodeImage neither lists nor
    touches it. A Node naming a machine of its scale set that the cloud does not know is listed
    invalid (Degraded InvalidNodes, one Warning Event however often it reconciles); it is never
    cordoned, while the valid node is replaced."""
    scale_set = bench.add_scale_set("p", 1)
    bench.start_simulator()
    stray = f"stray-{bench.suffix}"
    ghost = f"ghost-{bench.suffix}"
    labels = {SIMULATED_LABEL: f"{bench.owner}-stray"}
    bench.create(NODE, {"metadata": {"name": stray, "labels": labels}})
    provider_id = f"azure://{scale_set}/virtualMachines/99"
    bench.create(NODE, {"metadata": {"name": ghost, "labels": labels}, "spec": {"providerID": provider_id}})
    name = bench.create_node_image()
    bench.create_scaling_group(scale_set)
    bench.start()

    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 90, "the valid node replaced")
    bench.wait_for(lambda: bench.condition(kind="Degraded") == ("True", "InvalidNodes"), 10, "Degraded")
    status = bench.node_image().status
    assert [reference.name for reference in status.invalid] == [ghost]
    assert stray not in {r.name for r in [*status.up_to_date, *status.outdated, *status.invalid]}
    with bench.watched(passes=3):  # resyncs of the one NodeImage
        pass
    assert sum(e.get("count", 1) for e in bench.events(name, "InvalidNodes")) == 1
    for node_name in (stray, ghost):
        assert not bench.client.get(NODE, node_name)["spec"].get("unschedulable")
    assert len(bench.nodes()) == 3


def test_a_scaling_group_naming_a_missing_scale_set_touches_no_other_pool(bench: RolloutBench) -> None:
    """The issue's ghost-image: a NodeImage whose ScalingGroup names a missing scale set does not
    mark another pool's nodes outdated, does not touch the autoscaler (a user's change sticks), and
    reports once: ScalingGroup ImageApplied False ScaleSetNotFound, NodeImage Degraded
    ScalingGroupFailed, one Warning Event each. Nothing is created or deleted."""
    scale_set = bench.add_scale_set("m", 2)
    bench.start_simulator()
    before = _snapshot(bench)
    strategy = bench.create_autoscaling_strategy(enabled=False)
    pool = bench.create_node_image(OLD_IMAGE, name=f"pool-{bench.suffix}")
    bench.create_scaling_group(scale_set, node_image=pool)
    missing = scale_set.rsplit("/", 1)[0] + f"/missing{bench.suffix}"
    name = bench.create_node_image()
    group = bench.create_scaling_group(missing)
    bench.start()

    bench.wait_for(lambda: bench.events(group, "ScaleSetNotFound"), 20, "ScalingGroup Warning Event")
    bench.wait_for(
        lambda: _conditions(bench, group) == [("ImageApplied", "False", "ScaleSetNotFound")],
        20,
        "ImageApplied",
    )
    bench.wait_for(lambda: bench.condition(kind="Degraded") == ("True", "ScalingGroupFailed"), 20, "Degraded")
    bench.wait_for(lambda: bench.condition(pool) == ("True", "AllNodesUpToDate"), 20, "the real pool settled")
    ghost = bench.node_image().status
    assert (ghost.total_nodes, ghost.outdated) == (0, [])
    bench.client.patch(AUTOSCALING_STRATEGY, strategy, {"spec": {"enabled": True}})
    with bench.watched(passes=6):  # resyncs of the two NodeImages
        pass
    assert bench.client.get(AUTOSCALING_STRATEGY, strategy)["spec"]["enabled"] is True, "autoscaler flapped"
    assert sum(e.get("count", 1) for e in bench.events(name)) == 1, bench.events(name)
    assert sum(e.get("count", 1) for e in bench.events(group, "ScaleSetNotFound")) == 1
    assert _snapshot(bench) == before
    assert not bench.pending_nodes()
    assert RESOURCE_GROUP in scale_set
