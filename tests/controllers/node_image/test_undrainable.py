"""Drain like AKS, against the real API server, the ARM emulator and the node simulator: a donor
whose pod a PodDisruptionBudget never lets go is, after the NodeImage's drainTimeout, quarantined
under ``Cordon`` (labelled, left cordoned, its heir released, the rollout goes on) or stops the
rollout under ``Fail`` (and under ``Cordon`` once maxBlockedNodes is used up). The pod is never
forced off. Budget status is written by the test (no disruption controller runs here)."""

from __future__ import annotations

import pytest

from nodewright.api.nodewright.v1alpha1 import QUARANTINE_LABEL
from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.runtime.kube.kinds import NODE, POD, POD_DISRUPTION_BUDGET
from tests.controllers.node_image.invariants import assert_complete_means_whole
from tests.controllers.node_image.support import RolloutBench, wait_for_budget_computed

pytestmark = pytest.mark.slow


def _guard(bench: RolloutBench, node: str) -> None:
    bench.client.create(
        POD,
        {
            "metadata": {"name": "guarded", "namespace": bench.namespace, "labels": {"app": "guarded"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    bench.client.create(
        POD_DISRUPTION_BUDGET,
        {
            "metadata": {"name": "guarded", "namespace": bench.namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    wait_for_budget_computed(bench, "guarded", healthy=1)  # so disruptionsAllowed is 0


def test_cordon_quarantines_the_undrainable_donor_and_goes_on(bench: RolloutBench) -> None:
    """Cordon: after drainTimeout the donor is labelled Quarantined, stays cordoned with its pod,
    its heir is released, the rollout replaces the rest, a Warning Event names the node; the
    rollout is Quarantined (Degraded NodesQuarantined), not Complete, until a human removes the
    quarantined machine."""
    bench.add_scale_set("q", 1)
    bench.start_simulator()
    (donor,) = [n["metadata"]["name"] for n in bench.nodes()]
    _guard(bench, donor)
    name = bench.create_node_image(drainTimeout="3s", undrainableNodeBehavior="Cordon", maxBlockedNodes=1)
    bench.create_scaling_group(bench.scale_sets[0])
    bench.start()
    bench.wait_for(
        lambda: bench.client.get(NODE, donor)["metadata"]["labels"].get(QUARANTINE_LABEL) == "Quarantined",
        90,
        "donor quarantined",
    )
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "rollout finished")
    node = bench.client.get(NODE, donor)
    assert node["spec"].get("unschedulable") is True
    assert not bench.client.get(POD, "guarded", bench.namespace)["metadata"].get("deletionTimestamp")
    assert bench.events(name, "NodeQuarantined")
    assert len(bench.nodes()) == 2, "the quarantined donor stays beside its released heir"
    bench.wait_for(lambda: bench.node_image().status.rollout_state == "Quarantined", 20, "Quarantined")
    assert bench.condition(kind="Degraded")[:2] == ("True", "NodesQuarantined")
    # A human takes the quarantined machine out: the pool is whole again, and the rollout Complete.
    bench.cloud.compute.delete_instance(parse_provider_id(node["spec"]["providerID"]))
    bench.wait_for(lambda: donor not in {n["metadata"]["name"] for n in bench.nodes()}, 30, "donor Node gone")
    bench.wait_for(lambda: bench.node_image().status.rollout_state == "Complete", 30, "Complete")
    assert_complete_means_whole(bench)


def test_fail_stops_the_rollout_and_forces_nothing(bench: RolloutBench) -> None:
    """Fail: after drainTimeout the rollout is Failed (DrainTimeout) with a Warning Event; the
    donor keeps its pod and machine; no other node is replaced."""
    bench.add_scale_set("f", 2)
    bench.start_simulator()
    donors = sorted(n["metadata"]["name"] for n in bench.nodes())
    _guard(bench, donors[0])
    name = bench.create_node_image(drainTimeout="3s", undrainableNodeBehavior="Fail", canary=0)
    bench.create_scaling_group(bench.scale_sets[0])
    bench.start()
    bench.wait_for(lambda: bench.node_image().status.rollout_state == "Failed", 90, "rollout Failed")
    assert bench.condition(kind="Degraded")[1] == "DrainTimeout"
    bench.wait_for(lambda: bench.events(name, "DrainTimeout"), 10, "Warning Event")
    assert not bench.client.get(POD, "guarded", bench.namespace)["metadata"].get("deletionTimestamp")
    assert any(m["name"] == donors[0] for m in bench.live_machines())
