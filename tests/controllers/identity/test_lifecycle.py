"""The AzureAssignedIdentity lifecycle against a real API server and the ARM emulator: an identity
missing in Azure and a node that does not exist each give a condition with a reason, an Event and
retries on a capped backoff (counted at the emulator); objects whose pod or node is gone are
collected; no object is ever Created without a reason in its status."""

from __future__ import annotations

import itertools
import time

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    CONDITION_ASSIGNED,
    AzureAssignedIdentity,
)
from nodewright.runtime.kube.kinds import NODE
from tests.controllers.identity.helpers import World
from tests.waiting import eventually


def reason_of(assigned: AzureAssignedIdentity) -> str:
    found = next((c for c in assigned.status.conditions if c.type == CONDITION_ASSIGNED), None)
    return found.reason if found is not None else ""


def by_pod(world: World) -> dict[str, AzureAssignedIdentity]:
    return {a.spec.pod: a for a in world.assigned()}


def assert_every_created_has_a_reason(world: World) -> None:
    for assigned in world.assigned():
        if assigned.status.status in ("", ASSIGNED_STATUS_CREATED):
            assert reason_of(assigned), f"{assigned.name} is {assigned.status.status!r} with no reason"


def test_missing_identity_has_a_reason_an_event_and_a_bounded_backoff(world: World) -> None:
    """An identity missing in Azure: condition IdentityNotFound, a Warning Event naming ARM's words,
    PATCH attempts that back off (0.5 s, 1 s, 2 s, then capped at 2 s) instead of one per pass; once
    the identity exists in Azure, the next attempt assigns it."""
    group = world.resource_group("mc")
    good = world.identity(group, "good")
    missing = good.replace("/good", "/late")
    scale_set = world.scale_set(group, "pool", capacity=1)
    world.start_nodes()
    (node,) = world.nodes_of(scale_set)
    world.azure_identity("good", good, world.client_id_of(good))
    world.azure_identity("late", missing, "late-client")
    world.binding("good-binding", "good", "good")
    world.binding("late-binding", "late", "late")
    world.pod("good", node, "good")
    world.pod("late", node, "late")

    world.start_manager(repairInterval=0.3, rejectedIdentityFirstRetry=0.5, rejectedIdentityRetry=2)
    eventually(lambda: reason_of(by_pod(world).get("late") or AzureAssignedIdentity()) == "IdentityNotFound")
    assert by_pod(world)["good"].status.status == ASSIGNED_STATUS_ASSIGNED
    late = by_pod(world)["late"]
    assert late.status.status == ASSIGNED_STATUS_CREATED
    assert "attempt" in next(c.message for c in late.status.conditions if c.type == CONDITION_ASSIGNED)
    eventually(
        lambda: any("was not found" in e["message"] for e in world.events(reason="binding apply error")),
        message="Warning Event naming the missing identity",
    )
    deadline = time.monotonic() + 7.0
    while time.monotonic() < deadline:
        assert_every_created_has_a_reason(world)
        time.sleep(0.5)  # samples over the backoff schedule's clock
    refused = [
        e for e in world.emulator.requests.entries("VirtualMachineScaleSets.update") if e.status >= 400
    ]
    gaps = [later.monotonic - earlier.monotonic for earlier, later in itertools.pairwise(refused)]
    # repairInterval 0.3 s would mean one attempt per pass; the backoff schedule is 0, 0.5, 1.5,
    # 3.5, 5.5 ...
    elapsed = time.monotonic() - refused[0].monotonic
    schedule = [0.0, 0.5, 1.5, *(1.5 + 2.0 * step for step in range(1, 20))]
    allowed = sum(1 for moment in schedule if moment <= elapsed)
    assert 3 <= len(refused) <= allowed, f"refused PATCHes: {len(refused)} in {elapsed:.1f} s, gaps {gaps}"
    assert gaps[0] >= 0.45, gaps
    assert gaps[1] >= 0.9, gaps
    assert all(gap < 2.0 + 3.0 for gap in gaps), f"the cap bounds the wait: {gaps}"

    world.identity(group, "late")  # the identity now exists in Azure
    eventually(
        lambda: by_pod(world)["late"].status.status == ASSIGNED_STATUS_ASSIGNED,
        timeout=20,
        message="late identity assigned on a later attempt",
    )
    assert world.identities_on(scale_set) == {good.lower(), missing.lower()}


def test_pod_on_missing_node_has_a_reason_then_its_object_is_collected(world: World) -> None:
    """A pod bound to a node that does not exist: its object says NodeNotFound with a Warning Event,
    is retried on the backoff, and is collected after the allowed attempts; when the node appears
    (a VM's), the pod gets its identity."""
    group = world.resource_group("mc")
    web = world.identity(group, "web")
    vm = world.virtual_machine(group, "vm")
    world.azure_identity("web", web, world.client_id_of(web))
    world.binding("web-binding", "web", "web")
    ghost = f"ghost-{world.suffix}"
    world.pod("stranded", ghost, "web")

    world.start_manager(rejectedIdentityFirstRetry=0.5, rejectedIdentityRetry=1, missingNodeAttempts=3)
    eventually(lambda: reason_of(by_pod(world).get("stranded") or AzureAssignedIdentity()) == "NodeNotFound")
    assert by_pod(world)["stranded"].status.status == ASSIGNED_STATUS_CREATED
    eventually(
        lambda: any("does not exist" in e["message"] for e in world.events(reason="binding apply error")),
        message="Warning Event on the pod",
    )
    eventually(lambda: "stranded" not in by_pod(world), timeout=20, message="object collected")
    collected = world.events(reason="NodeNotFound")
    assert len(collected) == 1, "one Event when the object is collected"
    assert collected[0]["involvedObject"]["name"] == "stranded"
    for _ in range(2):  # two passes for the pod, each asked for after the last one counted
        with world.watched(passes=1):
            world.request_pass_for_pod("stranded")
    assert "stranded" not in by_pod(world), "not recreated once its attempts ran out"

    world.client.create(NODE, {"metadata": {"name": ghost}, "spec": {"providerID": f"azure://{vm}"}})
    try:
        eventually(
            lambda: (
                (found := by_pod(world).get("stranded")) is not None
                and found.status.status == ASSIGNED_STATUS_ASSIGNED
            ),
            timeout=20,
            message="assigned once the node exists",
        )
        assert world.identities_on(vm) == {web.lower()}
    finally:
        world.client.delete(NODE, ghost, ignore_not_found=True)


def test_objects_whose_node_is_gone_are_collected_and_the_identity_removed(world: World) -> None:
    """The node of an Assigned pod is deleted (the pod object lingers, as without a pod GC): the
    identity leaves the scale set (no other pod needs it) and the object is collected."""
    group = world.resource_group("mc")
    web = world.identity(group, "web")
    scale_set, node = world.one_node_pool(group)
    world.bound_identity("web", web)
    world.pod("web-0", node, "web")
    world.start_manager(rejectedIdentityFirstRetry=0.5, rejectedIdentityRetry=1, missingNodeAttempts=2)
    eventually(
        lambda: by_pod(world).get("web-0") is not None and by_pod(world)["web-0"].status.status == "Assigned"
    )
    assert world.identities_on(scale_set) == {web.lower()}

    assert world.simulator is not None
    world.simulator.stop()  # it would bring the Node of the running instance back
    world.client.delete(NODE, node)
    eventually(lambda: world.identities_on(scale_set) == set(), timeout=20, message="identity removed")
    eventually(lambda: "web-0" not in by_pod(world), timeout=20, message="object collected")
    assert_every_created_has_a_reason(world)
