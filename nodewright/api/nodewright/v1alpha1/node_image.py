"""NodeImage: the node image the whole cluster should run, and where the rollout towards it
stands.

Constellation's NodeImage (update.edgeless.systems) field for field in the status lists, in our
group ``nodewright.io``, with additions: ``spec.maxSurge`` (constellation fixed the number of
extra nodes at 1), ``status.awaitingAnnotation`` (constellation reported nodes whose annotations
were still missing as heirs), node counts for ``kubectl get``, and a safe rollout: ``canary``,
``soakDuration``, ``heirReadyTimeout``, ``evictedPodsReadyTimeout`` and ``gateConditions`` with
the rollout state kept in the status (``rolloutState``, ``previousImage`` for the automatic
rollback, ...), ``maxUnavailable`` beside ``maxSurge`` (Cluster API's and AKS's), and AKS's drain
settings ``drainTimeout``, ``undrainableNodeBehavior`` and ``maxBlockedNodes``. A NodeImage acts
on the nodes of the ScalingGroups that name it. The NodeImage reconciler in
``nodewright.controllers.node_image`` writes the status. Cluster-scoped.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Self

from nodewright.api.base import Model, PrinterColumn, Resource, field
from nodewright.api.meta import Condition, ObjectReference
from nodewright.api.nodewright.v1alpha1._validation import DURATION_PATTERN, child_path, parse_duration

__all__ = [
    "CONDITION_DEGRADED",
    "CONDITION_PROGRESSING",
    "CONDITION_UP_TO_DATE",
    "CONFLICT",
    "QUARANTINE_LABEL",
    "NodeImage",
    "NodeImageSpec",
    "NodeImageStatus",
    "RolloutState",
    "UndrainableNodeBehavior",
]

CONDITION_UP_TO_DATE = "UpToDate"
"""True when every node runs the desired image and no replacement is in flight."""
CONDITION_PROGRESSING = "Progressing"
"""True while the rollout moves; its reason names the step it is at."""
CONDITION_DEGRADED = "Degraded"
"""True when something needs a human: bad input, a missing scale set, a drain stuck past its
timeout."""

CONFLICT = "Conflict"
"""True when a ScalingGroup of this NodeImage names a scale set another NodeImage already claims:
the nodes of that scale set are left to the first claimant."""
QUARANTINE_LABEL = "nodewright.io/upgrade-status"
"""On a node whose drain did not finish within ``drainTimeout`` under ``Cordon``: ``Quarantined``."""

_DURATION_SCHEMA = {"pattern": "^" + DURATION_PATTERN.pattern + "$"}


class UndrainableNodeBehavior(enum.Enum):
    """What a drain that outlives ``drainTimeout`` does (AKS's undrainableNodeBehavior)."""

    CORDON = "Cordon"
    """Leave the node cordoned, label it Quarantined and go on (at most ``maxBlockedNodes``)."""
    FAIL = "Fail"
    """Stop the rollout (status and a Warning Event say which node); nothing is forced."""


class RolloutState(enum.Enum):
    """Where a rollout stands (``status.rolloutState``; the ``nodewright_rollout_state`` metric)."""

    COMPLETE = "Complete"
    CANARY = "Canary"
    SOAKING = "Soaking"
    ROLLING = "Rolling"
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"
    QUARANTINED = "Quarantined"
    """Every node that could be replaced runs the image, but nodes not drained in time were left
    quarantined (``undrainableNodeBehavior: Cordon``): the pool is not whole until a human removes
    them. Not Complete."""


CONDITIONS_SCHEMA = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


@dataclass(kw_only=True)
class NodeImageSpec(Model):
    """The desired node image."""

    image: str = field(
        description=(
            "The image every node should run: an image or gallery image version resource ID, a "
            "community gallery image ID (/communityGalleries/...), or a marketplace image as "
            "publisher:offer:sku:version."
        ),
        schema={"minLength": 1},
    )
    max_surge: int = field(
        default=1,
        description=(
            "How many nodes may exist beyond the cluster's size while outdated nodes are replaced "
            "(heirs, joining nodes and obsolete nodes count). Control-plane groups are replaced one "
            "node at a time whatever this says."
        ),
        schema={"minimum": 1, "default": 1},
    )
    max_unavailable: int | str = field(
        default=0,
        omit_empty=False,
        description=(
            "How many nodes may be unavailable at once (cordoned and draining while their heir is not "
            "Ready yet), as a count or a percentage of the nodes such as 25% (rounded down), as Cluster "
            "API's and AKS's maxUnavailable. 0 (the default): a node is cordoned only once its heir is "
            "Ready. A node leaves the cluster only once its heir is Ready, whatever this says."
        ),
        schema={"default": 0},
    )
    canary: int = field(
        default=1,
        omit_empty=False,
        description=(
            "Nodes per ScalingGroup replaced first; the others wait until these passed the health "
            "gates and the soak. 0 skips the canary."
        ),
        schema={"minimum": 0, "default": 1},
    )
    soak_duration: str = field(
        default="0s",
        description=(
            "How long new nodes must stay Ready (and the user gates True) after the canary and after "
            "each later batch before the rollout goes on, such as 10m."
        ),
        schema={**_DURATION_SCHEMA, "default": "0s"},
    )
    heir_ready_timeout: str = field(
        default="10m",
        description="A new node not Ready this long after it registered fails the rollout's health gate.",
        schema={**_DURATION_SCHEMA, "default": "10m"},
    )
    evicted_pods_ready_timeout: str = field(
        default="10m",
        description=(
            "How long the pods evicted from a donor may take to be Running and Ready elsewhere (their "
            "controllers' replacements) after the latest eviction; later fails the health gate."
        ),
        schema={**_DURATION_SCHEMA, "default": "10m"},
    )
    gate_conditions: list[str] = field(
        default_factory=list,
        description=(
            "Condition types on this NodeImage's status, set by another controller or a person, that "
            "must be True before the rollout goes past the canary; one set False fails the rollout."
        ),
    )
    drain_timeout: str = field(
        default="30m",
        description="How long a node's drain may take before undrainableNodeBehavior applies.",
        schema={**_DURATION_SCHEMA, "default": "30m"},
    )
    undrainable_node_behavior: UndrainableNodeBehavior = field(
        default=UndrainableNodeBehavior.CORDON,
        description=(
            "Cordon: a node that could not be drained in time stays cordoned, is labelled "
            "nodewright.io/upgrade-status=Quarantined and the rollout goes on (at most maxBlockedNodes). "
            "Fail: the rollout stops. Pods are never forced off."
        ),
        schema={"default": "Cordon"},
    )
    max_blocked_nodes: int = field(
        default=1,
        omit_empty=False,
        description="How many quarantined nodes Cordon tolerates before the rollout stops.",
        schema={"minimum": 0, "default": 1},
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: str = "") -> Self:
        spec = super().from_dict(data, path=path)
        for key in ("soakDuration", "heirReadyTimeout", "evictedPodsReadyTimeout", "drainTimeout"):
            parse_duration(child_path(path, key), str(data.get(key, "0s")))
        return spec

    @property
    def soak(self) -> timedelta:
        return parse_duration("spec.soakDuration", self.soak_duration)

    @property
    def heir_ready_deadline(self) -> timedelta:
        return parse_duration("spec.heirReadyTimeout", self.heir_ready_timeout)

    @property
    def evicted_pods_ready_deadline(self) -> timedelta:
        return parse_duration("spec.evictedPodsReadyTimeout", self.evicted_pods_ready_timeout)

    @property
    def drain_deadline(self) -> timedelta:
        return parse_duration("spec.drainTimeout", self.drain_timeout)


@dataclass(kw_only=True)
class NodeImageStatus(Model):
    """Every node sorted into exactly one list, the budget for new nodes, and conditions."""

    outdated: list[ObjectReference] = field(
        default_factory=list, description="Nodes on another image that have no heir yet."
    )
    up_to_date: list[ObjectReference] = field(
        default_factory=list, description="Nodes on the desired image with nothing left to do."
    )
    donors: list[ObjectReference] = field(
        default_factory=list, description="Outdated nodes paired with a heir that will replace them."
    )
    heirs: list[ObjectReference] = field(
        default_factory=list, description="New nodes inheriting the labels of a donor they replace."
    )
    mints: list[ObjectReference] = field(
        default_factory=list, description="New nodes that joined and wait to be paired with a donor."
    )
    pending: list[ObjectReference] = field(
        default_factory=list, description="PendingNodes: machines joining or leaving the cluster."
    )
    obsolete: list[ObjectReference] = field(
        default_factory=list, description="New nodes that were not needed and are being removed."
    )
    invalid: list[ObjectReference] = field(
        default_factory=list,
        description="Nodes the rollout cannot handle (no providerID, or the cloud could not place them).",
    )
    awaiting_annotation: list[ObjectReference] = field(
        default_factory=list,
        description="Nodes whose scaling group and image annotations are not written yet.",
    )
    budget: int = field(
        default=0,
        omit_empty=False,
        description="How many new nodes may be created now.",
        schema={"minimum": 0},
    )
    total_nodes: int = field(default=0, omit_empty=False, description="Nodes in the cluster.")
    up_to_date_nodes: int = field(
        default=0, omit_empty=False, description="Nodes running the desired image (heirs included)."
    )
    observed_generation: int = field(default=0, description="The spec generation this status describes.")
    rollout_state: str = field(
        default="",
        description="Complete, Canary, Soaking, Rolling, RollingBack, RolledBack, Failed or Quarantined.",
    )
    target_image: str = field(default="", description="The image the rollout state refers to.")
    previous_image: str = field(
        default="",
        description="The image the outdated nodes ran when the rollout began (a rollback's target).",
    )
    canary_passed: bool = field(default=False, description="Whether the canary passed its gates and soak.")
    batch_in_flight: bool = field(default=False, description="Whether a batch of replacements is under way.")
    soak_until: str = field(default="", description="When the current soak ends (RFC 3339).")
    failure_reason: str = field(default="", description="Why the rollout failed or rolled back.")
    failure_message: str = field(default="", description="What failed, for a human.")
    conditions: list[Condition] = field(default_factory=list, schema=CONDITIONS_SCHEMA)


@dataclass(kw_only=True)
class NodeImage(Resource):
    """The node image for the cluster's nodes; the NodeImage reconciler replaces nodes on any
    other image, budget by budget."""

    API_VERSION: ClassVar[str] = "nodewright.io/v1alpha1"
    KIND: ClassVar[str] = "NodeImage"
    PLURAL: ClassVar[str] = "nodeimages"
    NAMESPACED: ClassVar[bool] = False
    CATEGORIES: ClassVar[tuple[str, ...]] = ("nodewright",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Image", ".spec.image", description="The desired image"),
        PrinterColumn(
            "Up-To-Date",
            '.status.conditions[?(@.type=="UpToDate")].status',
            description="Whether every node runs the desired image",
        ),
        PrinterColumn(
            "Step",
            '.status.conditions[?(@.type=="Progressing")].reason',
            description="Where the rollout stands",
        ),
        PrinterColumn("Updated", ".status.upToDateNodes", type="integer", description="Nodes on the image"),
        PrinterColumn("Nodes", ".status.totalNodes", type="integer", description="Nodes in the cluster"),
        PrinterColumn("Budget", ".status.budget", type="integer", description="New nodes allowed now"),
        PrinterColumn("State", ".status.rolloutState", description="Where the rollout stands"),
        PrinterColumn(
            "Degraded",
            '.status.conditions[?(@.type=="Degraded")].reason',
            priority=1,
            description="What needs a human, if anything",
        ),
        PrinterColumn("Max-Surge", ".spec.maxSurge", type="integer", priority=1),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: NodeImageSpec
    status: NodeImageStatus = field(default_factory=NodeImageStatus)
