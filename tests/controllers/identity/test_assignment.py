"""The identity reconcilers against a real API server, the ARM emulator and the node simulator:
the issue's acceptance list, one behaviour per test, each aad-pod-identity complaint reproduced.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    CONDITION_ASSIGNED,
    CONDITION_CLIENT_ID_CURRENT,
    CONDITION_IDENTITY_FOUND,
    CONDITION_RESOLVED,
    CONDITION_SELECTOR_VALID,
    AzureAssignedIdentity,
    AzureIdentity,
    AzureIdentityBinding,
)
from nodewright.cloud.resource_ids import parse_scale_set_id
from nodewright.controllers.identity.intent import (
    INTENDED_TARGET_ANNOTATION,
    INTENDS_TO_ADD_ANNOTATION,
    intent_annotations,
)
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
)
from nodewright.runtime.kube.kinds import NODE
from nodewright.runtime.kube.kinds import POD as POD_KIND
from tests.cloud.helpers import cloud_for
from tests.controllers.identity.helpers import World
from tests.waiting import eventually


def condition(
    obj: AzureAssignedIdentity | AzureIdentity | AzureIdentityBinding, kind: str
) -> tuple[str, str]:
    found = next((c for c in obj.status.conditions if c.type == kind), None)
    return (found.status, found.reason) if found is not None else ("", "")


def statuses(world: World) -> dict[str, str]:
    return {a.spec.pod: a.status.status for a in world.assigned()}


def all_assigned(world: World, pods: set[str]) -> bool:
    current = statuses(world)
    return set(current) == pods and all(value == ASSIGNED_STATUS_ASSIGNED for value in current.values())


def update_count(world: World, operation: str, since: float = 0.0) -> int:
    return len(
        world.emulator.requests.entries(operation, since=since)
        if since
        else world.emulator.requests.entries(operation)
    )


def operations_since(world: World, mark: float) -> list[str]:
    """The ARM operations answered since ``mark``, oldest first (an LRO's status polls and its
    final GET follow the PATCH that started it)."""
    return [entry.operation for entry in world.emulator.requests.entries(since=mark)]


def test_pods_on_vm_and_scale_set_nodes_get_and_release_identities(world: World) -> None:
    """Cold start: one PATCH per target; the identity stays on the scale set while a pod on another
    of its nodes needs it, goes with the last pod; a pre-existing identity is used, never removed.
    Nodes and identities live in different resource groups, none configured (#690 #855 #1246)."""
    nodes_group = world.resource_group("mc-nodes")
    vm_group = world.resource_group("mc-vms")
    identity_group = world.resource_group("identities")
    web = world.identity(identity_group, "web")
    kubelet = world.identity(identity_group, "kubelet")
    scale_set = world.scale_set(nodes_group, "pool", capacity=2, identity_ids=[kubelet])
    vm = world.virtual_machine(vm_group, "vm")
    world.start_nodes()
    pool_nodes, vm_nodes = world.nodes_of(scale_set), world.nodes_of(vm)
    assert len(pool_nodes) == 2
    assert len(vm_nodes) == 1
    world.azure_identity("web", web, world.client_id_of(web))
    world.azure_identity("kubelet", kubelet, world.client_id_of(kubelet))
    world.binding("web-binding", "web", "web")
    world.binding("kubelet-binding", "kubelet", "kubelet")
    world.pod("web-0", pool_nodes[0], "web")
    world.pod("web-1", pool_nodes[1], "web")
    world.pod("web-vm", vm_nodes[0], "web")
    world.pod("uses-kubelet", pool_nodes[0], "kubelet")

    world.start_manager()
    eventually(
        lambda: all_assigned(world, {"web-0", "web-1", "web-vm", "uses-kubelet"}), message="all Assigned"
    )
    assert world.identities_on(scale_set) == {web.lower(), kubelet.lower()}
    assert world.identities_on(vm) == {web.lower()}
    assert update_count(world, "VirtualMachineScaleSets.update") == 1, "one PATCH for the scale set"
    assert update_count(world, "VirtualMachines.update") == 1, "one PATCH for the VM"
    by_pod = {a.spec.pod: a for a in world.assigned()}
    assert by_pod["web-0"].status.added_by_nodewright
    assert not by_pod["uses-kubelet"].status.added_by_nodewright, "it was on the scale set already"
    assert by_pod["web-0"].status.target == scale_set.lower()
    assert by_pod["web-0"].metadata["labels"] == {"nodename": pool_nodes[0]}
    assert by_pod["web-0"].name == f"web-0-{world.namespace}-web"
    assert by_pod["web-0"].namespace == "default"
    eventually(lambda: world.events(reason="binding applied"), message="binding applied event")

    world.delete_pod("web-0")
    eventually(lambda: "web-0" not in statuses(world), message="web-0 released")
    assert world.identities_on(scale_set) == {web.lower(), kubelet.lower()}, "web-1 on another node needs it"

    world.delete_pod("web-1")
    world.delete_pod("uses-kubelet")
    eventually(
        lambda: world.identities_on(scale_set) == {kubelet.lower()}, message="web removed from the scale set"
    )
    eventually(lambda: set(statuses(world)) == {"web-vm"}, message="released objects deleted")
    assert world.identities_on(vm) == {web.lower()}
    eventually(lambda: world.events(reason="binding removed"), message="binding removed event")

    world.delete_pod("web-vm")
    eventually(lambda: world.identities_on(vm) == set(), message="web removed from the VM")
    eventually(lambda: statuses(world) == {}, message="no assignments left")


def test_throttled_scale_set_is_not_called_before_retry_after(world: World) -> None:
    """A 429 with Retry-After on the scale set's PATCH: nothing is sent to that endpoint before the
    time it named, the identities still land, one wave is still one PATCH (#676 #988 #1139)."""
    group = world.resource_group("mc")
    ids = [world.identity(group, f"id-{index}") for index in range(3)]
    scale_set = world.scale_set(group, "pool", capacity=3)
    world.start_nodes()
    nodes = world.nodes_of(scale_set)
    for index, identity_id in enumerate(ids):
        world.azure_identity(f"id-{index}", identity_id, world.client_id_of(identity_id))
        world.binding(f"b-{index}", f"id-{index}", f"app-{index}")
        world.pod(f"p-{index}", nodes[index], f"app-{index}")
    world.emulator.faults.throttle("VirtualMachineScaleSets.update", times=1, retry_after=2)

    world.start_manager()
    eventually(lambda: all_assigned(world, {"p-0", "p-1", "p-2"}), message="all Assigned")
    assert world.identities_on(scale_set) == {identity_id.lower() for identity_id in ids}
    writes = world.emulator.requests.entries("VirtualMachineScaleSets.update")
    assert [entry.status for entry in writes] == [429, 200], "one throttled PATCH, then one that landed"
    assert writes[1].monotonic - writes[0].monotonic >= 1.9, "nothing before Retry-After"


def _six_pods_of_one_binding_on_a_scale_set(world: World) -> set[str]:
    group = world.resource_group("mc")
    web = world.identity(group, "web")
    scale_set = world.scale_set(group, "pool", capacity=3)
    world.start_nodes()
    nodes = world.nodes_of(scale_set)
    world.azure_identity("web", web, world.client_id_of(web))
    world.binding("web-binding", "web", "web")
    pods = {f"p-{index}" for index in range(6)}
    for index in range(6):
        world.pod(f"p-{index}", nodes[index % 3], "web")
    return pods


def test_a_failed_target_update_is_reported_once_per_binding_not_per_pod(world: World) -> None:
    """The scale set's update fails (its operation ends Failed) with six pods of one binding
    waiting: every waiting assignment says why (TargetUpdateFailed, naming ARM's code), the
    binding gets one Warning Event for the six pods instead of six, and all land on the retry."""
    pods = _six_pods_of_one_binding_on_a_scale_set(world)
    world.emulator.faults.fail_operation("VirtualMachineScaleSets.update", times=1)

    world.start_manager()
    eventually(
        lambda: (
            {condition(a, "Assigned")[1] for a in world.assigned()} == {"TargetUpdateFailed"}
            and len(world.assigned()) == 6
        ),
        message="the failed update reported on every waiting assignment",
    )
    message = next(c.message for c in world.assigned()[0].status.conditions if c.type == "Assigned")
    assert "(InternalExecutionError)" in message
    eventually(lambda: all_assigned(world, pods), message="all Assigned on the retry")
    failures = world.events(reason="binding apply error")
    assert sum(int(e.get("count") or 1) for e in failures) == 1, [e["message"] for e in failures]
    assert "failed for 6 pods" in failures[0]["message"]


def test_a_throttled_update_leaves_the_recorded_intents_and_tells_the_binding(world: World) -> None:
    """A 429 on the scale set's PATCH with six pods waiting: the binding gets one Warning Event
    naming ARM's code for the six; the objects keep the intent recorded at create (this scale
    set, nodewright adding), with no "failed" status to be rewritten before the retry; all land
    once the Retry-After has passed."""
    pods = _six_pods_of_one_binding_on_a_scale_set(world)
    world.emulator.faults.throttle("VirtualMachineScaleSets.update", times=1, retry_after=3)

    world.start_manager()
    eventually(lambda: world.events(reason="binding apply error"), message="the binding told")
    failures = world.events(reason="binding apply error")
    assert len(failures) == 1, failures
    assert "failed for 6 pods" in failures[0]["message"]
    assert "(TooManyRequests)" in failures[0]["message"]
    waiting = [
        item
        for item in world.client.list(AZURE_ASSIGNED_IDENTITY).items
        if item["spec"].get("podNamespace") == world.namespace
    ]
    assert len(waiting) == 6
    assert [a.get("status") for a in waiting] == [None] * 6, "no status written before the retry"
    assert {a["metadata"]["annotations"][INTENDS_TO_ADD_ANNOTATION] for a in waiting} == {"true"}
    eventually(lambda: all_assigned(world, pods), message="all Assigned after Retry-After")
    writes = world.emulator.requests.entries("VirtualMachineScaleSets.update")
    assert [entry.status for entry in writes] == [429, 200]
    assert {condition(a, "Assigned")[1] for a in world.assigned()} == {"Assigned"}


def test_one_bad_identity_does_not_block_the_others(world: World) -> None:
    """Identities missing in Azure or refused (LinkedAuthorizationFailed) are isolated with a clear
    status and Event; the good one lands; the bad ones are not re-sent on every pass, so no
    crash loop (#515 #1192)."""
    group = world.resource_group("mc")
    denied_group = world.resource_group("denied")
    good = world.identity(group, "good")
    denied = world.identity(denied_group, "denied")
    missing = good.replace("/good", "/missing")
    world.emulator.state.deny_linked_access(
        f"/subscriptions/{parse_scale_set_id_sub(good)}/resourceGroups/{denied_group}"
    )
    scale_set = world.scale_set(group, "pool", capacity=1)
    world.start_nodes()
    (node,) = world.nodes_of(scale_set)
    for name, identity_id in (("good", good), ("denied", denied), ("missing", missing)):
        world.azure_identity(name, identity_id, f"{name}-client")
        world.binding(f"{name}-binding", name, name)
        world.pod(name, node, name)

    world.start_manager(repairInterval=0.5, rejectedIdentityFirstRetry=60)
    eventually(lambda: statuses(world).get("good") == ASSIGNED_STATUS_ASSIGNED, message="good Assigned")
    assert world.identities_on(scale_set) == {good.lower()}

    def rejected() -> dict[str, tuple[str, str]]:
        return {
            a.spec.pod: condition(a, CONDITION_ASSIGNED) for a in world.assigned() if a.spec.pod != "good"
        }

    eventually(
        lambda: (
            rejected() == {"denied": ("False", "IdentityRejected"), "missing": ("False", "IdentityNotFound")}
        ),
        message="bad identities rejected",
    )
    assert statuses(world)["denied"] == ASSIGNED_STATUS_CREATED
    eventually(
        lambda: len(world.events(reason="binding apply error")) >= 2, message="binding apply error events"
    )
    messages = " ".join(e["message"] for e in world.events(reason="binding apply error"))
    assert "LinkedAuthorizationFailed" in messages
    assert "FailedIdentityOperation" in messages
    with world.watched(passes=4):  # four repair passes (repairInterval 0.5 s)
        settled = update_count(world, "VirtualMachineScaleSets.update")
    assert update_count(world, "VirtualMachineScaleSets.update") == settled, (
        "no PATCH storm for known-bad ones"
    )


def parse_scale_set_id_sub(identity_id: str) -> str:
    return identity_id.split("/")[2]


def test_bad_input_is_reported_and_others_are_unaffected(world: World) -> None:
    """Malformed resourceID, identity missing in Azure, binding to a missing identity, a selector
    no pod label can carry (300 characters, non-ASCII), pod on a node without providerID: each
    gets a clear status and a Warning Event; the good pod is Assigned."""
    group = world.resource_group("mc")
    good = world.identity(group, "good")
    scale_set = world.scale_set(group, "pool", capacity=1)
    world.start_nodes()
    (node,) = world.nodes_of(scale_set)
    bare_node = f"bare-{world.suffix}"
    world.client.create(
        NODE,
        {"metadata": {"name": bare_node}},  # not the simulator's: it would delete a node it has no VM for
    )
    world.azure_identity("good", good, world.client_id_of(good))
    world.azure_identity(
        "malformed", "/subscriptions/x/resourceGroups/y/providers/Microsoft.Compute/virtualMachines/z", "c"
    )
    world.azure_identity("absent", good.replace("/good", "/absent"), "absent-client")
    world.binding("good-binding", "good", "good")
    world.binding("malformed-binding", "malformed", "malformed")
    world.binding("ghost-binding", "ghost", "ghost")
    world.binding("long-selector-binding", "good", "x" * 300)
    world.binding("accented-selector-binding", "good", "wéb")
    world.pod("good", node, "good")
    world.pod("malformed", node, "malformed")
    world.pod("on-bare-node", bare_node, "good")

    world.start_manager()
    eventually(lambda: statuses(world).get("good") == ASSIGNED_STATUS_ASSIGNED, message="good Assigned")
    assert "malformed" not in statuses(world), "an invalid identity is never assigned"

    def binding_condition(name: str) -> tuple[str, str]:
        return condition(
            AzureIdentityBinding.from_object(world.client.get(AZURE_IDENTITY_BINDING, name, world.namespace)),
            CONDITION_IDENTITY_FOUND,
        )

    eventually(
        lambda: binding_condition("ghost-binding") == ("False", "IdentityNotFound"), message="ghost binding"
    )
    eventually(
        lambda: binding_condition("malformed-binding") == ("False", "IdentityInvalid"),
        message="malformed binding",
    )
    eventually(lambda: binding_condition("good-binding") == ("True", "Found"), message="good binding")

    def selector_condition(name: str) -> tuple[str, str]:
        return condition(
            AzureIdentityBinding.from_object(world.client.get(AZURE_IDENTITY_BINDING, name, world.namespace)),
            CONDITION_SELECTOR_VALID,
        )

    invalid = ("False", "InvalidSelector")
    eventually(lambda: selector_condition("long-selector-binding") == invalid, message="long selector")
    eventually(lambda: selector_condition("accented-selector-binding") == invalid, message="accented")
    assert selector_condition("good-binding") == ("True", "Valid")
    assert binding_condition("long-selector-binding") == ("True", "Found"), "the identity is fine"

    def identity_condition(name: str) -> tuple[str, str]:
        return condition(
            AzureIdentity.from_object(world.client.get(AZURE_IDENTITY, name, world.namespace)),
            CONDITION_RESOLVED,
        )

    eventually(lambda: identity_condition("absent") == ("False", "NotFound"), message="absent identity")
    eventually(
        lambda: identity_condition("malformed") == ("False", "InvalidResourceID"),
        message="malformed identity",
    )
    absent = AzureIdentity.from_object(world.client.get(AZURE_IDENTITY, "absent", world.namespace))
    assert absent.status.retrieval_error
    assert absent.status.next_recheck_time, "not-found is not fatal: rechecked later"

    def bare() -> AzureAssignedIdentity | None:
        return next((a for a in world.assigned() if a.spec.pod == "on-bare-node"), None)

    eventually(
        lambda: (
            (found := bare()) is not None
            and condition(found, CONDITION_ASSIGNED) == ("False", "NodeNotResolvable")
        ),
        message="bare node",
    )
    world.client.delete(NODE, bare_node)
    reasons = {e["reason"] for e in world.events()}
    assert {"IdentityNotFound", "InvalidResourceID", "binding apply error"} <= reasons
    invalid_selector = world.events(reason="InvalidSelector")
    assert sorted(e["involvedObject"]["name"] for e in invalid_selector) == [
        "accented-selector-binding",
        "long-selector-binding",
    ], "one Event per binding"
    assert all(e.get("count", 1) == 1 and "aadpodidbinding" in e["message"] for e in invalid_selector)
    assert world.identities_on(scale_set) == {good.lower()}


@pytest.mark.slow
def test_more_than_150_identities_land_in_chunks(world: World) -> None:
    """160 identities for one pod: two PATCHes (150 + 10) and all of them Assigned (#813)."""
    group = world.resource_group("mc")
    scale_set = world.scale_set(group, "pool", capacity=1)
    world.start_nodes()
    (node,) = world.nodes_of(scale_set)
    ids = [world.identity(group, f"id-{index:03d}") for index in range(160)]
    for index, identity_id in enumerate(ids):
        world.azure_identity(f"id-{index:03d}", identity_id, f"client-{index}")
        world.binding(f"b-{index:03d}", f"id-{index:03d}", "many")
    world.pod("many", node, "many")

    world.start_manager(resolveIdentityInfo=False)
    eventually(
        lambda: (
            len(world.assigned()) == 160
            and all(a.status.status == ASSIGNED_STATUS_ASSIGNED for a in world.assigned())
        ),
        timeout=90,
        message="160 Assigned",
    )
    assert world.identities_on(scale_set) == {identity_id.lower() for identity_id in ids}
    assert [e.status for e in world.emulator.requests.entries("VirtualMachineScaleSets.update")] == [200, 200]


def test_identities_removed_out_of_band_are_re_added_and_foreign_ones_left_alone(world: World) -> None:
    """Repair re-adds what vanished from the scale set (#633 #1308) and removes nothing it did not
    add: an identity added by someone else stays, even after the pods are gone."""
    group = world.resource_group("mc")
    web, foreign = world.identity(group, "web"), world.identity(group, "foreign")
    scale_set, node = world.one_node_pool(group)
    world.bound_identity("web", web)
    world.pod("web", node, "web")
    world.start_manager(repairInterval=0.5)
    eventually(lambda: all_assigned(world, {"web"}), message="Assigned")

    compute = cloud_for(world.emulator).compute
    target = parse_scale_set_id(scale_set)
    compute.update_identities(target, add=[foreign], remove=[web])
    assert world.identities_on(scale_set) == {foreign.lower()}
    eventually(
        lambda: world.identities_on(scale_set) == {web.lower(), foreign.lower()}, message="web re-added"
    )

    world.delete_pod("web")
    eventually(lambda: world.identities_on(scale_set) == {foreign.lower()}, message="web removed")
    with world.watched(passes=3):  # repair passes (repairInterval 0.5 s) that see foreign alone
        pass
    assert world.identities_on(scale_set) == {foreign.lower()}, "never removes what it did not add"


def test_a_pass_after_a_write_skips_the_get_and_a_change_in_between_is_caught(world: World) -> None:
    """A pass that follows another plans from what the last PATCH left (no GET) and sends that
    state's etag as If-Match; when someone else changed the scale set in between, ARM answers 412,
    nothing of the stale plan lands, and the pass reads again and still keeps the foreign change."""
    group = world.resource_group("mc")
    web, api, jobs, foreign = (world.identity(group, name) for name in ("web", "api", "jobs", "foreign"))
    scale_set, node = world.one_node_pool(group)
    for name, identity_id in (("web", web), ("api", api), ("jobs", jobs)):
        world.bound_identity(name, identity_id)
    world.pod("web", node, "web")
    world.start_manager()
    eventually(lambda: all_assigned(world, {"web"}), message="web Assigned")

    mark = time.monotonic()
    world.pod("api", node, "api")
    eventually(lambda: all_assigned(world, {"web", "api"}), message="api Assigned")
    assert operations_since(world, mark)[0] == "VirtualMachineScaleSets.update", "planned from the last PATCH"
    assert update_count(world, "VirtualMachineScaleSets.update", since=mark) == 1

    cloud_for(world.emulator).compute.update_identities(parse_scale_set_id(scale_set), add=[foreign])
    mark = time.monotonic()
    world.pod("jobs", node, "jobs")
    eventually(lambda: all_assigned(world, {"web", "api", "jobs"}), message="jobs Assigned")
    assert world.identities_on(scale_set) == {i.lower() for i in (web, api, jobs, foreign)}
    patches = world.emulator.requests.entries("VirtualMachineScaleSets.update", since=mark)
    assert [p.status for p in patches] == [412, 200], "the stale plan refused, then sent from a fresh read"
    assert operations_since(world, mark)[:3] == [
        "VirtualMachineScaleSets.update",
        "VirtualMachineScaleSets.get",
        "VirtualMachineScaleSets.update",
    ]


@pytest.mark.parametrize("adding", [True, False], ids=["added-by-nodewright", "found-there"])
def test_the_intent_a_new_object_was_created_with_is_the_record_until_a_status_is_written(
    world: World, adding: bool
) -> None:
    """A new AzureAssignedIdentity records its target and whether nodewright adds the identity in
    the create itself (annotations). If the process died before any status was written, that is
    the record a restarted manager goes by: it confirms the assignment with the same ownership, so
    the identity nodewright added is removed with the pod and one it found there is left alone."""
    group = world.resource_group("mc")
    web = world.identity(group, "web")
    scale_set, node = world.one_node_pool(group)
    world.bound_identity("web", web)
    world.pod("web", node, "web")
    world.start_manager()
    eventually(lambda: all_assigned(world, {"web"}), message="web Assigned")
    (created,) = world.assigned()
    annotations = created.metadata.get("annotations") or {}
    assert annotations[INTENDED_TARGET_ANNOTATION] == scale_set.lower()
    assert annotations[INTENDS_TO_ADD_ANNOTATION] == "true"
    assert world.running is not None
    world.running.stop()
    world.running = None

    # The state a crash between the create and the first status write leaves behind.
    name, namespace = created.name, created.namespace
    world.client.patch(AZURE_ASSIGNED_IDENTITY, name, {"status": None}, namespace, subresource="status")
    world.client.patch(
        AZURE_ASSIGNED_IDENTITY,
        name,
        {"metadata": {"annotations": intent_annotations(scale_set.lower(), adding)}},
        namespace,
    )
    world.start_manager(repairInterval=0.5)  # repair passes that the last window watches
    eventually(lambda: all_assigned(world, {"web"}), message="web Assigned again")
    (recorded,) = world.assigned()
    assert recorded.status.target == scale_set.lower()
    assert recorded.status.added_by_nodewright is adding, "the ownership came from the annotations"
    world.delete_pod("web")
    eventually(lambda: not world.assigned(), message="the object collected with its pod")
    if adding:
        eventually(lambda: world.identities_on(scale_set) == set(), message="the identity removed")
    else:
        with world.watched(passes=3):  # repair passes after the object was collected
            pass
        assert world.identities_on(scale_set) == {web.lower()}, "never removes what it did not add"


def test_stale_client_id_is_flagged_and_the_identity_still_assigned(world: World) -> None:
    """An AzureIdentity whose spec.clientID is not the identity's real one (it was deleted and
    recreated, #521): the real clientId shows in status, a condition and an Event say so."""
    group = world.resource_group("mc")
    web = world.identity(group, "web")
    real = world.client_id_of(web)
    scale_set = world.scale_set(group, "pool", capacity=1)
    world.start_nodes()
    (node,) = world.nodes_of(scale_set)
    world.azure_identity("web", web, "00000000-0000-0000-0000-00000000dead")
    world.binding("web-binding", "web", "web")
    world.pod("web", node, "web")
    world.start_manager()

    def status() -> AzureIdentity:
        return AzureIdentity.from_object(world.client.get(AZURE_IDENTITY, "web", world.namespace))

    eventually(
        lambda: condition(status(), CONDITION_CLIENT_ID_CURRENT) == ("False", "Differs"), message="flagged"
    )
    assert status().status.client_id == real
    assert status().status.principal_id
    assert condition(status(), CONDITION_RESOLVED) == ("True", "Found")
    eventually(lambda: world.events(reason="ClientIDMismatch"), message="ClientIDMismatch event")
    eventually(lambda: all_assigned(world, {"web"}), message="still Assigned")


def test_published_example_manifests_work_unchanged(world: World) -> None:
    """aad-pod-identity's walkthrough AzureIdentity, AzureIdentityBinding and labelled pod (only
    nodeName added: no scheduler runs here) end in an Assigned object NMI finds by node label."""
    group = world.resource_group("mc")
    demo = world.identity(group, "demo")
    scale_set = world.scale_set(group, "pool", capacity=1)
    world.start_nodes()
    (node,) = world.nodes_of(scale_set)
    identity: dict[str, Any] = {
        "apiVersion": "aadpodidentity.k8s.io/v1",
        "kind": "AzureIdentity",
        "metadata": {"name": "demo", "namespace": world.namespace},
        "spec": {"type": 0, "resourceID": demo, "clientID": world.client_id_of(demo)},
    }
    binding: dict[str, Any] = {
        "apiVersion": "aadpodidentity.k8s.io/v1",
        "kind": "AzureIdentityBinding",
        "metadata": {"name": "demo-binding", "namespace": world.namespace},
        "spec": {"azureIdentity": "demo", "selector": "demo"},
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "demo", "namespace": world.namespace, "labels": {"aadpodidbinding": "demo"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "demo", "image": "mcr.microsoft.com/oss/azure/aad-pod-identity/demo:v1.7.4"}
            ],
            "nodeSelector": {"kubernetes.io/os": "linux"},
        },
    }
    stored_identity = world.client.create(AZURE_IDENTITY, identity)
    stored_binding = world.client.create(AZURE_IDENTITY_BINDING, binding)
    assert stored_identity["spec"] == identity["spec"]
    assert stored_binding["spec"] == binding["spec"]
    world.client.create(POD_KIND, pod)
    world.start_manager()

    def nmi_view() -> list[dict[str, Any]]:
        return world.client.list(AZURE_ASSIGNED_IDENTITY, "default", label_selector=f"nodename={node}").items

    eventually(
        lambda: [a for a in nmi_view() if (a.get("status") or {}).get("status") == "Assigned"],
        message="NMI sees it",
    )
    (found,) = [
        a
        for a in nmi_view()
        if a["spec"]["podNamespace"] == world.namespace
        and a["spec"]["azureIdentityRef"]["metadata"]["namespace"] == world.namespace
    ]
    assert found["metadata"]["name"] == f"demo-{world.namespace}-demo"
    assert found["spec"]["pod"] == "demo"
    assert found["spec"]["azureIdentityRef"]["spec"]["clientID"] == world.client_id_of(demo)
    assert found["spec"]["azureIdentityRef"]["spec"]["resourceID"] == demo
    assert world.identities_on(scale_set) == {demo.lower()}
