"""No stale plan is ever sent (issue 33, part 3): a pass that decided to remove an identity while
the writes class was held after a 429 must not send that removal once the hold ends, when a pod
created meanwhile needs the identity. Counted from the ARM emulator's request log."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from nodewright.api.aadpodidentity.v1 import ASSIGNED_STATUS_ASSIGNED
from nodewright.cloud.emulator import RecordedRequest
from tests.controllers.identity.helpers import World
from tests.waiting import eventually

HOLD_SECONDS = 12.0
"""The Retry-After of the 429 that starts the hold (the issue's was 20 s; shorter keeps the test
short, the semantics are the same: any hold longer than a pass is a stale-plan risk)."""


def removes(entry: RecordedRequest, identity_id: str) -> bool:
    """Whether an identity PATCH removed ``identity_id``: its delta maps it to null, or its type
    names no user-assigned identity at all (``None``, ``SystemAssigned``: every one removed)."""
    body: Any = entry.body or {}
    identity = body.get("identity") or {}
    if "userassigned" not in str(identity.get("type", "")).lower():
        return True
    delta = identity.get("userAssignedIdentities") or {}
    return any(key.lower() == identity_id.lower() and value is None for key, value in delta.items())


def test_a_removal_planned_during_a_hold_is_not_sent_after_it(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 (Retry-After 12 s) on another scale set's PATCH holds the writes class. During the
    hold the last pod using ``web`` on the user scale set goes, so a pass decides to remove
    ``web``; 2 s later a new pod that needs ``web`` is created on the same scale set. The held
    removal fails at once (the pass is requeued for the end of the hold) and the passes that
    follow decide again from what they read: no PATCH removes ``web`` while the new pod needs it,
    and the new pod is Assigned. Before, the removal slept through the hold in the calling thread
    and was sent 12 s late, and ``web`` came back a moment after."""
    group = world.resource_group("mc")
    web = world.identity(group, "web")
    trigger = world.identity(group, "trigger")
    user = world.scale_set(group, "user", capacity=2)
    other = world.scale_set(group, "other", capacity=1)
    world.start_nodes()
    user_nodes, (other_node,) = world.nodes_of(user), world.nodes_of(other)
    world.bound_identity("web", web)
    world.bound_identity("trigger", trigger)
    world.pod("web-a", user_nodes[0], "web")
    world.start_manager()
    eventually(lambda: web.lower() in world.identities_on(user), message="web on the user scale set")

    world.emulator.faults.throttle(
        "VirtualMachineScaleSets.update", path=f"*/{other.rsplit('/', 1)[-1]}", retry_after=HOLD_SECONDS
    )
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.control.controller"):
        world.pod("trigger", other_node, "trigger")
        throttled = eventually(
            lambda: [
                e
                for e in world.emulator.requests.entries("VirtualMachineScaleSets.update")
                if e.status == 429
            ],
            message="the other scale set's PATCH throttled",
        )[0]
        hold_ends = throttled.monotonic + HOLD_SECONDS
        world.delete_pod("web-a")
        time.sleep(2.0)  # the batch window (0.5 s) and the pass that decides to remove web
        world.pod("web-b", user_nodes[1], "web")
        needed_since = time.monotonic()
        assert needed_since < hold_ends - 5.0, "web-b must be created well within the hold"
        while time.monotonic() < hold_ends + 5.0:  # past the hold: a late removal would be in by now
            time.sleep(0.5)  # the clock: the hold runs out
        eventually(
            lambda: (
                {a.spec.pod: a.status.status for a in world.assigned()}.get("web-b")
                == ASSIGNED_STATUS_ASSIGNED
            ),
            message="web-b Assigned",
        )
        deferred = [
            record
            for record in caplog.records
            if record.getMessage() == "Reconcile deferred"
            and user.lower() in str(getattr(record, "nodewright_pairs", {}).get("target", "")).lower()
        ]

    user_writes = [
        entry
        for entry in world.emulator.requests.entries("VirtualMachineScaleSets.update", path_contains=user)
        if entry.status < 300
    ]
    removals_per_pod = {
        "web-b": sum(1 for entry in user_writes if entry.monotonic >= needed_since and removes(entry, web))
    }
    assert removals_per_pod == {"web-b": 0}, [(e.monotonic - needed_since, e.body) for e in user_writes]
    assert web.lower() in world.identities_on(user)
    # Not vacuous: the pass that would have removed web ran during the hold and was refused unsent.
    assert deferred, "the removal pass should have been refused by the hold"
