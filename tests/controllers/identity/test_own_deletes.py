"""The delete events of the AzureAssignedIdentities a pass released itself do not run that target's
pass again (which, with other pods still on it, would cost a GET of the scale set); a delete by
anyone else still does, and the object comes back. Real API server, emulated ARM."""

from __future__ import annotations

import time

from nodewright.api.aadpodidentity.v1 import ASSIGNED_STATUS_ASSIGNED
from nodewright.controllers.identity.options import AZURE_ASSIGNED_IDENTITY
from tests.controllers.identity.helpers import World
from tests.waiting import eventually

QUIET = 2.0
"""Seconds to watch for a pass after the release: four batch windows (0.5 s) and then some."""


def _assigned_by_pod(world: World) -> dict[str, tuple[str, str]]:
    return {a.spec.pod: (a.metadata.get("uid", ""), a.status.status) for a in world.assigned()}


def _gets(world: World, since: float) -> int:
    return len(world.emulator.requests.entries("VirtualMachineScaleSets.get", since=since))


def test_a_release_does_not_bring_its_target_back_but_a_foreign_delete_does(world: World) -> None:
    group = world.resource_group("own")
    web, api = world.identity(group, "web"), world.identity(group, "api")
    scale_set, node = world.one_node_pool(group)
    world.bound_identity("web", web)
    world.bound_identity("api", api)
    world.pod("web", node, "web")
    world.pod("api", node, "api")
    world.start_manager()
    eventually(
        lambda: (
            {pod: status for pod, (_, status) in _assigned_by_pod(world).items()}
            == {"web": ASSIGNED_STATUS_ASSIGNED, "api": ASSIGNED_STATUS_ASSIGNED}
        ),
        message="both Assigned",
    )

    mark = time.monotonic()
    world.delete_pod("web")
    eventually(lambda: set(_assigned_by_pod(world)) == {"api"}, message="web's object released")
    assert world.identities_on(scale_set) == {api.lower()}
    released = time.monotonic()
    time.sleep(QUIET)  # no pass may run: nothing to count; the foreign delete below is the control
    assert world.emulator.requests.entries("VirtualMachineScaleSets.update", since=mark), "the release"
    assert _gets(world, released) == 0, "the release's own delete event ran the pass again"

    # Someone else removes api's object (finalizer and all): that event must run the pass.
    (api_uid, _) = _assigned_by_pod(world)["api"]
    api_object = next(a for a in world.assigned() if a.spec.pod == "api")
    name, namespace = api_object.name, api_object.namespace
    world.client.patch(AZURE_ASSIGNED_IDENTITY, name, {"metadata": {"finalizers": None}}, namespace)
    world.client.delete(AZURE_ASSIGNED_IDENTITY, name, namespace)
    eventually(
        lambda: (
            (recreated := _assigned_by_pod(world).get("api")) is not None
            and recreated[0] != api_uid
            and recreated[1] == ASSIGNED_STATUS_ASSIGNED
        ),
        timeout=10,
        message="api's object recreated and Assigned after a foreign delete",
    )
    assert world.identities_on(scale_set) == {api.lower()}
