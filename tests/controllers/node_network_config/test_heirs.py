"""``heirs.pairing_wait``, table-style: which new Nodes wait for their pairing before their first
sizing, and for how long. A Node a node image rollout created (named by a Join PendingNode, or an
instance the ScalingGroup's scale-out record does not list) waits until it carries the donor
annotation or its age passes the bound; every other Node waits for nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodewright.api.nodewright.v1alpha1 import DONOR_ANNOTATION, SCALE_OUT_ANNOTATION, ScaleOutRecord
from nodewright.controllers.node_network_config.heirs import pairing_wait

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SCALE_SET = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool"


def _node(age: float = 5.0, instance: str = "7", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    created = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": "pool000007", "creationTimestamp": created, "annotations": annotations or {}},
        "spec": {"providerID": f"azure://{SCALE_SET}/virtualMachines/{instance}"},
    }


def _join(name: str = "pool000007", goal: str = "Join") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeName": name, "goal": goal}}


def _group(before: list[str] | None, group_id: str = SCALE_SET.upper()) -> dict[str, Any]:
    record = None if before is None else ScaleOutRecord(frozenset(before), 1).render()
    annotations = {} if record is None else {SCALE_OUT_ANNOTATION: record}
    return {"metadata": {"name": "pool", "annotations": annotations or {}}, "spec": {"groupID": group_id}}


@pytest.mark.parametrize(
    ("node", "join", "groups", "wait"),
    [
        pytest.param(_node(), _join(), [], 55.0, id="named-by-a-join"),
        pytest.param(_node(), None, [_group(["0", "1"])], 55.0, id="not-in-the-scale-out-record"),
        pytest.param(_node(), None, [_group(["0", "7"])], 0.0, id="listed-before-the-scale-out"),
        pytest.param(_node(), None, [_group(None)], 0.0, id="no-scale-out-under-way"),
        pytest.param(_node(), None, [], 0.0, id="an-ordinary-new-node"),
        pytest.param(_node(), _join(goal="Leave"), [], 0.0, id="a-leave-is-no-join"),
        pytest.param(_node(annotations={DONOR_ANNOTATION: "old"}), _join(), [], 0.0, id="paired-already"),
        pytest.param(_node(age=61), _join(), [_group(["0"])], 0.0, id="past-the-bound"),
        pytest.param(_node(instance="x/y"), None, [_group(["0"])], 0.0, id="providerID-not-a-machine"),
    ],
)
def test_pairing_wait(
    node: dict[str, Any], join: dict[str, Any] | None, groups: list[dict[str, Any]], wait: float
) -> None:
    assert pairing_wait(node, join, groups, now=NOW, wait_seconds=60) == pytest.approx(wait)


def test_no_wait_when_turned_off_or_the_time_is_unknown() -> None:
    assert pairing_wait(_node(), _join(), [], now=NOW, wait_seconds=0) == 0.0
    assert pairing_wait(_node(), _join(), [], now=None, wait_seconds=60) == 0.0
