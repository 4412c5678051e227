"""Pure decisions of the node image rollout, table-tested (as constellation's TestGroupNodes):
grouping, budget, pairing, label copy, replacement steps, scale-out, drain planning, pending-node
deadlines, autoscaling, image references, status and conditions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from nodewright.api.meta import Condition
from nodewright.api.nodewright.v1alpha1 import (
    CloudNodeState,
    NodeRole,
    PendingNode,
    PendingNodeGoal,
    PendingNodeSpec,
    PendingNodeStatus,
    ScaleOutRecord,
    ScalingGroup,
    ScalingGroupSpec,
    ScalingGroupStatus,
)
from nodewright.cloud.models import ImageReference, NodeState
from nodewright.controllers.node_image import (
    autoscaling_decisions,
    draining,
    grouping,
    pairing,
    pending_node_decisions,
    scale_out,
)
from nodewright.controllers.node_image import conditions as decision_conditions
from nodewright.controllers.node_image.autoscaling_decisions import AutoscalingChange, decide_autoscaling
from nodewright.controllers.node_image.conditions import node_image_status, rollout_conditions
from nodewright.controllers.node_image.draining import (
    DrainPlan,
    PodKey,
    SkipReason,
    plan_drain,
    selector_matches,
)
from nodewright.controllers.node_image.grouping import (
    CONTROL_PLANE_LABEL,
    DONOR_ANNOTATION,
    DRAIN_STARTED_ANNOTATION,
    HEIR_ANNOTATION,
    MIRROR_POD_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    OBSOLETE_ANNOTATION,
    SCALING_GROUP_ANNOTATION,
    ClusterNode,
    InvalidImageError,
    NodeGroups,
    RolloutTimeouts,
    extra_nodes,
    group_nodes,
    new_node_budget,
    parse_desired_image,
    rollout_in_progress,
    same_image,
    settled_joins,
    stale_joins,
)
from nodewright.controllers.node_image.pairing import (
    ReplacementPair,
    ReplacementStep,
    is_reserved_label,
    labels_to_copy,
    nodes_to_restore,
    pair_nodes,
    replacement_step,
)
from nodewright.controllers.node_image.pending_node_decisions import (
    PendingNodeAction,
    cloud_state_of,
    decide_pending_node,
)
from nodewright.controllers.node_image.scale_out import ScaleOut, ScaleOutPlan, plan_scale_out

PREFIX = "/subscriptions/0000/resourceGroups/nodes-rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
WORKERS = PREFIX + "workers"
OTHERS = PREFIX + "others"
CONTROL = PREFIX + "control-plane"
OLD = "/communityGalleries/gallery-1/images/node/versions/1.0.0"
NEW = "/communityGalleries/gallery-1/images/node/versions/2.0.0"
DESIRED = ImageReference.parse(NEW)
NOW = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
TIMEOUTS = RolloutTimeouts()


def node(
    name: str,
    *,
    group: str = WORKERS,
    image: str = OLD,
    provider_id: str | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
    **annotations: str,
) -> ClusterNode:
    """A node of ``group`` on ``image``; keyword annotations: donor=, heir=, obsolete=, drain=."""
    names = {
        "donor": DONOR_ANNOTATION,
        "heir": HEIR_ANNOTATION,
        "obsolete": OBSOLETE_ANNOTATION,
        "drain": DRAIN_STARTED_ANNOTATION,
    }
    all_annotations = {names[key]: value for key, value in annotations.items()}
    if group:
        all_annotations[SCALING_GROUP_ANNOTATION] = group
    if image:
        all_annotations[NODE_IMAGE_ANNOTATION] = image
    return ClusterNode(
        name=name,
        uid=f"uid-{name}",
        provider_id=f"azure://{group or WORKERS}/virtualMachines/{name}"
        if provider_id is None
        else provider_id,
        annotations=all_annotations,
        labels=dict(labels or {}),
        ready=ready,
        unschedulable=unschedulable,
    )


def pending(
    name: str,
    goal: PendingNodeGoal = PendingNodeGoal.JOIN,
    *,
    group: str = WORKERS,
    node_name: str | None = None,
    provider_id: str | None = None,
    deadline: datetime | None = None,
) -> PendingNode:
    return PendingNode(
        metadata={"name": name, "uid": f"uid-pending-{name}"},
        spec=PendingNodeSpec(
            provider_id=provider_id or f"azure://{group}/virtualMachines/{name}",
            group_id=group,
            node_name=name if node_name is None else node_name,
            goal=goal,
            deadline=None if deadline is None else deadline.isoformat().replace("+00:00", "Z"),
        ),
        status=PendingNodeStatus(),
    )


def scaling_group(
    name: str, group_id: str, *, role: NodeRole = NodeRole.WORKER, image: str = NEW
) -> ScalingGroup:
    return ScalingGroup(
        metadata={"name": name},
        spec=ScalingGroupSpec(group_id=group_id, node_image="cluster", role=role),
        status=ScalingGroupStatus(image_reference=image),
    )


def names(nodes: Sequence[ClusterNode]) -> list[str]:
    return [n.name for n in nodes]


def grouped_names(groups: NodeGroups) -> dict[str, list[str]]:
    """The non-empty groups by name, for compact expectations."""
    result = {
        "outdated": names(groups.outdated),
        "up_to_date": names(groups.up_to_date),
        "donors": names(groups.donors),
        "heirs": names(groups.heirs),
        "mints": [m.node.name for m in groups.mints],
        "obsolete": names(groups.obsolete),
        "awaiting_annotation": names(groups.awaiting_annotation),
        "invalid": names(groups.invalid),
    }
    return {key: value for key, value in result.items() if value}


# ---- grouping -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "pending_nodes", "invalid", "expected"),
    [
        pytest.param([node("a")], [], (), {"outdated": ["a"]}, id="other-image-is-outdated"),
        pytest.param([node("a", image=NEW)], [], (), {"up_to_date": ["a"]}, id="desired-image-is-up-to-date"),
        pytest.param([node("a", heir="b")], [], (), {"donors": ["a"]}, id="outdated-with-heir-is-donor"),
        pytest.param(
            [node("b", image=NEW, donor="a")], [], (), {"heirs": ["b"]}, id="current-with-donor-is-heir"
        ),
        pytest.param(
            [node("m", image=NEW)], [pending("m")], (), {"mints": ["m"]}, id="named-by-join-is-mint"
        ),
        pytest.param(
            [node("m", image=NEW, provider_id="AZURE://" + WORKERS.upper() + "/virtualMachines/7")],
            [pending("other-name", provider_id="azure://" + WORKERS + "/virtualMachines/7", node_name="")],
            (),
            {"mints": ["m"]},
            id="join-matched-by-provider-id-case-insensitively",
        ),
        pytest.param(
            [node("m", image=NEW)],
            [pending("m", PendingNodeGoal.LEAVE)],
            (),
            {"up_to_date": ["m"]},
            id="leave-does-not-make-a-mint",
        ),
        pytest.param(
            [node("a", heir="b", obsolete="true"), node("b", image=NEW, obsolete="true")],
            [pending("b")],
            (),
            {"obsolete": ["a", "b"]},
            id="obsolete-wins-over-everything-else",
        ),
        pytest.param(
            [node("b", image="", donor="a"), node("c", group="", image=NEW)],
            [],
            (),
            {"awaiting_annotation": ["b", "c"]},
            id="missing-annotations-are-awaiting-not-heirs-or-up-to-date",
        ),
        pytest.param(
            [node("m", image="")],
            [pending("m")],
            (),
            {"awaiting_annotation": ["m"]},
            id="joining-node-without-image-awaits-annotation",
        ),
        pytest.param(
            [node("a", provider_id="", obsolete="true"), node("b", image=NEW)],
            [],
            ("b",),
            {"invalid": ["a", "b"]},
            id="no-provider-id-or-unplaceable-is-invalid",
        ),
        pytest.param(
            [node("a", image=NEW.replace("/communityGalleries/", "/CommunityGalleries/").upper())],
            [],
            (),
            {"up_to_date": ["a"]},
            id="image-compared-case-insensitively",
        ),
        pytest.param(
            [node("a", image="not an image")], [], (), {"outdated": ["a"]}, id="unparseable-image-is-outdated"
        ),
        pytest.param(
            [
                node("z-up", image=NEW),
                node("old-1"),
                node("old-2", heir="new-2"),
                node("new-2", image=NEW, donor="old-2"),
                node("new-3", image=NEW),
                node("spare", image=NEW, obsolete="true"),
                node("fresh", image=""),
                node("stray", provider_id=""),
            ],
            [pending("new-3"), pending("leaving", PendingNodeGoal.LEAVE)],
            (),
            {
                "outdated": ["old-1"],
                "up_to_date": ["z-up"],
                "donors": ["old-2"],
                "heirs": ["new-2"],
                "mints": ["new-3"],
                "obsolete": ["spare"],
                "awaiting_annotation": ["fresh"],
                "invalid": ["stray"],
            },
            id="mixed-cluster-every-node-in-exactly-one-group",
        ),
    ],
)
def test_group_nodes(
    nodes: list[ClusterNode],
    pending_nodes: list[PendingNode],
    invalid: tuple[str, ...],
    expected: dict[str, list[str]],
) -> None:
    """Each node lands in the group of the first rule it matches, lists sorted by name."""
    assert grouped_names(group_nodes(nodes, pending_nodes, DESIRED, invalid=invalid)) == expected


def test_group_nodes_matches_marketplace_images_case_insensitively() -> None:
    """publisher:offer:sku:version compares regardless of case, as ARM does."""
    desired = parse_desired_image("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:1.0.0")
    nodes = [
        node("same", image="canonical:0001-com-ubuntu-server-jammy:22_04-LTS-GEN2:1.0.0"),
        node("older", image="Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:0.9.0"),
    ]
    assert grouped_names(group_nodes(nodes, [], desired)) == {"outdated": ["older"], "up_to_date": ["same"]}


def test_cluster_node_reads_a_node_object() -> None:
    """ClusterNode takes name, providerID, annotations, labels, Ready and cordon from a Node."""
    obj: dict[str, Any] = {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "annotations": {DONOR_ANNOTATION: "n0"},
            "labels": {"a": "b"},
        },
        "spec": {"providerID": "azure:///x", "unschedulable": True},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]
        },
    }
    read = ClusterNode.from_object(obj)
    assert (read.name, read.uid, read.provider_id, read.donor, read.ready, read.unschedulable) == (
        "n1",
        "u1",
        "azure:///x",
        "n0",
        True,
        True,
    )
    assert not ClusterNode.from_object({"metadata": {"name": "bare"}}).ready


# ---- budget -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_surge", "nodes", "pending_nodes", "extra", "budget"),
    [
        pytest.param(1, [node("a")], [], 0, 1, id="nothing-extra-full-budget"),
        pytest.param(
            1, [node("a", heir="b"), node("b", image=NEW, donor="a")], [], 1, 0, id="heir-uses-surge"
        ),
        pytest.param(1, [node("a")], [pending("j")], 1, 0, id="join-without-node-uses-surge"),
        pytest.param(3, [node("a")], [pending("j")], 1, 2, id="max-surge-three"),
        pytest.param(
            2, [node("a"), node("m", image=NEW)], [pending("m")], 1, 1, id="mint-and-its-join-count-once"
        ),
        pytest.param(
            1, [node("a")], [pending("gone", PendingNodeGoal.LEAVE)], 0, 1, id="leaves-do-not-count"
        ),
        pytest.param(2, [node("a"), node("f", image="")], [], 1, 1, id="awaiting-annotation-counts"),
        pytest.param(2, [node("a"), node("o", image=NEW, obsolete="true")], [], 1, 1, id="obsolete-counts"),
        pytest.param(
            2,
            [node("a", heir="b"), node("b", image=NEW, donor="a")],
            [pending("b")],
            1,
            1,
            id="heir-with-leftover-join-counts-once",
        ),
        pytest.param(
            1,
            [node(n, image=NEW, donor="x") for n in ("h1", "h2", "h3")],
            [],
            3,
            0,
            id="budget-never-negative",
        ),
    ],
)
def test_budget(
    max_surge: int, nodes: list[ClusterNode], pending_nodes: list[PendingNode], extra: int, budget: int
) -> None:
    """budget = max(0, maxSurge - extra nodes); extra = heirs + mints + obsolete + awaiting + joins
    whose node has not registered, never counting one machine twice."""
    groups = group_nodes(nodes, pending_nodes, DESIRED)
    assert extra_nodes(groups, pending_nodes) == extra
    assert new_node_budget(max_surge, groups, pending_nodes) == budget


def test_settled_joins_are_the_ones_whose_node_is_no_longer_a_mint() -> None:
    """A join whose node came up on an image no longer desired makes it obsolete (removed, not
    replaced) and is done once the obsolete mark is written; one whose node became a heir is not
    settled but stale (reported, ``stale_joins``); joins still in flight are neither."""
    nodes = [
        node("heir", image=NEW, donor="x"),
        node("late", image=OLD),
        node("marked", image=OLD, obsolete="true"),
        node("mint", image=NEW),
    ]
    pending_nodes = [pending(n) for n in ("heir", "late", "marked", "mint", "flying")]
    groups = group_nodes(nodes, pending_nodes, DESIRED)
    assert [n.name for n in groups.obsolete] == ["late", "marked"]
    assert not groups.outdated
    assert [p.name for p in settled_joins(groups, pending_nodes)] == ["marked"]
    stale = stale_joins(groups, pending_nodes)
    assert [(s.pending_node.name, s.node.name) for s in stale] == [("heir", "heir")]


@pytest.mark.parametrize(
    ("nodes", "pending_nodes", "expected"),
    [
        pytest.param([node("a", image=NEW)], [], False, id="all-current"),
        pytest.param([node("a")], [], True, id="outdated"),
        pytest.param(
            [node("a", image=NEW)], [pending("x", PendingNodeGoal.LEAVE)], True, id="leave-in-flight"
        ),
        pytest.param([node("a", image="")], [], True, id="awaiting-annotation"),
        pytest.param([node("a", image=NEW, provider_id="")], [], False, id="invalid-alone-is-not-a-rollout"),
    ],
)
def test_rollout_in_progress(
    nodes: list[ClusterNode], pending_nodes: list[PendingNode], expected: bool
) -> None:
    """A rollout is in progress while any node is not settled or any PendingNode exists."""
    assert rollout_in_progress(group_nodes(nodes, pending_nodes, DESIRED), pending_nodes) is expected


# ---- pairing ------------------------------------------------------------------------------------


def _pairs(pairs: Sequence[ReplacementPair]) -> list[tuple[str, str]]:
    return [(p.donor.name, p.heir.name) for p in pairs]


def test_mint_pairs_with_outdated_node_of_the_same_group() -> None:
    """A mint takes the first outdated node (by name) of its scale set, compared case-insensitively,
    and carries its Join PendingNode so the reconciler deletes it."""
    nodes = [
        node("b-old"),
        node("a-old", group=OTHERS),
        node("c-old", group=WORKERS.upper()),
        node("m", image=NEW),
    ]
    groups = group_nodes(nodes, [pending("m")], DESIRED)
    plan = pair_nodes(groups)
    assert _pairs(plan.to_annotate) == [("b-old", "m")]
    assert plan.to_annotate[0].pending_node is not None
    assert plan.to_annotate[0].pending_node.name == "m"
    assert not plan.unneeded_mints


@pytest.mark.parametrize(
    ("nodes", "pending_nodes", "to_annotate", "unneeded"),
    [
        pytest.param(
            [node("old", group=OTHERS), node("m", image=NEW)],
            [pending("m")],
            [],
            ["m"],
            id="no-outdated-node-in-its-group",
        ),
        pytest.param(
            [node("old"), node("m1", image=NEW), node("m2", image=NEW)],
            [pending("m1"), pending("m2")],
            [("old", "m1")],
            ["m2"],
            id="more-mints-than-outdated",
        ),
        pytest.param(
            [node("o1"), node("o2"), node("m1", image=NEW), node("m2", image=NEW)],
            [pending("m1"), pending("m2")],
            [("o1", "m1"), ("o2", "m2")],
            [],
            id="each-outdated-node-gets-one-mint",
        ),
        pytest.param(
            [node("o1"), node("m", image=NEW)],
            [],
            [],
            [],
            id="new-node-without-join-is-not-a-mint",
        ),
    ],
)
def test_pairing_new_nodes(
    nodes: list[ClusterNode],
    pending_nodes: list[PendingNode],
    to_annotate: list[tuple[str, str]],
    unneeded: list[str],
) -> None:
    """Mints become heirs of outdated nodes in their group; a mint with no one to replace is unneeded."""
    plan = pair_nodes(group_nodes(nodes, pending_nodes, DESIRED))
    assert _pairs(plan.to_annotate) == to_annotate
    assert [m.node.name for m in plan.unneeded_mints] == unneeded


@pytest.mark.parametrize(
    ("nodes", "existing", "to_annotate", "clear_donor", "clear_heir"),
    [
        pytest.param(
            [node("d", heir="h"), node("h", image=NEW, donor="d")],
            [("d", "h")],
            [],
            [],
            [],
            id="pair-naming-each-other-is-kept",
        ),
        pytest.param(
            [node("h", image=NEW, donor="gone")], [], [], ["h"], [], id="heir-whose-donor-left-is-released"
        ),
        pytest.param([node("d", heir="gone")], [], [], [], ["d"], id="donor-whose-heir-vanished-is-released"),
        pytest.param(
            [node("d"), node("h", image=NEW, donor="d")],
            [],
            [("d", "h")],
            [],
            [],
            id="half-written-pair-is-completed",
        ),
        pytest.param(
            [node("d", group=OTHERS), node("h", image=NEW, donor="d")],
            [],
            [],
            ["h"],
            [],
            id="half-pair-across-groups-is-released",
        ),
        pytest.param(
            [node("d1", heir="h"), node("d2", heir="h"), node("h", image=NEW, donor="d2")],
            [("d2", "h")],
            [],
            [],
            ["d1"],
            id="donor-whose-heir-names-another-is-released",
        ),
    ],
)
def test_pairing_existing_annotations(
    nodes: list[ClusterNode],
    existing: list[tuple[str, str]],
    to_annotate: list[tuple[str, str]],
    clear_donor: list[str],
    clear_heir: list[str],
) -> None:
    """Existing pairs are matched by mutual annotations; half-written ones are completed and stale
    annotations released, so a restart between any two writes converges."""
    plan = pair_nodes(group_nodes(nodes, [], DESIRED))
    assert _pairs(plan.existing) == existing
    assert _pairs(plan.to_annotate) == to_annotate
    assert names(plan.clear_donor_annotation) == clear_donor
    assert names(plan.clear_heir_annotation) == clear_heir


@pytest.mark.parametrize(
    ("nodes", "pending_nodes", "restored"),
    [
        pytest.param([node("d", drain="x")], [], ["d"], id="outdated-left-cordoned-by-us"),
        pytest.param([node("d", image=NEW, heir="h")], [], ["d"], id="image-reverted-donor-keeps-heir-mark"),
        pytest.param([node("d", heir="h", drain="x")], [], [], id="donor-being-replaced-kept"),
        pytest.param([node("o", image=NEW, obsolete="true", drain="x")], [], [], id="obsolete-kept"),
        pytest.param(
            [node("d", drain="x")], [pending("d", PendingNodeGoal.LEAVE)], [], id="leaving-node-kept"
        ),
        pytest.param([node("a"), node("b", image=NEW)], [], [], id="unmarked-nodes-untouched"),
    ],
)
def test_nodes_to_restore(
    nodes: list[ClusterNode], pending_nodes: list[PendingNode], restored: list[str]
) -> None:
    """Marks of a replacement that will not happen are undone; replacements under way are not."""
    groups = group_nodes(nodes, pending_nodes, DESIRED)
    assert names(nodes_to_restore(groups, pending_nodes)) == restored


# ---- labels -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "reserved"),
    [
        pytest.param("kubernetes.io/hostname", True, id="kubernetes-io"),
        pytest.param("node-role.kubernetes.io/control-plane", True, id="subdomain-of-kubernetes-io"),
        pytest.param("topology.kubernetes.io/zone", True, id="topology"),
        pytest.param("beta.kubernetes.io/arch", True, id="beta"),
        pytest.param("k8s.io/anything", True, id="k8s-io"),
        pytest.param("kubelet.k8s.io", True, id="k8s-io-without-name"),
        pytest.param("kubernetes.io", True, id="bare-kubernetes-io"),
        pytest.param("example.com/team", False, id="custom-prefix"),
        pytest.param("team", False, id="no-prefix"),
        pytest.param("mykubernetes.io/x", False, id="lookalike-domain"),
        pytest.param("kubernetes.io.example.com/x", False, id="kubernetes-io-as-subdomain-of-other"),
    ],
)
def test_reserved_labels(key: str, reserved: bool) -> None:
    """Keys in kubernetes.io / k8s.io and their subdomains are reserved; look-alikes are not."""
    assert is_reserved_label(key) is reserved


@pytest.mark.parametrize(
    ("donor", "heir", "expected"),
    [
        pytest.param(
            {"team": "a", "kubernetes.io/hostname": "old"}, {}, {"team": "a"}, id="reserved-not-copied"
        ),
        pytest.param({"team": "a"}, {"team": "a"}, {}, id="equal-needs-nothing"),
        pytest.param({"team": "a"}, {"team": "b"}, {"team": "a"}, id="different-value-overwritten"),
        pytest.param({}, {"only-heir": "x"}, {}, id="heir-only-labels-kept"),
        pytest.param(
            {"node-role.kubernetes.io/worker": "", "example.com/pool": "gpu"},
            {"node-role.kubernetes.io/worker": ""},
            {"example.com/pool": "gpu"},
            id="mixed",
        ),
    ],
)
def test_labels_to_copy(donor: dict[str, str], heir: dict[str, str], expected: dict[str, str]) -> None:
    """The heir gets the donor's non-reserved labels it lacks or has with another value."""
    assert labels_to_copy(donor, heir) == expected


# ---- replacement steps --------------------------------------------------------------------------

DONE = DrainPlan()
NOT_DONE = DrainPlan(evict=[PodKey("default", "web-1")])


@pytest.mark.parametrize(
    ("donor", "heir", "drain", "step"),
    [
        pytest.param(
            node("d", labels={"team": "a"}),
            node("h", image=NEW),
            None,
            ReplacementStep.COPY_LABELS,
            id="labels-first",
        ),
        pytest.param(
            node("d"),
            node("h", image=NEW, ready=False),
            None,
            ReplacementStep.WAIT_FOR_HEIR_READY,
            id="heir-not-ready",
        ),
        pytest.param(node("d"), node("h", image=NEW), None, ReplacementStep.CORDON, id="cordon-donor"),
        pytest.param(
            node("d", unschedulable=True),
            node("h", image=NEW),
            None,
            ReplacementStep.DRAIN,
            id="drain-unplanned",
        ),
        pytest.param(
            node("d", unschedulable=True),
            node("h", image=NEW),
            NOT_DONE,
            ReplacementStep.DRAIN,
            id="drain-running",
        ),
        pytest.param(
            node("d", unschedulable=True),
            node("h", image=NEW),
            DONE,
            ReplacementStep.REMOVE,
            id="drained-remove",
        ),
        pytest.param(
            node("d", unschedulable=True),
            node("h", image=NEW, ready=False),
            DONE,
            ReplacementStep.WAIT_FOR_HEIR_READY,
            id="never-remove-before-heir-ready",
        ),
    ],
)
def test_replacement_step(
    donor: ClusterNode, heir: ClusterNode, drain: DrainPlan | None, step: ReplacementStep
) -> None:
    """Labels, then heir Ready, then cordon, drain and remove; heir readiness is checked every time."""
    assert replacement_step(ReplacementPair(donor=donor, heir=heir), drain) is step


# ---- scale-out ----------------------------------------------------------------------------------

STANDARD_GROUPS = [
    scaling_group("workers", WORKERS),
    scaling_group("others", OTHERS),
    scaling_group("control-plane", CONTROL, role=NodeRole.CONTROL_PLANE),
]


def _scale_out(
    nodes: list[ClusterNode],
    pending_nodes: list[PendingNode],
    budget: int,
    scaling_groups: list[ScalingGroup] | None = None,
    *,
    autoscaler_running: bool = False,
) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    groups = group_nodes(nodes, pending_nodes, DESIRED)
    plan = plan_scale_out(
        groups,
        pair_nodes(groups),
        pending_nodes,
        STANDARD_GROUPS if scaling_groups is None else scaling_groups,
        desired_image=DESIRED,
        budget=budget,
        autoscaler_running=autoscaler_running,
    )
    return (
        [(s.scaling_group, s.count) for s in plan.scale_outs],
        [(b.group_id.rsplit("/", 1)[-1], b.reason) for b in plan.blockers],
    )


@pytest.mark.parametrize(
    ("nodes", "pending_nodes", "budget", "scale_outs", "blockers"),
    [
        pytest.param([node("a")], [], 1, [("workers", 1)], [], id="one-outdated-one-new"),
        pytest.param([node("a")], [], 0, [], [], id="no-budget-no-new"),
        pytest.param([node("a"), node("b")], [], 3, [("workers", 2)], [], id="capped-by-need"),
        pytest.param(
            [node("a"), node("b")], [pending("j")], 3, [("workers", 1)], [], id="joining-machine-covers-one"
        ),
        pytest.param(
            [node("a"), node("b", image=NEW, donor="x")],
            [],
            1,
            [("workers", 1)],
            [],
            id="heir-elsewhere-does-not-cover",
        ),
        pytest.param(
            [node("a"), node("m", image=NEW)],
            [pending("m")],
            1,
            [],
            [],
            id="outdated-paired-with-mint-needs-none",
        ),
        pytest.param(
            [*(node(f"w{i}") for i in range(3)), *(node(f"o{i}", group=OTHERS) for i in range(3))],
            [],
            3,
            [("others", 2), ("workers", 1)],
            [],
            id="worker-groups-share-round-robin",
        ),
        pytest.param(
            [node("c", group=CONTROL), node("w")],
            [],
            3,
            [("control-plane", 1)],
            [("workers", "WaitingForControlPlane")],
            id="control-plane-before-workers",
        ),
        pytest.param(
            [node(f"c{i}", group=CONTROL) for i in range(3)],
            [],
            3,
            [("control-plane", 1)],
            [],
            id="control-plane-one-at-a-time",
        ),
        pytest.param(
            [
                node("c1", group=CONTROL),
                node("c2", group=CONTROL, heir="h"),
                node("h", group=CONTROL, image=NEW, donor="c2"),
                node("w"),
            ],
            [],
            3,
            [],
            [("workers", "WaitingForControlPlane")],
            id="control-plane-in-flight-blocks-more",
        ),
        pytest.param(
            [node("c", group=CONTROL, image=NEW), node("w")],
            [],
            1,
            [("workers", 1)],
            [],
            id="workers-go-once-control-plane-is-current",
        ),
        pytest.param(
            [node("a", group=PREFIX + "unknown")],
            [],
            1,
            [],
            [("unknown", "ScalingGroupMissing")],
            id="missing-scaling-group-blocks",
        ),
        pytest.param(
            [node("c", group=PREFIX + "unknown-cp", labels={CONTROL_PLANE_LABEL: ""}), node("w")],
            [],
            2,
            [],
            [("unknown-cp", "ScalingGroupMissing"), ("workers", "WaitingForControlPlane")],
            id="role-from-label-when-scaling-group-missing",
        ),
    ],
)
def test_plan_scale_out(
    nodes: list[ClusterNode],
    pending_nodes: list[PendingNode],
    budget: int,
    scale_outs: list[tuple[str, int]],
    blockers: list[tuple[str, str]],
) -> None:
    """New machines go to scale sets with unreplaced outdated nodes, within the budget, control
    plane first and one at a time, workers round-robin."""
    assert _scale_out(nodes, pending_nodes, budget) == (scale_outs, blockers)


def test_scale_out_waits_for_the_scale_set_image() -> None:
    """A scale set whose model still names the old image gets no machines (they would be outdated)."""
    groups = [scaling_group("workers", WORKERS, image=OLD)]
    assert _scale_out([node("a")], [], 1, groups) == ([], [("workers", "ScalingGroupImageNotApplied")])
    assert _scale_out([node("a")], [], 1, [scaling_group("workers", WORKERS, image="")]) == (
        [],
        [("workers", "ScalingGroupImageNotApplied")],
    )


def test_scale_out_reports_a_scaling_group_that_failed_to_apply_the_image() -> None:
    """A ScalingGroup whose ImageApplied is False (its reconciler failed) is a problem, not a wait."""
    group = scaling_group("workers", WORKERS, image=OLD)
    group.metadata["generation"] = 2
    group.status.conditions = [
        Condition(
            type="ImageApplied",
            status="False",
            reason="ScaleSetNotFound",
            message="No scale set",
            last_transition_time="2026-11-29T16:00:00Z",
            observed_generation=2,
        )
    ]
    assert _scale_out([node("a")], [], 1, [group]) == ([], [("workers", "ScalingGroupFailed")])
    group.status.conditions[0].observed_generation = 1
    assert _scale_out([node("a")], [], 1, [group]) == ([], [("workers", "ScalingGroupImageNotApplied")])


def test_waiting_for_a_scaling_group_image_is_progress_not_degradation() -> None:
    """Before the ScalingGroup reconciler applied the image the rollout waits (Progressing True
    ScalingGroupImageNotApplied) and nothing is reported Degraded."""
    nodes = [node("a")]
    groups = group_nodes(nodes, [], DESIRED)
    plan = plan_scale_out(
        groups,
        pair_nodes(groups),
        [],
        [scaling_group("workers", WORKERS, image=OLD)],
        desired_image=DESIRED,
        budget=1,
    )
    conditions = {
        c.type: (c.status, c.reason) for c in rollout_conditions(groups, [], image=NEW, scale_out=plan)
    }
    assert conditions["Progressing"] == ("True", "ScalingGroupImageNotApplied")
    assert conditions["Degraded"] == ("False", "AsExpected")


def test_scale_out_waits_for_the_autoscaler_to_stop() -> None:
    """While the cluster autoscaler still runs, the rollout creates no machines (they would race)."""
    assert _scale_out([node("a")], [], 1, autoscaler_running=True) == ([], [("workers", "AutoscalerRunning")])


def test_a_scale_set_whose_scale_out_is_in_flight_gets_no_other() -> None:
    """Two machines of a capacity step still running count as joining for their scale set, which
    gets no second step beside it (ScaleOutInProgress, a wait); another scale set still gets its
    share of the budget."""
    nodes = [node("a"), node("b"), node("c"), node("d", group=OTHERS)]
    groups = group_nodes(nodes, [], DESIRED)
    plan = plan_scale_out(
        groups,
        pair_nodes(groups),
        [],
        STANDARD_GROUPS,
        desired_image=DESIRED,
        budget=3,
        in_progress={WORKERS.upper(): 2},
    )
    assert [(s.scaling_group, s.count) for s in plan.scale_outs] == [("others", 1)]
    assert [(b.group_id, b.reason) for b in plan.blockers] == [(WORKERS.lower(), "ScaleOutInProgress")]
    assert "2 new machines" in plan.blockers[0].message
    conditions = {
        c.type: (c.status, c.reason)
        for c in rollout_conditions(groups, [], image=NEW, scale_out=ScaleOutPlan(blockers=plan.blockers))
    }
    assert conditions["Progressing"] == ("True", "ScaleOutInProgress")
    assert conditions["Degraded"] == ("False", "AsExpected")


@pytest.mark.parametrize(
    ("value", "before", "count"),
    [
        pytest.param('{"before": ["0", "1"], "count": 3}', {"0", "1"}, 3, id="this-version"),
        pytest.param('["0", "1"]', {"0", "1"}, 1, id="one-machine-record-of-an-earlier-version"),
        pytest.param('{"before": "x", "count": -1}', set(), 0, id="wrong-types"),
        pytest.param("not json", set(), 0, id="unreadable"),
    ],
)
def test_scale_out_record_parse(value: str, before: set[str], count: int) -> None:
    """The ScalingGroup's scale-out record reads back as written; earlier or damaged ones read
    safely (unknown instances before, no machines counted as coming)."""
    record = ScaleOutRecord.parse(value)
    assert record == ScaleOutRecord(frozenset(before), count)
    assert record is not None
    assert ScaleOutRecord.parse(record.render()) == record
    assert ScaleOutRecord.parse(None) is None


def test_scale_out_names_the_scale_set_as_the_scaling_group_spells_it() -> None:
    """The ScaleOut carries the ScalingGroup's own groupID, not the node annotation's spelling."""
    groups = group_nodes([node("a", group=WORKERS.lower())], [], DESIRED)
    plan = plan_scale_out(groups, pair_nodes(groups), [], STANDARD_GROUPS, desired_image=DESIRED, budget=1)
    assert plan.scale_outs == [ScaleOut(WORKERS, "workers", 1)]


# ---- draining -----------------------------------------------------------------------------------


def pod(
    name: str,
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    owner: str | None = "ReplicaSet",
    phase: str = "Running",
    ready: bool = True,
    deletion: datetime | None = None,
    mirror: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "owner", "controller": True}]
    if deletion is not None:
        metadata["deletionTimestamp"] = deletion.isoformat().replace("+00:00", "Z")
    if mirror:
        metadata["annotations"] = {MIRROR_POD_ANNOTATION: "hash"}
    return {
        "metadata": metadata,
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pdb(
    name: str,
    allowed: int,
    *,
    namespace: str = "default",
    selector: Mapping[str, Any] | None = None,
    stale: bool = False,
    policy: str | None = None,
    healthy: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}} if selector is None else dict(selector)
    }
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    return {
        "metadata": {"name": name, "namespace": namespace, "generation": 2},
        "spec": spec,
        "status": {
            "disruptionsAllowed": allowed,
            "observedGeneration": 1 if stale else 2,
            "currentHealthy": healthy[0],
            "desiredHealthy": healthy[1],
        },
    }


WEB = {"app": "web"}


def _drain(pods: list[dict[str, Any]], budgets: list[dict[str, Any]]) -> DrainPlan:
    return plan_drain(pods, budgets, now=NOW, drain_started=NOW, timeout=TIMEOUTS.drain)


@pytest.mark.parametrize(
    ("pods", "budgets", "evict", "blocked", "terminating", "skipped"),
    [
        pytest.param([pod("a")], [], ["a"], [], [], {}, id="plain-pod-evicted"),
        pytest.param([pod("a", owner=None)], [], ["a"], [], [], {}, id="bare-pod-evicted"),
        pytest.param(
            [pod("ds", owner="DaemonSet")],
            [],
            [],
            [],
            [],
            {"ds": SkipReason.DAEMON_SET},
            id="daemonset-skipped",
        ),
        pytest.param(
            [pod("static", owner="Node", mirror=True)],
            [],
            [],
            [],
            [],
            {"static": SkipReason.MIRROR_POD},
            id="mirror-skipped",
        ),
        pytest.param(
            [pod("job", phase="Succeeded")],
            [],
            [],
            [],
            [],
            {"job": SkipReason.FINISHED},
            id="finished-skipped",
        ),
        pytest.param(
            [pod("going", deletion=NOW + timedelta(seconds=20))],
            [],
            [],
            [],
            ["going"],
            {},
            id="terminating-waited-for",
        ),
        pytest.param(
            [pod("stuck", deletion=NOW - timedelta(seconds=1))],
            [],
            [],
            [],
            [],
            {"stuck": SkipReason.TERMINATING},
            id="terminating-past-grace-skipped",
        ),
        pytest.param(
            [pod("w1", labels=WEB), pod("w2", labels=WEB)],
            [pdb("web", 1)],
            ["w1"],
            ["w2"],
            [],
            {},
            id="pdb-allows-one",
        ),
        pytest.param([pod("w1", labels=WEB)], [pdb("web", 0)], [], ["w1"], [], {}, id="pdb-allows-none"),
        pytest.param(
            [pod("w1", labels=WEB)],
            [pdb("web", 0, namespace="other")],
            ["w1"],
            [],
            [],
            {},
            id="pdb-other-namespace",
        ),
        pytest.param(
            [pod("w1", labels={"tier": "db"})],
            [
                pdb(
                    "db",
                    0,
                    selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]},
                )
            ],
            [],
            ["w1"],
            [],
            {},
            id="pdb-match-expressions",
        ),
        pytest.param(
            [pod("w1", labels=WEB)], [pdb("a", 5), pdb("b", 5)], [], ["w1"], [], {}, id="two-pdbs-refused"
        ),
        pytest.param(
            [pod("p", labels=WEB, phase="Pending")],
            [pdb("web", 0)],
            ["p"],
            [],
            [],
            {},
            id="pending-pod-ignores-pdb",
        ),
        pytest.param(
            [pod("sick", labels=WEB, ready=False)],
            [pdb("web", 0, policy="AlwaysAllow")],
            ["sick"],
            [],
            [],
            {},
            id="unhealthy-always-allow",
        ),
        pytest.param(
            [pod("sick", labels=WEB, ready=False)],
            [pdb("web", 0, healthy=(3, 2))],
            ["sick"],
            [],
            [],
            {},
            id="unhealthy-with-enough-healthy",
        ),
        pytest.param(
            [pod("sick", labels=WEB, ready=False)],
            [pdb("web", 0, healthy=(2, 2))],
            ["sick"],
            [],
            [],
            {},
            id="unhealthy-at-desired-healthy",
        ),
        pytest.param(
            [pod("sick", labels=WEB, ready=False)],
            [pdb("web", 0, healthy=(1, 2))],
            [],
            ["sick"],
            [],
            {},
            id="unhealthy-below-desired-healthy",
        ),
        pytest.param(
            [pod("w1", labels=WEB)],
            [pdb("web", 3, stale=True)],
            [],
            ["w1"],
            [],
            {},
            id="stale-pdb-status-waits",
        ),
        pytest.param(
            [pod("w1", labels=WEB)],
            [pdb("web", 0, selector={})],
            [],
            ["w1"],
            [],
            {},
            id="empty-selector-covers-all",
        ),
    ],
)
def test_plan_drain(
    *,
    pods: list[dict[str, Any]],
    budgets: list[dict[str, Any]],
    evict: list[str],
    blocked: list[str],
    terminating: list[str],
    skipped: dict[str, SkipReason],
) -> None:
    """Evict what the Eviction API would allow now; skip DaemonSet, mirror, finished and expired
    terminating pods; wait for pods within their grace period and for budgets."""
    plan = _drain(pods, budgets)
    assert [k.name for k in plan.evict] == evict
    assert [k.name for k in plan.blocked] == blocked
    assert [k.name for k in plan.terminating] == terminating
    assert {k.name: reason for k, reason in plan.skipped.items()} == skipped
    assert plan.done is (not evict and not blocked and not terminating)


def test_blocked_pods_name_their_budget() -> None:
    """The reason a pod waits names the PodDisruptionBudget, for the Event a human reads."""
    plan = _drain([pod("w1", labels=WEB)], [pdb("web", 0)])
    assert plan.blocked == {PodKey("default", "w1"): "PodDisruptionBudget web allows no disruption now"}


@pytest.mark.parametrize(
    ("started", "pods", "stuck"),
    [
        pytest.param(
            NOW - timedelta(minutes=11), [pod("w1", labels=WEB)], True, id="blocked-past-timeout-is-stuck"
        ),
        pytest.param(NOW - timedelta(minutes=9), [pod("w1", labels=WEB)], False, id="blocked-within-timeout"),
        pytest.param(
            NOW - timedelta(hours=1), [pod("ds", owner="DaemonSet")], False, id="done-is-never-stuck"
        ),
        pytest.param(None, [pod("w1", labels=WEB)], False, id="unknown-start-is-not-stuck"),
    ],
)
def test_drain_stuck_after_timeout(started: datetime | None, pods: list[dict[str, Any]], stuck: bool) -> None:
    """A drain not done ``timeout`` after it started is reported stuck (never forced)."""
    plan = plan_drain(pods, [pdb("web", 0)], now=NOW, drain_started=started, timeout=timedelta(minutes=10))
    assert plan.stuck is stuck


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param(None, {"a": "b"}, False, id="null-matches-nothing"),
        pytest.param({}, {"a": "b"}, True, id="empty-matches-everything"),
        pytest.param({"matchLabels": {"a": "b"}}, {"a": "b", "c": "d"}, True, id="labels-subset"),
        pytest.param({"matchLabels": {"a": "x"}}, {"a": "b"}, False, id="labels-differ"),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]},
            {},
            True,
            id="not-in-absent",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]},
            {"a": "b"},
            False,
            id="not-in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True, id="exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]},
            {"a": ""},
            False,
            id="does-not-exist",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            {"a": "2"},
            False,
            id="unknown-operator",
        ),
    ],
)
def test_selector_matches(selector: dict[str, Any] | None, labels: dict[str, str], matches: bool) -> None:
    """Label selectors behave as metav1.LabelSelector does for PodDisruptionBudgets."""
    assert selector_matches(selector, labels) is matches


# ---- pending nodes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("goal", "deadline", "state", "node_exists", "action", "reached", "new_deadline", "requeue"),
    [
        pytest.param(
            PendingNodeGoal.JOIN, NOW + timedelta(minutes=10), NodeState.CREATING, False,
            PendingNodeAction.WAIT, False, None, TIMEOUTS.poll, id="join-creating-polls",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, NOW + timedelta(seconds=5), NodeState.CREATING, False,
            PendingNodeAction.WAIT, False, None, timedelta(seconds=5), id="join-wakes-at-deadline",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, NOW + timedelta(minutes=10), NodeState.READY, True,
            PendingNodeAction.WAIT, True, None, None, id="join-reached-when-ready-and-registered",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, NOW + timedelta(minutes=10), NodeState.READY, False,
            PendingNodeAction.WAIT, False, None, TIMEOUTS.poll, id="join-ready-but-not-registered",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, NOW - timedelta(seconds=1), NodeState.CREATING, False,
            PendingNodeAction.GIVE_UP_JOIN, False, NOW + timedelta(minutes=1), None,
            id="join-past-deadline-becomes-leave",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, NOW - timedelta(seconds=1), NodeState.READY, True,
            PendingNodeAction.WAIT, True, None, None, id="join-reached-late-is-kept",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, NOW + timedelta(minutes=10), NodeState.FAILED, False,
            PendingNodeAction.GIVE_UP_JOIN, False, NOW + timedelta(minutes=1), None,
            id="join-failed-gives-up-now",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, NOW + timedelta(minutes=10), NodeState.TERMINATED, False,
            PendingNodeAction.DELETE_RECORD, False, None, None, id="join-machine-gone-ends-record",
        ),
        pytest.param(
            PendingNodeGoal.JOIN, None, NodeState.CREATING, False,
            PendingNodeAction.WAIT, False, None, TIMEOUTS.poll, id="join-without-deadline-polls",
        ),
        pytest.param(
            PendingNodeGoal.LEAVE, NOW + timedelta(seconds=30), NodeState.TERMINATED, False,
            PendingNodeAction.DELETE_RECORD, True, None, None, id="leave-reached-ends-record",
        ),
        pytest.param(
            PendingNodeGoal.LEAVE, NOW + timedelta(seconds=30), NodeState.TERMINATING, False,
            PendingNodeAction.WAIT, False, None, TIMEOUTS.poll, id="leave-terminating-waits",
        ),
        pytest.param(
            PendingNodeGoal.LEAVE, NOW + timedelta(seconds=30), NodeState.READY, False,
            PendingNodeAction.DELETE_MACHINE, False, None, TIMEOUTS.poll, id="leave-machine-alive-is-deleted",
        ),
        pytest.param(
            PendingNodeGoal.LEAVE, NOW - timedelta(seconds=1), NodeState.TERMINATING, False,
            PendingNodeAction.DELETE_MACHINE, False, NOW + timedelta(minutes=1), timedelta(minutes=1),
            id="leave-past-deadline-deletes-again",
        ),
        pytest.param(
            PendingNodeGoal.LEAVE, NOW + timedelta(seconds=30), NodeState.UNKNOWN, False,
            PendingNodeAction.WAIT, False, None, TIMEOUTS.poll, id="leave-unknown-waits",
        ),
    ],
)  # fmt: skip
def test_decide_pending_node(
    *,
    goal: PendingNodeGoal,
    deadline: datetime | None,
    state: NodeState,
    node_exists: bool,
    action: PendingNodeAction,
    reached: bool,
    new_deadline: datetime | None,
    requeue: timedelta | None,
) -> None:
    """Joins wait for Ready-and-registered until the deadline, then are deleted and become leaves;
    leaves end at Terminated and re-request deletion past their deadline."""
    decision = decide_pending_node(
        pending("n", goal, deadline=deadline), state, node_exists=node_exists, now=NOW, timeouts=TIMEOUTS
    )
    assert decision.action is action
    assert decision.reached_goal is reached
    assert decision.deadline == new_deadline
    assert decision.requeue_after == requeue
    assert decision.cloud_state is CloudNodeState(state.value)


def test_pending_node_timeouts_are_configurable() -> None:
    """A shorter leave timeout gives a join that timed out a shorter leave deadline."""
    timeouts = RolloutTimeouts(join=timedelta(minutes=5), leave=timedelta(seconds=20))
    decision = decide_pending_node(
        pending("n", deadline=NOW), NodeState.CREATING, node_exists=False, now=NOW, timeouts=timeouts
    )
    assert (decision.action, decision.deadline) == (
        PendingNodeAction.GIVE_UP_JOIN,
        NOW + timedelta(seconds=20),
    )
    assert RolloutTimeouts().join == timedelta(minutes=30)
    assert RolloutTimeouts().leave == timedelta(minutes=1)


@pytest.mark.parametrize("state", list(NodeState), ids=lambda s: s.value)
def test_cloud_state_of_every_node_state(state: NodeState) -> None:
    """Every cloud node state has a cspState of the same name."""
    assert cloud_state_of(state).value == state.value


# ---- autoscaling --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_enabled", "remembered", "in_progress", "change"),
    [
        pytest.param(
            True, None, True, AutoscalingChange(False, True), id="rollout-starts-turns-off-remembers-on"
        ),
        pytest.param(False, None, True, AutoscalingChange(False, False), id="rollout-starts-remembers-off"),
        pytest.param(False, True, True, None, id="during-rollout-nothing-to-do"),
        pytest.param(
            True, False, True, AutoscalingChange(False, True), id="turned-on-during-rollout-is-remembered"
        ),
        pytest.param(False, True, False, AutoscalingChange(True, None), id="rollout-over-restores-on"),
        pytest.param(False, False, False, AutoscalingChange(False, None), id="rollout-over-restores-off"),
        pytest.param(True, None, False, None, id="no-rollout-no-change"),
        pytest.param(False, None, False, None, id="user-off-stays-off"),
    ],
)
def test_decide_autoscaling(
    spec_enabled: bool, remembered: bool | None, in_progress: bool, change: AutoscalingChange | None
) -> None:
    """Autoscaling is off during a rollout and restored to what it was before, not forced on."""
    assert decide_autoscaling(spec_enabled, remembered, in_progress=in_progress) == change


# ---- images -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/i/versions/1.0.0",
            ImageReference(
                id="/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/i/versions/1.0.0"
            ),
            id="gallery-image-version-id",
        ),
        pytest.param(
            "/CommunityGalleries/g/Images/i/Versions/1.0.0",
            ImageReference(community_gallery_image_id="/CommunityGalleries/g/Images/i/Versions/1.0.0"),
            id="community-gallery-any-case",
        ),
        pytest.param(
            "Canonical:ubuntu:22_04:1.2.3",
            ImageReference(publisher="Canonical", offer="ubuntu", sku="22_04", version="1.2.3"),
            id="marketplace",
        ),
    ],
)
def test_parse_desired_image(text: str, expected: ImageReference) -> None:
    """The NodeImage's image parses through the cloud layer's ImageReference."""
    assert parse_desired_image(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("ubuntu", id="one-word"),
        pytest.param("a:b:c", id="three-parts"),
        pytest.param("/images/ubuntu", id="path-not-an-arm-id"),
        pytest.param("", id="empty"),
    ],
)
def test_parse_desired_image_rejects_unknown_references(text: str) -> None:
    """Anything that is not one of the image reference forms is refused with InvalidImageError."""
    with pytest.raises(InvalidImageError, match="not"):
        parse_desired_image(text)


@pytest.mark.parametrize(
    ("annotation", "same"),
    [
        pytest.param(NEW, True, id="identical"),
        pytest.param(NEW.lower(), True, id="lowercase"),
        pytest.param(OLD, False, id="other-version"),
        pytest.param("garbage", False, id="unparseable"),
    ],
)
def test_same_image(annotation: str, same: bool) -> None:
    """A node's image annotation is compared with the desired image ignoring case."""
    assert same_image(annotation, DESIRED) is same


# ---- status and conditions ----------------------------------------------------------------------


def test_node_image_status_lists_counts_and_stable_references() -> None:
    """The status lists every group sorted by name, references carry no resourceVersion (node
    heartbeats must not change it), and counts heirs and mints as up to date."""
    nodes = [
        node("b-old"),
        node("a-old"),
        node("h", image=NEW, donor="x"),
        node("m", image=NEW),
        node("u", image=NEW),
    ]
    pending_nodes = [pending("m"), pending("left", PendingNodeGoal.LEAVE)]
    groups = group_nodes(nodes, pending_nodes, DESIRED)
    status = node_image_status(groups, pending_nodes, budget=0, observed_generation=3)
    assert [r.name for r in status.outdated] == ["a-old", "b-old"]
    assert [r.name for r in status.pending] == ["left", "m"]
    assert status.pending[0].kind == "PendingNode"
    assert status.outdated[0].to_dict() == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "a-old",
        "uid": "uid-a-old",
    }
    assert (status.total_nodes, status.up_to_date_nodes, status.budget, status.observed_generation) == (
        5,
        3,
        0,
        3,
    )


def _conditions(**kwargs: Any) -> dict[str, tuple[str, str, str]]:
    nodes: list[ClusterNode] = kwargs.pop("nodes")
    pending_nodes: list[PendingNode] = kwargs.pop("pending_nodes", [])
    groups = group_nodes(nodes, pending_nodes, DESIRED)
    return {
        c.type: (c.status, c.reason, c.message)
        for c in rollout_conditions(groups, pending_nodes, image=NEW, **kwargs)
    }


def test_conditions_when_everything_is_current() -> None:
    """UpToDate True, Progressing False RolloutComplete, Degraded False."""
    conditions = _conditions(nodes=[node("a", image=NEW), node("b", image=NEW)])
    assert conditions["UpToDate"] == ("True", "AllNodesUpToDate", f"All 2 nodes run {NEW}")
    assert conditions["Progressing"][:2] == ("False", "RolloutComplete")
    assert conditions["Degraded"][:2] == ("False", "AsExpected")


def test_conditions_name_the_step_a_replacement_is_at() -> None:
    """Progressing's reason is the most telling step under way; UpToDate counts what is left."""
    conditions = _conditions(
        nodes=[node("d", heir="h"), node("h", image=NEW, donor="d"), node("o")],
        steps=[ReplacementStep.WAIT_FOR_HEIR_READY, ReplacementStep.DRAIN],
    )
    assert conditions["UpToDate"] == (
        "False",
        "NodesOutdated",
        f"1 of 3 nodes run {NEW}; 1 outdated, 1 being replaced",
    )
    assert conditions["Progressing"] == (
        "True",
        "Draining",
        "Replacing nodes: draining, waiting for the new node to be Ready",
    )


@pytest.mark.parametrize(
    ("nodes", "pending_nodes", "reason"),
    [
        pytest.param([node("o")], [pending("j")], "JoiningNodes", id="joining"),
        pytest.param(
            [node("a", image=NEW)], [pending("l", PendingNodeGoal.LEAVE)], "LeavingNodes", id="leaving"
        ),
        pytest.param(
            [node("o"), node("h", image=NEW, donor="x")], [], "WaitingForBudget", id="waiting-for-budget"
        ),
        pytest.param([node("f", image="")], [], "AnnotatingNodes", id="annotating"),
    ],
)
def test_progressing_reason_without_steps(
    nodes: list[ClusterNode], pending_nodes: list[PendingNode], reason: str
) -> None:
    """With no replacement step under way, Progressing says what the rollout waits for."""
    assert _conditions(nodes=nodes, pending_nodes=pending_nodes)["Progressing"][:2] == ("True", reason)


def test_conditions_for_a_scale_set_without_scaling_group() -> None:
    """Outdated nodes of an unknown scale set: Progressing False Blocked, Degraded names the cause."""
    nodes = [node("o", group=PREFIX + "unknown")]
    groups = group_nodes(nodes, [], DESIRED)
    plan = plan_scale_out(groups, pair_nodes(groups), [], STANDARD_GROUPS, desired_image=DESIRED, budget=1)
    conditions = {c.type: c for c in rollout_conditions(groups, [], image=NEW, scale_out=plan)}
    assert (conditions["Progressing"].status, conditions["Progressing"].reason) == ("False", "Blocked")
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("True", "ScalingGroupMissing")
    assert "1 outdated node" in conditions["Degraded"].message


def test_conditions_for_an_invalid_image() -> None:
    """A bad spec.image: UpToDate Unknown, nothing progresses, Degraded says why."""
    conditions = _conditions(nodes=[node("a")], image_error="'ubuntu' is not an image ID")
    assert conditions["UpToDate"][:2] == ("Unknown", "InvalidImageReference")
    assert conditions["Progressing"][:2] == ("False", "InvalidImageReference")
    assert conditions["Degraded"] == ("True", "InvalidImageReference", "'ubuntu' is not an image ID")


def test_conditions_report_stuck_drains_and_invalid_nodes() -> None:
    """A stuck drain and nodes without providerID make Degraded True, the drain named first."""
    conditions = _conditions(
        nodes=[
            node("d", heir="h", unschedulable=True),
            node("h", image=NEW, donor="d"),
            node("x", provider_id=""),
        ],
        steps=[ReplacementStep.DRAIN],
        stuck_drains=["d"],
    )
    status, reason, message = conditions["Degraded"]
    assert (status, reason) == ("True", "DrainStuck")
    assert "Drain not finished in time on d" in message
    assert "Nodes without providerID or unknown to the cloud: x" in message


_DECISION_MODULES = [
    autoscaling_decisions,
    decision_conditions,
    draining,
    grouping,
    pairing,
    pending_node_decisions,
    scale_out,
]


@pytest.mark.parametrize("module", _DECISION_MODULES, ids=lambda module: module.__name__.rpartition(".")[2])
def test_exports_are_explicit(module: ModuleType) -> None:
    """Each decision module's __all__ names only what it has, and every public name it defines is in it."""
    for name in module.__all__:
        assert hasattr(module, name), name
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }
    assert public <= set(module.__all__)
