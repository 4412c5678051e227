"""Stale and duplicate Join PendingNodes (issue 33): a node that already served as a heir is never
paired again, whatever a Join says; such a Join is listed as stale (reported and deleted), and
the PendingNode reconciler never acts on it. Pure: grouping, pairing and the PendingNode decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodewright.api.nodewright.v1alpha1 import PendingNode, PendingNodeGoal, PendingNodeSpec
from nodewright.cloud.models import ImageReference, NodeState
from nodewright.controllers.node_image.grouping import (
    DONOR_ANNOTATION,
    HEIR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    OBSOLETE_ANNOTATION,
    SCALING_GROUP_ANNOTATION,
    SERVED_AS_HEIR_ANNOTATION,
    ClusterNode,
    RolloutTimeouts,
    extra_nodes,
    group_nodes,
    settled_joins,
    stale_joins,
)
from nodewright.controllers.node_image.pairing import pair_nodes
from nodewright.controllers.node_image.pending_node_decisions import PendingNodeAction, decide_pending_node

GROUP = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/user"
OLD = "/communityGalleries/gallery-1/images/node/versions/1.0.0"
NEW = "/communityGalleries/gallery-1/images/node/versions/2.0.0"
DESIRED = ImageReference.parse(NEW)
NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


def node(
    name: str,
    image: str = OLD,
    *,
    donor: str = "",
    heir: str = "",
    served: str = "",
    obsolete: bool = False,
) -> ClusterNode:
    """A Ready node of the user pool; ``served``: the donor its served-as-heir mark names."""
    annotations = {SCALING_GROUP_ANNOTATION: GROUP, NODE_IMAGE_ANNOTATION: image}
    marks = {DONOR_ANNOTATION: donor, HEIR_ANNOTATION: heir, SERVED_AS_HEIR_ANNOTATION: served}
    annotations |= {key: value for key, value in marks.items() if value}
    if obsolete:
        annotations[OBSOLETE_ANNOTATION] = "true"
    return ClusterNode(
        name=name, provider_id=f"azure://{GROUP}/virtualMachines/{name}", annotations=annotations, ready=True
    )


def join(name: str, deadline: datetime | None = None) -> PendingNode:
    return PendingNode(
        metadata={"name": name, "uid": f"uid-{name}"},
        spec=PendingNodeSpec(
            provider_id=f"azure://{GROUP}/virtualMachines/{name}",
            group_id=GROUP,
            node_name=name,
            goal=PendingNodeGoal.JOIN,
            deadline=None if deadline is None else deadline.isoformat().replace("+00:00", "Z"),
        ),
    )


# ---- the story, step by step ------------------------------------------------------------

# (nodes, expected group of "h", pairs made, unneeded mints)
REPLAYS = [
    pytest.param(
        [node("d1", heir="h"), node("h", NEW, donor="d1", served="d1"), node("d2")],
        "heirs",
        [],
        [],
        id="heir-of-a-donor-still-there",
    ),
    pytest.param(
        [node("h", NEW, served="d1"), node("d2")],
        "up_to_date",
        [],
        [],
        id="heir-whose-donor-left-with-another-donor-outdated",
    ),
    pytest.param(
        [node("h", NEW, served="d1")], "up_to_date", [], [], id="heir-whose-donor-left-nothing-outdated"
    ),
    pytest.param(
        [node("h", OLD, served="d1"), node("x", NEW)],
        "outdated",
        [],
        [],
        id="heir-on-an-image-no-longer-desired-is-replaced-not-obsolete",
    ),
    pytest.param(
        [node("d1", heir="h"), node("h", NEW, donor="d1"), node("d2")],
        "heirs",
        [],
        [],
        id="heir-paired-before-the-mark-existed",
    ),
]


@pytest.mark.parametrize(("nodes", "group", "pairs", "unneeded"), REPLAYS)
def test_a_join_naming_a_node_that_served_as_heir_is_stale_and_changes_nothing(
    nodes: list[ClusterNode], group: str, pairs: list[tuple[str, str]], unneeded: list[str]
) -> None:
    """A replayed Join for heir ``h`` at any step of its replacement leaves ``h`` where it was
    (never a mint, never obsolete), pairs nothing new, takes no surge, and is listed as stale."""
    pending = [join("h")]
    groups = group_nodes(nodes, pending, DESIRED)
    assert "h" in [n.name for n in getattr(groups, group)]
    assert not groups.mints
    assert not groups.obsolete
    plan = pair_nodes(groups)
    assert [(p.donor.name, p.heir.name) for p in plan.to_annotate] == pairs
    assert [m.node.name for m in plan.unneeded_mints] == unneeded
    assert extra_nodes(groups, pending) == len(groups.heirs)
    assert [(s.pending_node.name, s.node.name) for s in stale_joins(groups, pending)] == [("h", "h")]
    assert settled_joins(groups, pending) == []


@pytest.mark.parametrize(
    ("nodes", "pairs", "clear_donor"),
    [
        pytest.param(
            [node("d1"), node("h", NEW, donor="d1", served="d1")],
            [("d1", "h")],
            [],
            id="half-written-pair-with-its-own-donor-is-completed",
        ),
        pytest.param(
            [node("d2"), node("h", NEW, donor="d2", served="d1")],
            [],
            ["h"],
            id="heir-whose-donor-annotation-names-another-donor-than-its-mark-is-released",
        ),
    ],
)
def test_a_heir_is_paired_only_with_the_donor_its_mark_names(
    nodes: list[ClusterNode], pairs: list[tuple[str, str]], clear_donor: list[str]
) -> None:
    """Completing a half-written pair never gives a heir a second donor."""
    plan = pair_nodes(group_nodes(nodes, [], DESIRED))
    assert [(p.donor.name, p.heir.name) for p in plan.to_annotate] == pairs
    assert [n.name for n in plan.clear_donor_annotation] == clear_donor


def test_a_mint_carrying_the_mark_is_neither_paired_nor_obsolete() -> None:
    """``pair_nodes`` keeps the rule even for groups it did not get from ``group_nodes``."""
    groups = group_nodes([node("m", NEW), node("d")], [join("m")], DESIRED)
    marked = node("m", NEW, served="d0")
    groups.mints = [type(groups.mints[0])(node=marked, pending_node=groups.mints[0].pending_node)]
    plan = pair_nodes(groups)
    assert plan.to_annotate == []
    assert plan.unneeded_mints == []


@pytest.mark.parametrize(
    "state", [NodeState.STOPPED, NodeState.FAILED, NodeState.CREATING, NodeState.TERMINATED], ids=str
)
def test_the_pending_node_reconciler_never_acts_on_a_stale_join(state: NodeState) -> None:
    """A stale Join past its deadline, or whose heir's machine is stopped, failed or gone, is left
    for the NodeImage reconciler to delete: giving it up would delete the heir's machine."""
    for deadline in (NOW - timedelta(minutes=5), NOW + timedelta(minutes=5)):
        decision = decide_pending_node(
            join("h", deadline),
            state,
            node_exists=True,
            now=NOW,
            timeouts=RolloutTimeouts(),
            node_served_as_heir=True,
        )
        assert (decision.action, decision.reason) == (PendingNodeAction.WAIT, "StaleJoin")
    fresh = decide_pending_node(
        join("h", NOW - timedelta(minutes=5)),
        NodeState.STOPPED,
        node_exists=True,
        now=NOW,
        timeouts=RolloutTimeouts(),
    )
    assert fresh.action is PendingNodeAction.GIVE_UP_JOIN
