"""A Flexible-orchestration scale set as a ScalingGroup, against the real API server, the ARM
emulator and the node simulator: its members are standalone VMs (providerID
``.../virtualMachines/<name>``), placed in their scale set from the cloud, replaced with the same
donor/heir safety (the scale set's capacity grows by one for a heir built from its model; the donor
VM is deleted), and the scale set ends at its size with every member on the new image."""

from __future__ import annotations

import pytest

from nodewright.cloud.resource_ids import VirtualMachineId, parse_provider_id
from nodewright.controllers.node_image.grouping import NODE_IMAGE_ANNOTATION, SCALING_GROUP_ANNOTATION
from nodewright.runtime.kube.kinds import NODE
from tests.controllers.node_image.support import NEW_IMAGE, OLD_IMAGE, RESOURCE_GROUP, RolloutBench

pytestmark = pytest.mark.slow


def test_a_flexible_scale_set_is_rolled_member_by_member(bench: RolloutBench) -> None:
    """Two member VMs on the old image: each gets a heir VM on the new image before it goes; at
    most maxSurge extra members at a time; the old VMs are deleted and the capacity is back at 2.
    A standalone VM's node beside them (in no scale set) is left alone."""
    scale_set = bench.add_scale_set("f", 2, orchestration_mode="Flexible")
    solo = f"solo{bench.suffix}"
    image = {"communityGalleryImageId": OLD_IMAGE}
    bench.emulator.estate.add_virtual_machine(
        RESOURCE_GROUP, solo, subnet_id=bench.subnet, image=image, computer_name=solo
    )
    bench.start_simulator()
    originals = {n["metadata"]["name"] for n in bench.nodes()} - {solo}
    assert len(originals) == 2
    assert all(
        isinstance(parse_provider_id(n["spec"]["providerID"]), VirtualMachineId) for n in bench.nodes()
    )
    most = {"machines": 0}

    def finished() -> bool:
        most["machines"] = max(most["machines"], len(bench.live_machines()))
        return bench.condition() == ("True", "AllNodesUpToDate") and not bench.pending_nodes()

    bench.create_node_image(max_surge=1, canary=1)
    bench.create_scaling_group(scale_set)
    bench.start()
    bench.wait_for(finished, 120, "the Flexible scale set rolled")
    solo_node = bench.client.get(NODE, solo)
    assert not solo_node["spec"].get("unschedulable")
    assert SCALING_GROUP_ANNOTATION not in (solo_node["metadata"].get("annotations") or {})
    assert solo not in {reference.name for reference in bench.node_image().status.up_to_date}
    nodes = [n for n in bench.nodes() if n["metadata"]["name"] != solo]
    assert len(nodes) == 2
    assert not originals & {n["metadata"]["name"] for n in nodes}
    for node in nodes:
        annotations = node["metadata"]["annotations"]
        assert annotations[NODE_IMAGE_ANNOTATION] == NEW_IMAGE
        assert annotations[SCALING_GROUP_ANNOTATION].lower() == scale_set.lower()
        assert isinstance(parse_provider_id(node["spec"]["providerID"]), VirtualMachineId)
    machines = bench.machines()
    assert sorted(m["name"] for m in machines) == sorted(n["metadata"]["name"] for n in nodes), "orphan VM"
    assert all(m["image"].get("communityGalleryImageId") == NEW_IMAGE for m in machines)
    assert most["machines"] == 3, most  # one heir at a time (maxSurge 1)
    document = bench.emulator.state.render(scale_set)
    assert document is not None
    assert document["sku"]["capacity"] == 2
    model = document["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"]
    assert model.get("communityGalleryImageId") == NEW_IMAGE
