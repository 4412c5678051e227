"""The heir identity gate: table tests of what a heir's machine must hold (pure), and against the
real API server, the ARM emulator and the node simulator the donor's drain waiting for it. The
test plays the identity reconciler: it publishes the AzureAssignedIdentity (status Created, then
Assigned on the scale set) that the identity-assignment reconciler would write."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.api.aadpodidentity.v1 import (
    AzureAssignedIdentity,
    AzureAssignedIdentitySpec,
    AzureIdentitySpec,
    EmbeddedAzureIdentity,
    IdentityType,
)
from nodewright.controllers.node_image.grouping import DONOR_ANNOTATION
from nodewright.controllers.node_image.heir_identity import heir_identities_missing
from nodewright.controllers.node_image.options import parse_options
from nodewright.controllers.node_image.resources import AZURE_ASSIGNED_IDENTITY
from nodewright.runtime.kube.kinds import NODE, POD
from nodewright.runtime.process.config import ConfigError
from tests.controllers.node_image.support import RolloutBench

IDENTITY = (
    "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/app"
)
OTHER = IDENTITY.replace("/app", "/other")
SCALE_SET = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool"
VM = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/heir"


def assigned(
    node: str,
    resource_id: str = IDENTITY,
    *,
    status: str = "Assigned",
    target: str = SCALE_SET,
    identity_type: IdentityType = IdentityType.USER_ASSIGNED_MSI,
    pod: str = "app-1",
    namespace: str = "default",
) -> dict[str, Any]:
    """An AzureAssignedIdentity as the identity reconciler publishes it."""
    identity = EmbeddedAzureIdentity(
        metadata={"name": resource_id.rsplit("/", 1)[-1], "namespace": "default"},
        spec=AzureIdentitySpec(
            type=identity_type, resource_id=resource_id, client_id="c-" + resource_id[-3:]
        ),
    )
    obj = AzureAssignedIdentity(
        metadata={
            "name": f"{pod}-{namespace}-{identity.name}",
            "namespace": namespace,
            "labels": {"nodename": node},
        },
        spec=AzureAssignedIdentitySpec(
            azure_identity_ref=identity, pod=pod, pod_namespace=namespace, node_name=node
        ),
    ).to_object()
    obj["status"] = {"status": status, "target": target.lower()}
    return obj


@pytest.mark.parametrize(
    ("objects", "heir_target", "missing"),
    [
        pytest.param([], SCALE_SET, [], id="donor-pods-use-no-identity"),
        pytest.param([assigned("donor")], SCALE_SET, [], id="assigned-on-the-shared-scale-set"),
        pytest.param(
            [assigned("donor", status="Created")], SCALE_SET, [IDENTITY.lower()], id="not-assigned-yet"
        ),
        pytest.param([assigned("donor")], VM, [IDENTITY.lower()], id="vm-heir-without-it"),
        pytest.param(
            [assigned("donor"), assigned("heir", IDENTITY.upper(), target=VM, pod="app-2")],
            VM,
            [],
            id="vm-heir-holds-it-case-insensitively",
        ),
        pytest.param(
            [assigned("donor"), assigned("donor", OTHER, pod="app-3"), assigned("heir", target=VM, pod="x")],
            VM,
            [OTHER.lower()],
            id="one-of-two-missing",
        ),
        pytest.param(
            [assigned("donor", identity_type=IdentityType.SERVICE_PRINCIPAL)],
            VM,
            [],
            id="service-principals-need-nothing-on-the-machine",
        ),
    ],
)
def test_the_heir_must_hold_every_identity_of_the_donors_pods(
    objects: list[dict[str, Any]], heir_target: str, missing: list[str]
) -> None:
    assert heir_identities_missing(objects, donor="donor", heir_target=heir_target) == missing


def test_the_identity_gate_is_on_by_default_and_can_be_turned_off() -> None:
    assert parse_options({}).heir_identity_gate is True
    assert parse_options({"heirIdentityGate": False}).heir_identity_gate is False
    with pytest.raises(ConfigError, match="heirIdentityGate"):
        parse_options({"heirIdentityGate": "yes"})


@pytest.mark.slow
def test_the_donor_waits_for_its_heirs_identities(bench: RolloutBench) -> None:
    """The donor's pod uses an identity whose AzureAssignedIdentity is still Created: the donor
    keeps serving (not cordoned, Progressing WaitingForHeirIdentities); once it says Assigned on
    the scale set the heir belongs to, the donor is cordoned, drained and replaced."""
    scale_set = bench.add_scale_set("i", 1)
    bench.start_simulator()
    (donor,) = [n["metadata"]["name"] for n in bench.nodes()]
    pod = {"nodeName": donor, "containers": [{"name": "c", "image": "busybox"}]}
    bench.client.create(POD, {"metadata": {"name": "app-1", "namespace": bench.namespace}, "spec": pod})
    body = assigned(donor, status="Created", target=scale_set, namespace=bench.namespace)
    status = body.pop("status")
    created = bench.create(AZURE_ASSIGNED_IDENTITY, body)
    bench.client.update_status(AZURE_ASSIGNED_IDENTITY, {**created, "status": status})
    bench.create_node_image()
    bench.create_scaling_group(scale_set)
    bench.start()

    def heir() -> str | None:
        for node in bench.nodes():
            if (node["metadata"].get("annotations") or {}).get(DONOR_ANNOTATION):
                return str(node["metadata"]["name"])
        return None

    bench.wait_for(heir, 60, "a heir paired with the donor")
    bench.wait_for(
        lambda: bench.condition(kind="Progressing") == ("True", "WaitingForHeirIdentities"), 30, "waiting"
    )
    with bench.watched(passes=3):  # passes that wait for the heir's identity
        pass
    assert not bench.client.get(NODE, donor)["spec"].get("unschedulable"), (
        "donor cordoned before the identity"
    )
    assert bench.condition(kind="Progressing") == ("True", "WaitingForHeirIdentities")

    current = bench.client.get(AZURE_ASSIGNED_IDENTITY, created["metadata"]["name"], bench.namespace)
    bench.client.update_status(
        AZURE_ASSIGNED_IDENTITY, {**current, "status": {**status, "status": "Assigned"}}
    )
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "rollout finished")
    assert donor not in {n["metadata"]["name"] for n in bench.nodes()}


def _publish(bench: RolloutBench, body: dict[str, Any]) -> dict[str, Any]:
    """Create an AzureAssignedIdentity and write its status, as the identity reconciler does."""
    status = body.pop("status")
    created = bench.create(AZURE_ASSIGNED_IDENTITY, body)
    return bench.client.update_status(AZURE_ASSIGNED_IDENTITY, {**created, "status": status})


def _flexible_donor_with_identity(bench: RolloutBench) -> tuple[str, str]:
    """A Flexible scale set of one member whose pod's identity is Assigned on the member's VM."""
    scale_set = bench.add_scale_set("x", 1, orchestration_mode="Flexible")
    bench.start_simulator()
    (node,) = bench.nodes()
    donor = node["metadata"]["name"]
    vm = node["spec"]["providerID"].removeprefix("azure://")
    pod = {"nodeName": donor, "containers": [{"name": "c", "image": "busybox"}]}
    bench.client.create(POD, {"metadata": {"name": "app-1", "namespace": bench.namespace}, "spec": pod})
    _publish(bench, assigned(donor, target=vm, namespace=bench.namespace))
    return scale_set, donor


def _heir_of(bench: RolloutBench) -> dict[str, Any] | None:
    for node in bench.nodes():
        if (node["metadata"].get("annotations") or {}).get(DONOR_ANNOTATION):
            return node
    return None


@pytest.mark.slow
def test_a_vm_heir_gets_the_identity_before_its_donor_drains(bench: RolloutBench) -> None:
    """A Flexible member's heir is a VM of its own: the donor waits until the heir's VM holds the
    identity (Assigned there), then drains; no HeirIdentitiesMissing Event."""
    scale_set, donor = _flexible_donor_with_identity(bench)
    name = bench.create_node_image(heirReadyTimeout="5m")
    bench.create_scaling_group(scale_set)
    bench.start()
    heir = bench.wait_for(lambda: _heir_of(bench), 60, "a heir paired with the donor")
    bench.wait_for(
        lambda: bench.condition(kind="Progressing") == ("True", "WaitingForHeirIdentities"), 30, "waiting"
    )
    with bench.watched(passes=3):  # passes that wait for the heir VM's identity
        pass
    assert not bench.client.get(NODE, donor)["spec"].get("unschedulable"), (
        "donor cordoned before the identity"
    )
    heir_vm = heir["spec"]["providerID"].removeprefix("azure://")
    _publish(
        bench, assigned(heir["metadata"]["name"], target=heir_vm, pod="agent", namespace=bench.namespace)
    )
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "rollout finished")
    assert not bench.events(name, "HeirIdentitiesMissing")


@pytest.mark.slow
def test_a_vm_heir_without_the_identity_is_waited_for_then_the_donor_goes_on(bench: RolloutBench) -> None:
    """Nothing puts the identity on the heir's VM: the donor waits heirReadyTimeout after the heir
    registered, then is drained with a Warning Event naming the missing identity."""
    scale_set, donor = _flexible_donor_with_identity(bench)
    name = bench.create_node_image(heirReadyTimeout="15s")
    bench.create_scaling_group(scale_set)
    bench.start()
    heir = bench.wait_for(lambda: _heir_of(bench), 60, "a heir paired with the donor")
    bench.wait_for(
        lambda: bench.condition(kind="Progressing") == ("True", "WaitingForHeirIdentities"), 30, "waiting"
    )
    assert not bench.client.get(NODE, donor)["spec"].get("unschedulable")
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 90, "rollout finished")
    (event,) = bench.events(name, "HeirIdentitiesMissing")
    assert IDENTITY.lower() in event["message"]
    assert heir["metadata"]["name"] in event["message"]
