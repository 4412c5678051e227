"""Pairing outdated nodes with new ones, the labels a heir inherits, and the next step of one
replacement (pure). Neighbours: ``grouping`` (the groups paired), ``draining`` (the drain plan a
removal waits for).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nodewright.api.nodewright.v1alpha1 import (
    PendingNode,
    PendingNodeGoal,
)
from nodewright.controllers.node_image.draining import DrainPlan
from nodewright.controllers.node_image.grouping import (
    DRAIN_STARTED_ANNOTATION,
    HEIR_ANNOTATION,
    RESERVED_LABEL_PATTERN,
    ClusterNode,
    Mint,
    NodeGroups,
)

__all__ = [
    "PairingPlan",
    "ReplacementPair",
    "ReplacementStep",
    "is_reserved_label",
    "labels_to_copy",
    "nodes_to_restore",
    "pair_nodes",
    "removal_step",
    "replacement_step",
]

# ---- pairing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplacementPair:
    """An outdated node (donor) and the new node (heir) that replaces it. ``pending_node`` is the
    heir's Join PendingNode when the pair is new (deleted once both annotations are written)."""

    donor: ClusterNode
    heir: ClusterNode
    pending_node: PendingNode | None = None


@dataclass
class PairingPlan:
    """What pairing decides, for the reconciler to write in this order: annotate ``to_annotate``
    (the heir's donor annotation first, then the donor's heir annotation, then delete the heir's
    Join PendingNode), mark ``unneeded_mints`` obsolete, clear stale annotations."""

    existing: list[ReplacementPair] = field(default_factory=list)
    to_annotate: list[ReplacementPair] = field(default_factory=list)
    unneeded_mints: list[Mint] = field(default_factory=list)
    clear_donor_annotation: list[ClusterNode] = field(default_factory=list)
    clear_heir_annotation: list[ClusterNode] = field(default_factory=list)

    @property
    def pairs(self) -> list[ReplacementPair]:
        """Every pair to work on, existing and new."""
        return [*self.existing, *self.to_annotate]


def _same_group(first: str, second: str) -> bool:
    return bool(first) and first.lower() == second.lower()


def pair_nodes(groups: NodeGroups) -> PairingPlan:
    """Pair donors with heirs and mints with outdated nodes of the same scaling group.

    - A donor and a heir that name each other are an existing pair.
    - A heir whose donor annotation names an outdated node of its group (a restart came between
      the two annotation writes) completes that pair.
    - Other heirs lost their donor (it was removed: the replacement is done, or it vanished): their
      donor annotation is cleared and they count as up to date. Donors without their heir get
      their heir annotation cleared and become outdated again.
    - Each mint, by name, takes the first outdated node of its scaling group, by name; a mint with
      none left is not needed and becomes obsolete (it is removed like any other node).
    - A node that already served as a heir is never paired again: a heir completes a half-written
      pair only with the donor its mark names, and a mint carrying the mark (``group_nodes`` never
      makes one) is neither paired nor made obsolete.
    """
    plan = PairingPlan()
    donors_by_name = {node.name: node for node in groups.donors}
    outdated_by_name = {node.name: node for node in groups.outdated}
    paired_donors: set[str] = set()
    taken_outdated: set[str] = set()
    for heir in groups.heirs:
        donor = donors_by_name.get(heir.donor)
        if donor is not None and donor.heir == heir.name and donor.name not in paired_donors:
            plan.existing.append(ReplacementPair(donor=donor, heir=heir))
            paired_donors.add(donor.name)
            continue
        outdated = outdated_by_name.get(heir.donor)
        if (
            outdated is not None
            and heir.served_as_heir == outdated.name
            and outdated.name not in taken_outdated
            and _same_group(outdated.scaling_group_id, heir.scaling_group_id)
        ):
            plan.to_annotate.append(ReplacementPair(donor=outdated, heir=heir))
            taken_outdated.add(outdated.name)
            continue
        plan.clear_donor_annotation.append(heir)
    plan.clear_heir_annotation = [donor for donor in groups.donors if donor.name not in paired_donors]
    available = [node for node in groups.outdated if node.name not in taken_outdated]
    for mint in groups.mints:
        if mint.node.served_as_heir:
            continue
        match = next(
            (
                node
                for node in available
                if _same_group(node.scaling_group_id, mint.pending_node.spec.group_id)
            ),
            None,
        )
        if match is None:
            plan.unneeded_mints.append(mint)
            continue
        available.remove(match)
        plan.to_annotate.append(ReplacementPair(donor=match, heir=mint.node, pending_node=mint.pending_node))
    return plan


def nodes_to_restore(groups: NodeGroups, pending_nodes: Iterable[PendingNode]) -> list[ClusterNode]:
    """Nodes that an abandoned replacement left marked: cordoned by us (drain-started annotation)
    but no longer being taken out (a donor whose heir vanished, or any node once the NodeImage
    names its image again), or up to date with a heir annotation. They get their marks removed
    and, if we cordoned them, are made schedulable again. Nodes with a Leave are left alone."""
    leaving = {p.spec.node_name for p in pending_nodes if p.spec.goal is PendingNodeGoal.LEAVE}
    return [
        node
        for node in [*groups.outdated, *groups.up_to_date]
        if node.name not in leaving
        and (DRAIN_STARTED_ANNOTATION in node.annotations or HEIR_ANNOTATION in node.annotations)
    ]


# ---- labels -------------------------------------------------------------------------------------


def is_reserved_label(key: str) -> bool:
    """Whether a label key belongs to Kubernetes (``kubernetes.io``, ``k8s.io`` and their
    subdomains, with or without a name part) and so is never copied to a heir."""
    return RESERVED_LABEL_PATTERN.match(key) is not None


def labels_to_copy(donor_labels: Mapping[str, str], heir_labels: Mapping[str, str]) -> dict[str, str]:
    """The donor's labels the heir lacks or has with another value, reserved keys excluded. Labels
    only the heir has are left alone."""
    return {
        key: value
        for key, value in sorted(donor_labels.items())
        if not is_reserved_label(key) and heir_labels.get(key) != value
    }


# ---- steps of one replacement -------------------------------------------------------------------


class ReplacementStep(enum.Enum):
    """Where one replacement (or removal of an obsolete node) stands; the value is the reason
    shown on the Progressing condition."""

    COPY_LABELS = "CopyingLabels"
    WAIT_FOR_HEIR_READY = "WaitingForHeirReady"
    WAIT_FOR_HEIR_NETWORK = "WaitingForHeirNetwork"
    WAIT_FOR_HEIR_IDENTITIES = "WaitingForHeirIdentities"
    CORDON = "Cordoning"
    DRAIN = "Draining"
    REMOVE = "RemovingNodes"
    WAIT_FOR_EVICTED_PODS = "WaitingForEvictedPods"


def removal_step(node: ClusterNode, drain: DrainPlan | None = None) -> ReplacementStep:
    """The next step to take a node out: cordon it, drain it (``drain`` is the latest plan, if one
    was made), then remove it (Leave PendingNode, machine and Node deleted)."""
    if not node.unschedulable:
        return ReplacementStep.CORDON
    if drain is None or not drain.done:
        return ReplacementStep.DRAIN
    return ReplacementStep.REMOVE


def replacement_step(pair: ReplacementPair, drain: DrainPlan | None = None) -> ReplacementStep:
    """The next step of a replacement: copy labels to the heir, wait until the heir is Ready,
    then take the donor out (``removal_step``). The heir's readiness is checked on every call, so
    a donor is never removed while its heir is not Ready."""
    if labels_to_copy(pair.donor.labels, pair.heir.labels):
        return ReplacementStep.COPY_LABELS
    if not pair.heir.ready:
        return ReplacementStep.WAIT_FOR_HEIR_READY
    return removal_step(pair.donor, drain)
