"""Claims on a scale set, enforced where the writing happens, against the real API server, the ARM
emulator and the node simulator: two NodeImages whose ScalingGroups name one scale set, created
in every order (a second apart, in the same second either way, during the holder's rollout, and
after the holder is deleted). The loser writes nothing to the scale set (counted from the
emulator's request log) and its status names the NodeImage and ScalingGroup holding the claim.

The identity and IP-pool reconcilers are not rollout owners and do not take the claim: their writes
touch other fields (the identity block; a NIC's IP configurations) and carry If-Match, so they
cannot undo a rollout's model write nor be undone by it. The last two tests run those writes and
a rollout's on one scale set at once and show that neither loses the other's change.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodewright.api.nodewright.v1alpha1 import PendingNodeGoal, ScalingGroup
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.request_log import RecordedRequest
from nodewright.cloud.models import ImageReference
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import parse_scale_set_id
from nodewright.controllers.node_image.resources import SCALING_GROUP
from nodewright.controllers.node_image.targeting import claim_holder, claim_scaling_groups
from tests.cloud.helpers import cloud_for
from tests.controllers.node_image.support import NEW_IMAGE, OLD_IMAGE, RESOURCE_GROUP, RolloutBench

THIEF_IMAGE = "/CommunityGalleries/nodewright-test/images/node/versions/3.0.0"
WRITES = frozenset({"PUT", "PATCH", "POST", "DELETE"})


def _scale_set_writes(bench: RolloutBench, scale_set: str, since: float) -> list[RecordedRequest]:
    """Every write the emulator answered to the scale set or one of its instances since ``since``."""
    path = "/virtualMachineScaleSets/" + scale_set.rsplit("/", 1)[-1]
    return [
        entry
        for entry in bench.emulator.requests.entries(path_contains=path, since=since)
        if entry.method in WRITES
    ]


def _create_group(bench: RolloutBench, name: str, scale_set: str, node_image: str) -> dict[str, Any]:
    spec = {"groupID": scale_set, "nodeImage": node_image, "role": "Worker"}
    return bench.create(SCALING_GROUP, {"metadata": {"name": name}, "spec": spec})


def _image_applied(bench: RolloutBench, name: str) -> tuple[str, str, str]:
    """The ScalingGroup's ImageApplied condition: status, reason, message."""
    status = bench.client.get(SCALING_GROUP, name).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "ImageApplied":
            return condition["status"], condition["reason"], condition["message"]
    return "", "", ""


def _conflict(bench: RolloutBench, node_image: str) -> tuple[str, str, str]:
    for condition in bench.node_image(node_image).status.conditions:
        if condition.type == "Conflict":
            return condition.status, condition.reason, condition.message
    return "", "", ""


def _event_count(bench: RolloutBench, involved: str, reason: str) -> int:
    return sum(int(event.get("count") or 1) for event in bench.events(involved, reason))


def _start_of_a_second() -> None:
    """Sleep until just after the next wall-clock second begins (the API server shares the clock)."""
    time.sleep(1.05 - time.time() % 1)  # the clock: the start of the next second


def _model_image(bench: RolloutBench, scale_set: str) -> str:
    image = bench.cloud.compute.get_scale_set_image(parse_scale_set_id(scale_set))
    return image.format() if image is not None else ""


def _wait_for_loss(bench: RolloutBench, loser: str, holder: str, keep: str, thief: str) -> None:
    """Both of the loser's reconcilers ran and said who holds the claim (a failure lists the
    scale set's writes so far)."""
    try:
        bench.wait_for(lambda: _image_applied(bench, loser)[1] == "ClaimedByOther", 30, "loser refused")
    except AssertionError as error:
        scale_set = str(bench.client.get(SCALING_GROUP, loser)["spec"]["groupID"])
        writes = [(e.method, e.body) for e in _scale_set_writes(bench, scale_set, 0.0)]
        raise AssertionError(f"{error}; writes to the scale set: {writes}") from error
    message = _image_applied(bench, loser)[2]
    assert f"NodeImage {keep} (ScalingGroup {holder}" in message, message
    bench.wait_for(lambda: _conflict(bench, thief)[0] == "True", 30, "thief's Conflict")
    _, reason, message = _conflict(bench, thief)
    assert reason == "ScaleSetClaimed"
    assert f"NodeImage {keep} (ScalingGroup {holder}" in message, message


@pytest.mark.slow
@pytest.mark.parametrize(
    "order",
    ["holder-a-second-earlier", "same-second-holder-first", "same-second-loser-first"],
)
def test_the_loser_of_a_claimed_scale_set_writes_nothing(bench: RolloutBench, order: str) -> None:
    """NodeImage keep (on the scale set's own image, so it has nothing to write) and NodeImage
    thief (a new image) each get a ScalingGroup naming one scale set, created while the manager
    runs. A second apart, the older holds it although its name sorts last; in the same second the
    name decides, also when the holder is created after the loser, which was alone for a moment.
    The loser makes no write to the scale set, and both its ScalingGroup and its NodeImage name the
    holder, with one Warning Event each."""
    scale_set = bench.add_scale_set("vmss", 1)
    bench.start_simulator()
    keep = bench.create_node_image(OLD_IMAGE, name=f"keep-{bench.suffix}")
    thief = bench.create_node_image(NEW_IMAGE, name=f"thief-{bench.suffix}")
    bench.start()
    since = time.monotonic()
    if order == "holder-a-second-earlier":
        holder, loser = f"zz-{bench.suffix}", f"aa-{bench.suffix}"
        first = _create_group(bench, holder, scale_set, keep)
        _start_of_a_second()
        second = _create_group(bench, loser, scale_set, thief)
        assert first["metadata"]["creationTimestamp"] < second["metadata"]["creationTimestamp"]
    else:
        holder, loser = f"aa-{bench.suffix}", f"zz-{bench.suffix}"
        created: list[Callable[[], dict[str, Any]]] = [
            lambda: _create_group(bench, holder, scale_set, keep),
            lambda: _create_group(bench, loser, scale_set, thief),
        ]
        if order == "same-second-loser-first":
            created.reverse()
        _start_of_a_second()
        first = created[0]()
        time.sleep(0.5)  # the first one's reconcilers see it alone, within the same second
        second = created[1]()
        assert first["metadata"]["creationTimestamp"] == second["metadata"]["creationTimestamp"]

    _wait_for_loss(bench, loser, holder, keep, thief)
    bench.wait_for(lambda: _image_applied(bench, holder)[0] == "True", 30, "holder applied its image")
    assert _scale_set_writes(bench, scale_set, since) == []
    bench.wait_for(lambda: bench.condition(keep) == ("True", "AllNodesUpToDate"), 30, "keep up to date")
    assert _scale_set_writes(bench, scale_set, since) == []
    assert _model_image(bench, scale_set) == OLD_IMAGE
    assert bench.node_image(thief).status.total_nodes == 0
    assert _event_count(bench, loser, "ClaimedByOther") == 1
    assert _event_count(bench, thief, "ScaleSetClaimed") == 1


@pytest.mark.slow
def test_a_scaling_group_created_during_a_rollout_takes_nothing(bench: RolloutBench) -> None:
    """While keep rolls its scale set to the new image, thief names the same scale set: keep's
    rollout finishes on its own image, and no write of thief's (no model PATCH naming its image, no
    scale-out, no machine on its image) reaches the scale set."""
    scale_set = bench.add_scale_set("vmss", 2)
    bench.start_simulator(join_delay=1.0)
    keep = bench.create_node_image(NEW_IMAGE, name=f"keep-{bench.suffix}", soakDuration="6s")
    holder = _create_group(bench, f"keep-{bench.suffix}", scale_set, keep)["metadata"]["name"]
    bench.start()
    bench.wait_for(
        lambda: any(p.spec.goal is PendingNodeGoal.JOIN for p in bench.pending_nodes()),
        60,
        "keep's first scale-out",
    )
    since = time.monotonic()
    thief = bench.create_node_image(THIEF_IMAGE, name=f"thief-{bench.suffix}")
    loser = _create_group(bench, f"thief-{bench.suffix}", scale_set, thief)["metadata"]["name"]
    assert bench.condition(keep) != ("True", "AllNodesUpToDate"), "the rollout was over already"

    _wait_for_loss(bench, loser, holder, keep, thief)
    bench.wait_for(lambda: bench.condition(keep) == ("True", "AllNodesUpToDate"), 150, "keep rolled")
    thief_writes = [e for e in _scale_set_writes(bench, scale_set, since) if "3.0.0" in str(e.body)]
    assert thief_writes == []
    assert _model_image(bench, scale_set) == NEW_IMAGE
    images = {str(m["image"].get("communityGalleryImageId")) for m in bench.live_machines()}
    assert images == {NEW_IMAGE}
    assert bench.events(thief, "ScaledOut") == []
    assert _event_count(bench, loser, "ClaimedByOther") == 1


@pytest.mark.slow
def test_the_next_scaling_group_takes_the_claim_when_the_holder_goes(bench: RolloutBench) -> None:
    """keep holds the scale set, thief waits without writing; once keep's ScalingGroup is deleted,
    thief's takes the claim at once (well before the 30 s resync) and rolls the scale set."""
    scale_set = bench.add_scale_set("vmss", 1)
    bench.start_simulator()
    keep = bench.create_node_image(OLD_IMAGE, name=f"keep-{bench.suffix}")
    thief = bench.create_node_image(NEW_IMAGE, name=f"thief-{bench.suffix}")
    bench.start()
    since = time.monotonic()
    holder = _create_group(bench, f"zz-{bench.suffix}", scale_set, keep)["metadata"]["name"]
    _start_of_a_second()
    loser = _create_group(bench, f"aa-{bench.suffix}", scale_set, thief)["metadata"]["name"]
    _wait_for_loss(bench, loser, holder, keep, thief)
    bench.wait_for(lambda: _image_applied(bench, holder)[0] == "True", 30, "holder applied its image")
    assert _scale_set_writes(bench, scale_set, since) == []

    bench.client.delete(SCALING_GROUP, holder)
    bench.wait_for(lambda: _image_applied(bench, loser)[0] == "True", 15, "the next one took the claim")
    assert _model_image(bench, scale_set) == NEW_IMAGE
    bench.wait_for(lambda: _conflict(bench, thief)[0] == "False", 15, "thief's Conflict cleared")
    bench.wait_for(lambda: bench.condition(thief) == ("True", "AllNodesUpToDate"), 120, "thief rolled")


def _group(name: str, node_image: str, created: str) -> ScalingGroup:
    return ScalingGroup.from_object(
        {
            "apiVersion": "nodewright.io/v1alpha1",
            "kind": "ScalingGroup",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"groupID": SCALE_SET, "nodeImage": node_image},
        }
    )


SCALE_SET = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss-user"


def test_one_order_decides_the_claim_and_it_counts_once_settled() -> None:
    """Created in the same second, the name decides, for every reader: zz (created first, alone for
    a moment) loses to aa. The holder's claim counts only from 2 s after its timestamp; before, its
    NodeImage acts on nothing and is told when to look again, and the loser is a Conflict at once."""
    zz = _group("zz", "thief", "2026-11-30T10:00:00Z")
    aa = _group("aa", "keep", "2026-11-30T10:00:00Z")
    assert claim_holder([zz], SCALE_SET.upper()) is zz
    assert claim_holder([zz, aa], SCALE_SET) is aa
    assert claim_holder([aa, zz], SCALE_SET) is aa
    settles = datetime(2026, 11, 30, 10, 0, 2, tzinfo=UTC)
    early = claim_scaling_groups([zz, aa], "keep", now=settles - timedelta(milliseconds=1))
    assert (early.scaling_groups, early.settles_at) == ([], settles)
    settled = claim_scaling_groups([zz, aa], "keep", now=settles)
    assert ([g.name for g in settled.scaling_groups], settled.settles_at) == (["aa"], None)
    loser = claim_scaling_groups([zz, aa], "thief", now=settles - timedelta(seconds=1))
    assert loser.scaling_groups == []
    assert loser.conflicts == [
        f"ScalingGroup zz: scale set {SCALE_SET} is claimed by NodeImage keep "
        "(ScalingGroup aa, the oldest naming it)"
    ]
    older = _group("zz-older", "thief", "2026-11-30T09:59:59Z")
    assert claim_holder([aa, older], SCALE_SET) is older


def _run_together(*loops: Callable[[], None]) -> None:
    """Run each loop on its own thread, started at once; re-raise the first failure."""
    barrier = threading.Barrier(len(loops))
    failures: list[BaseException] = []

    def run(loop: Callable[[], None]) -> None:
        barrier.wait()
        try:
            loop()
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=run, args=(loop,)) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if failures:
        raise failures[0]


ROUNDS = 12


def _setter(event: threading.Event) -> Callable[[OperationOutcome], None]:
    """An ``on_done`` that sets ``event``."""
    return lambda _outcome: event.set()


def _rollout_model_writes(arm_emulator: ArmEmulator, scale_set: str) -> Callable[[], None]:
    """What the ScalingGroup and NodeImage reconcilers write to a scale set: model images (the
    last one ``…/1.0.<ROUNDS-1>``) and one capacity step."""

    def loop() -> None:
        with contextlib.closing(cloud_for(arm_emulator)) as cloud:
            target = parse_scale_set_id(scale_set)
            for index in range(ROUNDS):
                image = f"/CommunityGalleries/nodewright-test/images/node/versions/1.0.{index}"
                cloud.compute.set_scale_set_image(target, ImageReference.parse(image))
                if index == ROUNDS // 2:
                    ended = threading.Event()
                    cloud.compute.scale_out(target, 1, lambda _ids: None, _setter(ended))
                    assert ended.wait(30), "the capacity step never ended"

    return loop


def test_identity_writes_and_a_rollouts_model_writes_on_one_scale_set_lose_nothing(
    arm_emulator: ArmEmulator,
) -> None:
    """The identity reconciler's PATCHes (identity block only, If-Match) and a rollout's model image
    and capacity PATCHes on the same scale set at once: every identity and the last image land,
    no identity PATCH carries a model, and no model PATCH carries an identity block."""
    estate = arm_emulator.estate
    estate.add_resource_group(RESOURCE_GROUP)
    subnet = estate.add_virtual_network(RESOURCE_GROUP, "vnet-claims", subnets={"n": "10.9.0.0/16"})
    scale_set = estate.add_scale_set(
        RESOURCE_GROUP, "vmss-identity-claims", subnet_id=subnet + "/subnets/n", capacity=1
    )
    identities = [estate.add_identity(RESOURCE_GROUP, f"claims-id-{index}") for index in range(ROUNDS)]
    since = time.monotonic()

    def identity_writes() -> None:
        with contextlib.closing(cloud_for(arm_emulator)) as cloud:
            for identity in identities:
                cloud.compute.update_identities(parse_scale_set_id(scale_set), add=[identity])

    _run_together(_rollout_model_writes(arm_emulator, scale_set), identity_writes)

    with contextlib.closing(cloud_for(arm_emulator)) as cloud:
        target = parse_scale_set_id(scale_set)
        landed = {i.lower() for i in cloud.compute.get_identities(target).user_assigned}
        image = cloud.compute.get_scale_set_image(target)
    assert landed == {i.lower() for i in identities}
    assert image is not None
    assert image.format().endswith(f"/1.0.{ROUNDS - 1}")
    patches = arm_emulator.requests.entries(method="PATCH", path_contains="vmss-identity-claims", since=since)
    identity_patches = [p for p in patches if "identity" in (p.body or {})]
    model_patches = [p for p in patches if "identity" not in (p.body or {})]
    assert len(model_patches) == ROUNDS + 1  # the images and one capacity step
    assert len(identity_patches) >= ROUNDS
    assert all(set(p.body) == {"identity"} and p.if_match for p in identity_patches)


def test_ip_configuration_writes_and_a_rollouts_model_writes_on_one_scale_set_lose_nothing(
    arm_emulator: ArmEmulator,
) -> None:
    """The IP-pool reconciler's writes to a Uniform instance (its NIC's IP configurations, a PUT
    of the instance with If-Match and no image) and a rollout's model image and capacity PATCHes
    on the same scale set at once: every IP configuration lands, the instance keeps its image and
    the model ends on the last image with the extra machine."""
    estate = arm_emulator.estate
    estate.add_resource_group(RESOURCE_GROUP)
    subnet = estate.add_virtual_network(RESOURCE_GROUP, "vnet-claims-ip", subnets={"n": "10.10.0.0/16"})
    scale_set = estate.add_scale_set(
        RESOURCE_GROUP,
        "vmss-ip-claims",
        subnet_id=subnet + "/subnets/n",
        capacity=1,
        image={"communityGalleryImageId": OLD_IMAGE},
    )
    target = parse_scale_set_id(scale_set)
    names = [f"pool-{index}" for index in range(ROUNDS)]
    since = time.monotonic()

    def address_writes() -> None:
        with contextlib.closing(cloud_for(arm_emulator)) as cloud:
            nic = cloud.compute.get_primary_network_interface(target.instance("0"))
            for name in names:
                cloud.network.add_secondary_ip_configurations(nic, [name])

    _run_together(_rollout_model_writes(arm_emulator, scale_set), address_writes)

    with contextlib.closing(cloud_for(arm_emulator)) as cloud:
        nic = cloud.network.get_network_interface(
            cloud.compute.get_primary_network_interface(target.instance("0"))
        )
        instance = cloud.compute.get_instance(target.instance("0"))
        image = cloud.compute.get_scale_set_image(target)
        instances = cloud.compute.list_instance_ids(target)
    assert set(names) <= {configuration.name for configuration in nic.ip_configurations}
    assert instance.image is not None
    assert instance.image.format() == OLD_IMAGE
    assert image is not None
    assert image.format().endswith(f"/1.0.{ROUNDS - 1}")
    assert len(instances) == 2
    puts = arm_emulator.requests.entries(method="PUT", path_contains="vmss-ip-claims", since=since)
    assert puts
    assert all(p.if_match for p in puts if p.status < 400)
    assert not any("imageReference" in str(p.body) for p in puts)
