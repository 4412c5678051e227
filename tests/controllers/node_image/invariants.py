"""The rollout invariant, checked after every node-image cluster test (the ``bench`` fixture) and
wherever a test wants it mid-run: a NodeImage reports Complete only when every pool it owns (the
scale sets or standalone groups of its ScalingGroups) has its desired capacity, with every machine
and every Node on the target image. Read from the NodeImage status, the ScalingGroups, the ARM
emulator's scale sets (capacity, members and their image) and the Nodes."""

from __future__ import annotations

from typing import Any

from nodewright.api.nodewright.v1alpha1 import RESOURCE_GROUP_ID_PATTERN, RolloutState, ScalingGroup
from nodewright.cloud.emulator.scale_set_members import members
from nodewright.controllers.node_image.grouping import NODE_IMAGE_ANNOTATION, SCALING_GROUP_ANNOTATION
from nodewright.controllers.node_image.resources import SCALING_GROUP
from tests.controllers.node_image.support import RolloutBench, standalone_machines

__all__ = ["assert_complete_means_whole", "complete_but_not_whole"]


def _image_of(machine_image: dict[str, Any]) -> str:
    """A machine's image reference as text (the gallery image ID the bench's images are)."""
    return str(machine_image.get("communityGalleryImageId") or machine_image.get("id") or machine_image)


def _pool_machines(bench: RolloutBench, group_id: str) -> tuple[int | None, list[dict[str, Any]]]:
    """A pool's capacity (``None`` for a standalone group, which has none; 0 for a scale set that
    does not exist) and live machines."""
    if RESOURCE_GROUP_ID_PATTERN.fullmatch(group_id):
        prefix = group_id.lower() + "/"
        machines = standalone_machines(bench.emulator)
        return None, [
            m for m in machines if m["id"].lower().startswith(prefix) and m["provisioning"] != "Deleting"
        ]
    state = bench.emulator.state
    with state.locked():
        scale_set = state.scale_sets.get(group_id.lower())
        if scale_set is not None:
            capacity = int(scale_set.resource.document["sku"].get("capacity", 0))
            found = [
                {"name": m.document["properties"]["osProfile"]["computerName"].lower(),
                 "provisioning": m.provisioning_state,
                 "image": (m.document["properties"].get("storageProfile") or {}).get("imageReference", {})}
                for m in members(state, scale_set)
            ]  # fmt: skip
            return capacity, [m for m in found if m["provisioning"] != "Deleting"]
    return 0, []


def _pool_problems(bench: RolloutBench, name: str, group_id: str, target: str) -> list[str]:
    desired = bench.desired_capacity.get(group_id.lower(), 0)  # a pool the bench did not make: none
    capacity, machines = _pool_machines(bench, group_id)
    problems: list[str] = []
    if capacity is not None and capacity != desired:
        problems.append(f"{name}: {group_id} at capacity {capacity} of {desired}")
    if len(machines) != desired:
        problems.append(f"{name}: {group_id} has {len(machines)} live machines, desired {desired}")
    problems += [
        f"{name}: machine {m['name']} on {_image_of(m['image'])}, not {target}"
        for m in machines
        if _image_of(m["image"]).lower() != target.lower()
    ]
    nodes = [
        node
        for node in bench.nodes()
        if (node["metadata"].get("annotations") or {}).get(SCALING_GROUP_ANNOTATION, "").lower()
        == group_id.lower()
    ]
    if len(nodes) != desired:
        problems.append(f"{name}: {group_id} has {len(nodes)} Nodes, desired {desired}")
    for node in nodes:
        image = (node["metadata"].get("annotations") or {}).get(NODE_IMAGE_ANNOTATION, "")
        if image.lower() != target.lower():
            problems.append(f"{name}: Node {node['metadata']['name']} on {image or 'no image'}, not {target}")
    return problems


def complete_but_not_whole(bench: RolloutBench) -> list[str]:
    """What breaks the invariant now, for each of the bench's NodeImages that reports Complete."""
    problems: list[str] = []
    owners = _owners(bench)
    for name in bench.node_image_names():
        status = bench.node_image(name).status
        if status.rollout_state != RolloutState.COMPLETE.value:
            continue
        for group_id in sorted(group for group, owner in owners.items() if owner == name):
            problems += _pool_problems(bench, name, group_id, status.target_image)
    return problems


def _owners(bench: RolloutBench) -> dict[str, str]:
    """Each pool (lowercased group ID) and the NodeImage that owns it: the one its oldest
    ScalingGroup names (a later ScalingGroup naming the same pool is a Conflict and owns nothing)."""
    objects = sorted(
        bench.client.list(SCALING_GROUP).items,
        key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"]),
    )
    owners: dict[str, str] = {}
    for obj in objects:
        group = ScalingGroup.from_object(obj)
        owners.setdefault(group.spec.group_id.lower(), group.spec.node_image)
    return owners


def assert_complete_means_whole(bench: RolloutBench) -> None:
    """Fail naming every pool a NodeImage reports Complete for while it is not whole."""
    problems = complete_but_not_whole(bench)
    assert not problems, "NodeImage Complete but: " + "; ".join(problems)
