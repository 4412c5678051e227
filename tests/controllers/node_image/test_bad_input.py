"""Bad input stops the rollout with a condition and a Warning Event, and deletes nothing: an
image reference that does not parse, a node without providerID, a ScalingGroup naming a scale set
that does not exist."""

from __future__ import annotations

from typing import Any

from nodewright.controllers.node_image.resources import NODE_IMAGE, SCALING_GROUP
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.runtime.kinds import NODE
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


def test_node_without_provider_id_is_invalid_and_left_alone(bench: RolloutBench) -> None:
    """A Node without providerID is listed as invalid with Degraded InvalidNodes and an Event; it
    is never cordoned or deleted, while the valid node is replaced."""
    scale_set = bench.add_scale_set("p", 1)
    bench.start_simulator()
    stray = f"stray-{bench.suffix}"
    bench.create(NODE, {"metadata": {"name": stray, "labels": {SIMULATED_LABEL: f"{bench.owner}-stray"}}})
    name = bench.create_node_image()
    bench.create_scaling_group(scale_set)
    bench.start()

    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "the valid node replaced")
    bench.wait_for(lambda: bench.events(name, "InvalidNode"), 10, "Warning Event")
    bench.wait_for(lambda: bench.condition(kind="Degraded") == ("True", "InvalidNodes"), 10, "Degraded")
    status = bench.node_image().status
    assert [reference.name for reference in status.invalid] == [stray]
    node = bench.client.get(NODE, stray)
    assert not node["spec"].get("unschedulable")
    assert len(bench.nodes()) == 2


def test_scaling_group_naming_a_missing_scale_set_is_reported_and_nothing_changes(
    bench: RolloutBench,
) -> None:
    """A ScalingGroup whose scale set does not exist: ImageApplied False ScaleSetNotFound with an
    Event; the nodes of the real scale set have no ScalingGroup, so the NodeImage is Degraded
    ScalingGroupMissing, Progressing Blocked, with an Event; nothing is created or deleted."""
    scale_set = bench.add_scale_set("m", 2)
    bench.start_simulator()
    before = _snapshot(bench)
    missing = scale_set.rsplit("/", 1)[0] + f"/missing{bench.suffix}"
    name = bench.create_node_image()
    group = bench.create_scaling_group(missing)
    bench.start()

    bench.wait_for(lambda: bench.events(group, "ScaleSetNotFound"), 20, "ScalingGroup Warning Event")
    conditions = bench.client.get(SCALING_GROUP, group)["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"]) for c in conditions] == [
        ("ImageApplied", "False", "ScaleSetNotFound")
    ]
    bench.wait_for(
        lambda: bench.condition(kind="Degraded") == ("True", "ScalingGroupMissing"), 20, "Degraded"
    )
    assert bench.condition(kind="Progressing") == ("False", "Blocked")
    assert bench.condition() == ("False", "NodesOutdated")
    bench.wait_for(lambda: bench.events(name, "ScalingGroupMissing"), 10, "NodeImage Warning Event")
    assert _snapshot(bench) == before
    assert not bench.pending_nodes()
    assert RESOURCE_GROUP in scale_set
