"""ComputeService through the real azure-mgmt-compute client against the ARM emulator: identities
(delta PATCH, type derivation, 150-chunking, a bad identity isolated, failure re-read), scale-set
image, scale out by one, delete, node state, instance image, LROs and 5xx retries."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from nodewright.cloud.backoff import BackingOffError
from nodewright.cloud.compute import IdentityUpdateIncompleteError
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.errors import CloudError, NotFoundError, PreconditionFailedError
from nodewright.cloud.factory import Cloud
from nodewright.cloud.models import ImageReference, NodeState, ScaleOutAccepted
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import (
    ScaleSetId,
    ScaleSetInstanceId,
    parse_machine_id,
    parse_provider_id,
    parse_scale_set_id,
)
from nodewright.cloud.throttle import InMemoryCallCounter
from tests.cloud.helpers import cloud_for, publish_test_images

GROUP = "rg-compute"


@dataclass
class Estate:
    emulator: ArmEmulator
    cloud: Cloud
    counter: InMemoryCallCounter
    subnet_id: str
    identities: list[str]

    def identity(self, index: int) -> str:
        return self.identities[index]


@pytest.fixture
def estate(arm_emulator: ArmEmulator) -> Iterator[Estate]:
    # No test here is about Retry-After: 1 s instead of the emulator's default 10 s keeps each
    # slow operation (0.2 to 0.6 s) from costing 10 s while ARM still paces the polls.
    arm_emulator.state.operation_retry_after = 1
    arm_emulator.estate.add_resource_group(GROUP)
    publish_test_images(arm_emulator)
    vnet = arm_emulator.estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.240.0.0/16"})
    identities = [arm_emulator.estate.add_identity(GROUP, f"id-{index}") for index in range(4)]
    counter = InMemoryCallCounter()
    cloud = cloud_for(arm_emulator, observer=counter)
    yield Estate(arm_emulator, cloud, counter, vnet + "/subnets/nodes", identities)
    cloud.close()


def scale_out_and_wait(
    estate: Estate, scale_set: ScaleSetId, count: int = 1, record: Callable[[list[str]], None] | None = None
) -> tuple[list[str], OperationOutcome]:
    """Scale out by ``count``, wait for the tracker to report the operation's end; the new
    instance IDs (by difference with what ``scale_out`` listed before) and the outcome."""
    recorded: list[list[str]] = []
    outcomes: list[OperationOutcome] = []
    ended = threading.Event()

    def keep(before: list[str]) -> None:
        recorded.append(before)
        if record is not None:
            record(before)

    def on_done(outcome: OperationOutcome) -> None:
        outcomes.append(outcome)
        ended.set()

    estate.cloud.compute.scale_out(scale_set, count, keep, on_done)
    assert ended.wait(30), "the scale-out's operation never ended"
    after = estate.cloud.compute.list_instance_ids(scale_set)
    return [i for i in after if i not in set(recorded[0])], outcomes[0]


def rendered_identity(emulator: ArmEmulator, arm_id: str) -> dict[str, Any]:
    document = emulator.state.render(arm_id)
    assert document is not None
    identity: dict[str, Any] = document.get("identity") or {"type": "None"}
    return identity


def keys(identity: dict[str, Any]) -> set[str]:
    return {key.lower() for key in (identity.get("userAssignedIdentities") or {})}


# Identities --------------------------------------------------------------------------------------


def test_scale_set_identities_read_and_delta_patched(estate: Estate) -> None:
    """Add two, remove one: a single PATCH of only the identity, and the result matches ARM."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1, identity_ids=[estate.identity(0)]
    )
    scale_set = parse_scale_set_id(scale_set_id)
    before = estate.cloud.compute.get_identities(scale_set)
    assert before.user_assigned == {estate.identity(0).lower()}
    assert before.type == "UserAssigned"

    result = estate.cloud.compute.update_identities(
        scale_set, add=[estate.identity(1), estate.identity(2).upper()], remove=[estate.identity(0)]
    )

    expected = {estate.identity(1).lower(), estate.identity(2).lower()}
    assert result.identities.user_assigned == expected
    assert result.requests == 1
    assert keys(rendered_identity(estate.emulator, scale_set_id)) == expected
    assert estate.emulator.requests.count("VirtualMachineScaleSets.update") == 1


def test_nothing_to_change_sends_no_patch(estate: Estate) -> None:
    """Adding what is there and removing what is not: one GET, no PATCH."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, identity_ids=[estate.identity(0)]
    )
    result = estate.cloud.compute.update_identities(
        parse_scale_set_id(scale_set_id), add=[estate.identity(0)], remove=[estate.identity(3)]
    )
    assert result.requests == 0
    assert estate.emulator.requests.count("VirtualMachineScaleSets.update") == 0


def test_identity_patch_carries_the_etag_it_was_planned_from(estate: Estate) -> None:
    """The GET's etag goes out as If-Match on the PATCH, and the result carries the new etag."""
    scale_set_id = estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)
    scale_set = parse_scale_set_id(scale_set_id)
    before = estate.cloud.compute.get_identities(scale_set)
    assert before.etag

    result = estate.cloud.compute.update_identities(scale_set, add=[estate.identity(0)], current=before)

    (patch,) = estate.emulator.requests.entries("VirtualMachineScaleSets.update")
    assert patch.if_match is not None
    assert before.etag in patch.if_match
    assert result.identities.etag
    assert result.identities.etag != before.etag
    assert estate.cloud.compute.get_identities(scale_set).etag == result.identities.etag


@pytest.mark.parametrize("kind", ["scale set", "virtual machine"])
def test_identity_patch_is_followed_to_its_end_without_a_final_get(estate: Estate, kind: str) -> None:
    """The PATCH's operation is polled until it Succeeded (never returned while InProgress), and
    the result is the PATCH's own answer: no GET of the target after it, and the identities and
    etag it reports are those a fresh GET reads."""
    if kind == "scale set":
        arm_id = estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)
        target: Any = parse_scale_set_id(arm_id)
        operation, read = "VirtualMachineScaleSets.update", "VirtualMachineScaleSets.get"
    else:
        arm_id = estate.emulator.estate.add_virtual_machine(GROUP, "vm-a", subnet_id=estate.subnet_id)
        target = parse_machine_id(arm_id)
        operation, read = "VirtualMachines.update", "VirtualMachines.get"
    before = estate.cloud.compute.get_identities(target)
    estate.emulator.faults.slow_operations(0.4, operation)
    started = time.monotonic()

    result = estate.cloud.compute.update_identities(target, add=[estate.identity(0)], current=before)

    assert time.monotonic() - started >= 0.4
    assert estate.emulator.requests.count(operation) == 1
    assert estate.emulator.requests.count(read) == 1  # the `before` read only
    assert estate.emulator.requests.count("Operations.status") >= 1
    document = estate.emulator.state.render(arm_id)
    assert document is not None
    assert document["properties"]["provisioningState"] == "Succeeded"
    fresh = estate.cloud.compute.get_identities(target)
    assert result.identities.user_assigned == fresh.user_assigned == {estate.identity(0).lower()}
    assert result.identities.etag == fresh.etag != before.etag


def test_a_plan_from_a_stale_view_is_refused_and_nothing_applied(estate: Estate) -> None:
    """A caller's ``current`` older than a change by someone else: 412, no identity changed, and
    the caller gets ``PreconditionFailedError`` to decide again from a fresh read."""
    vm_id = estate.emulator.estate.add_virtual_machine(
        GROUP, "vm-0", subnet_id=estate.subnet_id, identity_ids=[estate.identity(0)]
    )
    machine = parse_machine_id(vm_id)
    assert not isinstance(machine, ScaleSetInstanceId)
    stale = estate.cloud.compute.get_identities(machine)
    estate.cloud.compute.update_identities(machine, add=[estate.identity(1)])  # another writer

    with pytest.raises(PreconditionFailedError):
        estate.cloud.compute.update_identities(machine, remove=[estate.identity(0)], current=stale)

    assert keys(rendered_identity(estate.emulator, vm_id)) == {
        estate.identity(0).lower(),
        estate.identity(1).lower(),
    }
    statuses = [e.status for e in estate.emulator.requests.entries("VirtualMachines.update")]
    assert statuses == [200, 412]


@pytest.mark.parametrize(
    ("system_assigned", "expected_type"),
    [pytest.param(True, "SystemAssigned", id="system-assigned-kept"), pytest.param(False, "None", id="none")],
)
def test_removing_all_user_identities_derives_type(
    estate: Estate, system_assigned: bool, expected_type: str
) -> None:
    """Removing the last user-assigned identity of a VM leaves SystemAssigned (kept) or None."""
    vm_id = estate.emulator.estate.add_virtual_machine(
        GROUP,
        "vm-0",
        subnet_id=estate.subnet_id,
        identity_ids=[estate.identity(0), estate.identity(1)],
        system_assigned=system_assigned,
    )
    machine = parse_machine_id(vm_id)
    assert not isinstance(machine, ScaleSetInstanceId)
    result = estate.cloud.compute.update_identities(machine, remove=[estate.identity(0), estate.identity(1)])
    assert result.identities.type == expected_type
    assert result.identities.user_assigned == frozenset()
    identity = rendered_identity(estate.emulator, vm_id)
    assert identity["type"] == expected_type
    assert keys(identity) == set()


def test_more_than_150_identities_are_chunked_and_all_land(estate: Estate) -> None:
    """320 identities: three PATCHes of at most 150 (the emulator refuses 151), all assigned."""
    many = [estate.emulator.estate.add_identity(GROUP, f"bulk-{index:03d}") for index in range(320)]
    scale_set_id = estate.emulator.estate.add_scale_set(GROUP, "vmss-bulk", subnet_id=estate.subnet_id)
    result = estate.cloud.compute.update_identities(parse_scale_set_id(scale_set_id), add=many)
    assert result.requests == 3
    assert len(result.identities.user_assigned) == 320
    assert len(keys(rendered_identity(estate.emulator, scale_set_id))) == 320
    assert [entry.status for entry in estate.emulator.requests.entries("VirtualMachineScaleSets.update")] == [
        200,
        200,
        200,
    ]


def test_a_bad_identity_is_isolated_and_the_rest_land(estate: Estate) -> None:
    """One identity under a denied scope (LinkedAuthorizationFailed) and one that does not exist
    (FailedIdentityOperation): both are dropped and reported, the others are assigned."""
    denied = estate.identity(2)
    missing = estate.identity(0).rsplit("/", 1)[0] + "/does-not-exist"
    estate.emulator.state.deny_linked_access(denied)
    scale_set_id = estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)

    result = estate.cloud.compute.update_identities(
        parse_scale_set_id(scale_set_id), add=[estate.identity(0), estate.identity(1), denied, missing]
    )

    assert result.identities.user_assigned == {estate.identity(0).lower(), estate.identity(1).lower()}
    rejected = {rejection.identity_id: rejection.code for rejection in result.rejected}
    assert rejected == {
        denied.lower(): "LinkedAuthorizationFailed",
        missing.lower(): "FailedIdentityOperation",
    }
    assert keys(rendered_identity(estate.emulator, scale_set_id)) == result.identities.user_assigned


def test_a_swap_whose_addition_is_rejected_is_sent_again_as_a_removal(estate: Estate) -> None:
    """Swapping the only user-assigned identity of a VM that also has a system-assigned one: ARM
    refuses the addition, and the request sent again without it removes the last identity with
    the type re-derived (SystemAssigned, no map)."""
    denied = estate.identity(2)
    estate.emulator.state.deny_linked_access(denied)
    vm_id = estate.emulator.estate.add_virtual_machine(
        GROUP, "vm-0", subnet_id=estate.subnet_id, identity_ids=[estate.identity(1)], system_assigned=True
    )
    machine = parse_machine_id(vm_id)
    assert not isinstance(machine, ScaleSetInstanceId)

    result = estate.cloud.compute.update_identities(machine, add=[denied], remove=[estate.identity(1)])

    assert [rejection.identity_id for rejection in result.rejected] == [denied.lower()]
    assert result.identities.type == "SystemAssigned"
    assert result.identities.user_assigned == frozenset()
    identity = rendered_identity(estate.emulator, vm_id)
    assert identity["type"] == "SystemAssigned"
    assert keys(identity) == set()
    assert [e.status for e in estate.emulator.requests.entries("VirtualMachines.update")][-1] == 200


def test_failed_update_rereads_what_landed(estate: Estate) -> None:
    """The LRO fails after a first chunk landed: the error carries the identities re-read from ARM."""
    many = [estate.emulator.estate.add_identity(GROUP, f"bulk-{index:03d}") for index in range(200)]
    scale_set_id = estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)
    estate.emulator.faults.fail_operation(
        "VirtualMachineScaleSets.update", times=1, code="InternalExecutionError", message="boom"
    )
    # The first request fails outright: nothing lands.
    with pytest.raises(IdentityUpdateIncompleteError) as caught:
        estate.cloud.compute.update_identities(parse_scale_set_id(scale_set_id), add=many)
    assert caught.value.identities is not None
    assert caught.value.identities.user_assigned == frozenset()
    assert caught.value.cause.code == "InternalExecutionError"
    # At once again: refused without any request while the scale set backs off (0.2 s here).
    requests_before = len(estate.emulator.requests.entries())
    with pytest.raises(BackingOffError) as refused:
        estate.cloud.compute.update_identities(parse_scale_set_id(scale_set_id), add=many)
    assert refused.value.quiet
    assert len(estate.emulator.requests.entries()) == requests_before
    time.sleep(0.3)
    # Retried, everything lands; the counter saw one failed and two good PATCH calls.
    result = estate.cloud.compute.update_identities(parse_scale_set_id(scale_set_id), add=many)
    assert len(result.identities.user_assigned) == 200
    assert estate.counter.count(operation="compute.patch_scale_set_identities", outcome="error") == 1
    assert estate.counter.count(operation="compute.patch_scale_set_identities", outcome="success") == 2


# Scale set image, scale out, delete, node state -------------------------------------------------


GALLERY_VERSION = (
    f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Compute/galleries/g"
    "/images/node/versions/"
)


@pytest.mark.parametrize(
    ("seeded", "image"),
    [
        pytest.param(
            {"id": GALLERY_VERSION + "1.0.0"},
            ImageReference(id=GALLERY_VERSION + "2.0.0"),
            id="image-id",
        ),
        pytest.param(
            {"communityGalleryImageId": "/CommunityGalleries/cg-1/Images/node/Versions/1.0.0"},
            ImageReference(community_gallery_image_id="/CommunityGalleries/cg-1/Images/node/Versions/3.0.0"),
            id="community-gallery",
        ),
        pytest.param(
            {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "24.04.0"},
            ImageReference(publisher="Canonical", offer="ubuntu-24_04-lts", sku="server", version="24.04.1"),
            id="marketplace",
        ),
    ],
)
def test_scale_set_image_get_set_and_new_instances_get_it(
    estate: Estate, seeded: dict[str, str], image: ImageReference
) -> None:
    """Setting the model image (each form) reads back exactly; old instances keep theirs and new
    instances run the new one."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1, image=seeded
    )
    scale_set = parse_scale_set_id(scale_set_id)
    original = estate.cloud.compute.get_scale_set_image(scale_set)
    assert original is not None
    assert not original.same_image(image)

    estate.cloud.compute.set_scale_set_image(scale_set, image)

    assert estate.cloud.compute.get_scale_set_image(scale_set) == image
    assert estate.cloud.compute.get_instance(scale_set.instance("0")).image == original
    new, _ = scale_out_and_wait(estate, scale_set)
    assert estate.cloud.compute.get_instance(scale_set.instance(new[0])).image == image


def test_scale_set_image_switches_between_forms(estate: Estate) -> None:
    """Marketplace -> image ID -> community gallery: each switch leaves only the new form."""
    scale_set = parse_scale_set_id(
        estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)
    )
    for image in (
        ImageReference(id=GALLERY_VERSION + "2.0.0"),
        ImageReference(community_gallery_image_id="/CommunityGalleries/cg-1/Images/node/Versions/3.0.0"),
    ):
        estate.cloud.compute.set_scale_set_image(scale_set, image)
        assert estate.cloud.compute.get_scale_set_image(scale_set) == image


def test_scale_out_adds_count_instances_in_one_capacity_patch(estate: Estate) -> None:
    """Capacity 2 + 3: one PATCH of ``sku.capacity`` to 5, two instance lists, the operation's
    success reported to ``on_done``; the three new instances are named after their lowercased
    computer names, with providerID azure:// + their IDs, and Ready."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=2
    )
    scale_set = parse_scale_set_id(scale_set_id)
    since = time.monotonic()

    new, outcome = scale_out_and_wait(estate, scale_set, 3)

    assert outcome.succeeded
    assert len(new) == 3
    assert not set(new) & {"0", "1"}
    for instance_id in new:
        instance = estate.cloud.compute.get_instance(scale_set.instance(instance_id))
        assert instance.name == instance.computer_name.lower()
        assert instance.provider_id == "azure://" + instance.id
        assert instance.state is NodeState.READY
    updates = estate.emulator.requests.entries("VirtualMachineScaleSets.update", since=since)
    assert [entry.body for entry in updates] == [{"sku": {"capacity": 5}}]
    # scale_out's lists before its PATCH and once ARM accepted it, then the helper's own list
    assert estate.emulator.requests.count("VirtualMachineScaleSetVMs.list", since=since) == 3
    document = estate.emulator.state.render(scale_set_id)
    assert document is not None
    assert document["sku"]["capacity"] == 5


def test_scale_out_returns_before_its_operation_ends(estate: Estate) -> None:
    """With a 3 s operation, ``scale_out`` returns once ARM accepted the PATCH (the new
    instances already listed, still Creating) and ``on_done`` comes later, from the tracker."""
    scale_set = parse_scale_set_id(
        estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1)
    )
    estate.emulator.faults.slow_operations(3.0, "VirtualMachineScaleSets.update")
    ended = threading.Event()
    outcomes: list[OperationOutcome] = []

    def on_done(outcome: OperationOutcome) -> None:
        outcomes.append(outcome)
        ended.set()

    started = time.monotonic()
    accepted = estate.cloud.compute.scale_out(scale_set, 2, lambda _before: None, on_done)
    returned = time.monotonic() - started

    assert accepted.capacity == 3
    assert len(accepted.added) == 2  # listed while Creating
    assert "0" not in accepted.added
    assert not ended.is_set()
    assert returned < 3.0, f"scale_out waited {returned:.1f} s"
    assert len(estate.cloud.compute.list_instance_ids(scale_set)) == 3
    assert ended.wait(30)
    assert outcomes[0].succeeded
    assert outcomes[0].finished - outcomes[0].started >= 2.0


def test_a_failed_scale_out_operation_reaches_on_done_and_leaves_no_instance(estate: Estate) -> None:
    """The operation ends Failed: ``on_done`` gets its ARM error, and the instances it was
    creating are gone (ARM rolls the capacity back)."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1
    )
    scale_set = parse_scale_set_id(scale_set_id)
    estate.emulator.faults.fail_operation(
        "VirtualMachineScaleSets.update", code="AllocationFailed", message="No capacity", times=1
    )

    new, outcome = scale_out_and_wait(estate, scale_set, 2)

    assert outcome.error is not None
    assert outcome.error.code == "AllocationFailed"
    assert new == []
    assert estate.cloud.compute.list_instance_ids(scale_set) == ["0"]


def test_concurrent_scale_outs_each_raise_the_capacity(estate: Estate) -> None:
    """Three threads scale out the same scale set at once by one each: three PATCHes of three
    distinct capacities, and three new instances."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1
    )
    scale_set = parse_scale_set_id(scale_set_id)
    estate.emulator.faults.slow_operations(0.2, "VirtualMachineScaleSets.update")
    results: list[ScaleOutAccepted] = []
    errors: list[BaseException] = []
    ended = threading.Semaphore(0)

    def scale_out() -> None:
        try:
            results.append(
                estate.cloud.compute.scale_out(scale_set, 1, lambda _before: None, lambda _o: ended.release())
            )
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=scale_out) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(result.capacity for result in results) == [2, 3, 4]
    assert sorted(added for result in results for added in result.added) == ["1", "2", "3"]
    for _ in range(3):
        assert ended.acquire(timeout=30)
    assert sorted(estate.cloud.compute.list_instance_ids(scale_set), key=int) == ["0", "1", "2", "3"]


def test_slow_long_running_operation_is_awaited(estate: Estate) -> None:
    """A PATCH whose operation stays InProgress for a while returns only once it Succeeded."""
    scale_set_id = estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)
    scale_set = parse_scale_set_id(scale_set_id)
    estate.emulator.faults.slow_operations(0.6, "VirtualMachineScaleSets.update")
    image = ImageReference(publisher="p", offer="o", sku="s", version="1.0.0")
    started = time.monotonic()
    estate.cloud.compute.set_scale_set_image(scale_set, image)
    assert time.monotonic() - started >= 0.6
    assert estate.cloud.compute.get_scale_set_image(scale_set) == image
    document = estate.emulator.state.render(scale_set_id)
    assert document is not None
    assert document["properties"]["provisioningState"] == "Succeeded"


def test_failed_long_running_operation_raises(estate: Estate) -> None:
    """An LRO that ends Failed surfaces as CloudError with ARM's error code."""
    scale_set = parse_scale_set_id(
        estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)
    )
    estate.emulator.faults.fail_operation(
        "VirtualMachineScaleSets.update", code="AllocationFailed", message="x"
    )
    with pytest.raises(CloudError) as caught:
        estate.cloud.compute.set_scale_set_image(
            scale_set, ImageReference(publisher="p", offer="o", sku="s", version="1")
        )
    assert caught.value.code == "AllocationFailed"


def test_server_errors_go_back_to_the_caller_and_back_off_the_target(estate: Estate) -> None:
    """A 503 is not retried by azure-core (the work queue retries): one attempt, an error naming
    code and target; the target is refused without a request until its backoff ends."""
    scale_set = parse_scale_set_id(
        estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id)
    )
    estate.emulator.faults.server_error("VirtualMachineScaleSets.get", times=2, status=503)
    with pytest.raises(CloudError) as caught:
        estate.cloud.compute.get_scale_set_image(scale_set)
    assert caught.value.status_code == 503
    assert caught.value.log_fields()["target"] == str(scale_set)
    with pytest.raises(BackingOffError):
        estate.cloud.compute.get_scale_set_image(scale_set)
    statuses = [entry.status for entry in estate.emulator.requests.entries("VirtualMachineScaleSets.get")]
    assert statuses == [503]
    time.sleep(0.3)  # the clock: the target's first backoff ends
    with pytest.raises(CloudError):
        estate.cloud.compute.get_scale_set_image(scale_set)
    time.sleep(0.5)  # the clock: the target's second, longer backoff ends
    assert estate.cloud.compute.get_scale_set_image(scale_set) is not None
    statuses = [entry.status for entry in estate.emulator.requests.entries("VirtualMachineScaleSets.get")]
    assert statuses == [503, 503, 200]
    assert estate.counter.count(kind="request", outcome="503") == 2
    assert estate.counter.count(kind="call", operation="compute.get_scale_set", outcome="success") == 1


def test_delete_instance_then_state_is_terminated(estate: Estate) -> None:
    """Deleting an instance waits for the operation; afterwards its state is Terminated (404) and a
    second delete is a no-op."""
    scale_set = parse_scale_set_id(
        estate.emulator.estate.add_scale_set(GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=2)
    )
    instance = scale_set.instance("1")
    assert estate.cloud.compute.get_node_state(instance) is NodeState.READY
    estate.cloud.compute.delete_instance(instance)
    assert estate.cloud.compute.get_node_state(instance) is NodeState.TERMINATED
    assert estate.cloud.compute.list_instance_ids(scale_set) == ["0"]
    estate.cloud.compute.delete_instance(instance)


def test_delete_standalone_vm(estate: Estate) -> None:
    """A VM is deleted through the VM API; its state is then Terminated."""
    machine = parse_machine_id(
        estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    )
    estate.cloud.compute.delete_instance(machine)
    assert estate.cloud.compute.get_node_state(machine) is NodeState.TERMINATED


@pytest.mark.parametrize(
    ("power_state", "expected"),
    [
        pytest.param("running", NodeState.READY, id="running"),
        pytest.param("stopped", NodeState.STOPPED, id="stopped"),
        pytest.param("deallocated", NodeState.STOPPED, id="deallocated"),
        pytest.param("starting", NodeState.CREATING, id="starting"),
    ],
)
def test_node_state_from_instance_view(estate: Estate, power_state: str, expected: NodeState) -> None:
    """The instance view's power state maps to the node state, for instances and VMs alike."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1
    )
    vm_id = estate.emulator.estate.add_virtual_machine(GROUP, "vm-0", subnet_id=estate.subnet_id)
    instance = parse_scale_set_id(scale_set_id).instance("0")
    estate.emulator.state.set_power_state(str(instance), power_state)
    estate.emulator.state.set_power_state(vm_id, power_state)
    assert estate.cloud.compute.get_node_state(instance) is expected
    assert estate.cloud.compute.get_node_state(parse_machine_id(vm_id)) is expected


def test_failed_provisioning_is_failed(estate: Estate) -> None:
    """ProvisioningState Failed wins over a running power state."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1
    )
    instance = parse_scale_set_id(scale_set_id).instance("0")
    estate.emulator.state.set_provisioning_state(str(instance), "Failed")
    assert estate.cloud.compute.get_node_state(instance) is NodeState.FAILED
    assert estate.cloud.compute.get_instance(instance).state is NodeState.FAILED


def test_list_instances_and_instance_info(estate: Estate) -> None:
    """Listing returns every instance with name, providerID, state and image."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=2
    )
    instances = estate.cloud.compute.list_instances(parse_scale_set_id(scale_set_id))
    assert sorted(str(instance.instance_id) for instance in instances) == ["0", "1"]
    for instance in instances:
        assert instance.state is NodeState.READY
        assert instance.image is not None
        assert instance.provider_id.lower().startswith("azure:///subscriptions/")


def test_instance_lists_follow_every_page_with_instance_views(estate: Estate) -> None:
    """ARM pages a scale set's VM list: both readers follow nextLink to the last page, and the
    nextLink keeps ``$expand=instanceView``, so every instance on a later page still has its state."""
    estate.emulator.state.list_page_size = 2
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-paged", subnet_id=estate.subnet_id, capacity=5
    )
    scale_set = parse_scale_set_id(scale_set_id)
    since = time.monotonic()

    assert sorted(estate.cloud.compute.list_instance_ids(scale_set)) == ["0", "1", "2", "3", "4"]
    assert estate.emulator.requests.count("VirtualMachineScaleSetVMs.list", since=since) == 3
    instances = estate.cloud.compute.list_instances(scale_set)
    assert sorted(str(instance.instance_id) for instance in instances) == ["0", "1", "2", "3", "4"]
    assert {instance.state for instance in instances} == {NodeState.READY}
    assert estate.emulator.requests.count("VirtualMachineScaleSetVMs.list", since=since) == 6


def test_primary_network_interface_of_a_vm_and_a_scale_set_instance(estate: Estate) -> None:
    """The NIC a machine's model names as primary: the VM's own NIC, and the scale-set
    instance's NIC view; a machine that is gone is NotFound."""
    vm_id = estate.emulator.estate.add_virtual_machine(GROUP, "vm-nic", subnet_id=estate.subnet_id)
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-nic", subnet_id=estate.subnet_id, capacity=1
    )
    vm_nic = estate.cloud.compute.get_primary_network_interface(parse_machine_id(vm_id))
    assert estate.cloud.network.get_network_interface(vm_nic).id.lower() == vm_nic.lower()
    instance = estate.cloud.compute.list_instances(parse_scale_set_id(scale_set_id))[0]
    instance_nic = estate.cloud.compute.get_primary_network_interface(parse_provider_id(instance.provider_id))
    assert instance_nic.lower().startswith(f"{scale_set_id}/virtualMachines/{instance.instance_id}/".lower())
    assert estate.cloud.network.get_network_interface(instance_nic).ip_configurations
    with pytest.raises(NotFoundError):
        estate.cloud.compute.get_primary_network_interface(
            parse_machine_id(vm_id.replace("vm-nic", "vm-gone"))
        )


def test_scale_out_records_before_the_patch_and_lists_again_once_accepted(estate: Estate) -> None:
    """The caller's ``record_before`` gets the instance IDs the scale-out listed, before the
    capacity PATCH; the scale-out sends one more VM list once ARM accepted it, and returns the
    instance that list shows new (the caller needs no list of its own, before or after)."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=2
    )
    scale_set = parse_scale_set_id(scale_set_id)
    since = time.monotonic()
    recorded: list[tuple[list[str], int]] = []

    def record(before: list[str]) -> None:
        recorded.append((before, estate.emulator.requests.count("VirtualMachineScaleSets.update")))

    ended = threading.Event()
    accepted = estate.cloud.compute.scale_out(scale_set, 1, record, lambda _outcome: ended.set())

    assert recorded == [(["0", "1"], 0)]
    assert accepted.added == ("2",)
    assert estate.emulator.requests.count("VirtualMachineScaleSetVMs.list", since=since) == 2
    assert ended.wait(30)


def test_a_failed_record_stops_the_scale_out_before_it_starts(estate: Estate) -> None:
    """An exception from ``record_before`` (the record was not written) leaves the capacity as it was."""
    scale_set_id = estate.emulator.estate.add_scale_set(
        GROUP, "vmss-a", subnet_id=estate.subnet_id, capacity=1
    )

    def record(before: list[str]) -> None:
        raise RuntimeError(f"record of {before} lost")

    with pytest.raises(RuntimeError, match="record of"):
        estate.cloud.compute.scale_out(parse_scale_set_id(scale_set_id), 1, record, lambda _outcome: None)
    assert estate.emulator.requests.count("VirtualMachineScaleSets.update") == 0
    document = estate.emulator.state.render(scale_set_id)
    assert document is not None
    assert document["sku"]["capacity"] == 1


def test_listing_the_instances_of_a_missing_scale_set_is_not_found(estate: Estate) -> None:
    """The raw instance-ID list raises the translated ARM error as an SDK call would."""
    missing = parse_scale_set_id(
        f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/{GROUP}"
        "/providers/Microsoft.Compute/virtualMachineScaleSets/vmss-missing"
    )
    with pytest.raises(NotFoundError) as raised:
        estate.cloud.compute.list_instance_ids(missing)
    assert raised.value.code is not None
    assert "NotFound" in raised.value.code
