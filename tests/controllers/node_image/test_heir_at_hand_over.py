"""A heir that goes NotReady at the last moment, after its donor was drained and just before the
donor is handed to its Leave PendingNode (which deletes the machine without looking back). The
pass decided on its cache, which may not show the change yet, so the heir is read from the API
server once more right before the Leave is created. Against the real API server, kwok, the ARM
emulator and the node simulator; the order of what was written is read from watch histories."""

from __future__ import annotations

import threading

import pytest

from nodewright.api.nodewright.v1alpha1 import PendingNodeGoal
from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_image.grouping import HEIR_ANNOTATION
from nodewright.runtime.kube.kinds import NODE
from nodewright.runtime.kube.objects import condition_is_true as node_ready
from tests.controllers.node_image.histories import hand_overs, recording
from tests.controllers.node_image.support import RolloutBench

pytestmark = pytest.mark.slow

LEAVE = PendingNodeGoal.LEAVE.value


def test_a_heir_that_goes_not_ready_just_before_the_hand_over_keeps_its_donor(bench: RolloutBench) -> None:
    """The heir's machine stops while the reconcile is about to create the Leave: no Leave is
    created and the donor's machine lives on while the heir is NotReady; once the heir is Ready
    again the donor is handed over, and the watch histories show every hand-over with its heir
    Ready. On a reconciler that trusts its cache here, the Leave follows at once."""
    bench.add_scale_set("h", 1)
    bench.start_simulator()
    (donor,) = (n["metadata"]["name"] for n in bench.nodes())
    held: dict[str, str] = {}
    stopped = threading.Event()

    def stop_the_heir() -> None:
        """At the hand-over, stop the heir's machine and wait until the API server has it NotReady."""
        heir = bench.client.get(NODE, donor)["metadata"]["annotations"][HEIR_ANNOTATION]
        held["machine"] = str(parse_provider_id(bench.client.get(NODE, heir)["spec"]["providerID"]))
        bench.emulator.state.set_power_state(held["machine"], "stopped")
        bench.wait_for(lambda: not node_ready(bench.client.get(NODE, heir)), 10, "heir NotReady")
        stopped.set()

    bench.switch.pauses["create-leave"] = stop_the_heir
    with recording(bench) as (nodes, pending_nodes):
        bench.create_node_image(max_surge=1, canary=0)
        bench.create_scaling_group(bench.scale_sets[0])
        bench.start()
        assert stopped.wait(60), "the reconcile never reached the hand-over"
        with bench.watched(passes=3):  # passes that see the heir NotReady
            pass
        leaves = [r["metadata"]["name"] for _, r in pending_nodes.added if r["spec"]["goal"] == LEAVE]
        assert leaves == [], "donor handed over while its heir was NotReady"
        assert donor in {m["name"] for m in bench.live_machines()}
        bench.emulator.state.set_power_state(held["machine"], "running")
        bench.wait_for(lambda: donor not in {m["name"] for m in bench.live_machines()}, 60, "donor removed")
    assert hand_overs(nodes, pending_nodes, {donor}) == {donor: "Ready"}
