"""NodeImage: the node image the whole cluster should run, and where the rollout towards it
stands.

Constellation's NodeImage (update.edgeless.systems) field for field in the status lists, in our
group ``nodewright.io``, with three additions: ``spec.maxSurge`` (constellation fixed the number
of extra nodes at 1), ``status.awaitingAnnotation`` (constellation reported nodes whose
annotations were still missing as heirs), and node counts for ``kubectl get``. The NodeImage
reconciler in ``nodewright.controllers.node_image`` writes the status. Cluster-scoped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nodewright.api.base import Model, PrinterColumn, Resource, field
from nodewright.api.meta import Condition, ObjectReference

__all__ = [
    "CONDITION_DEGRADED",
    "CONDITION_PROGRESSING",
    "CONDITION_UP_TO_DATE",
    "NodeImage",
    "NodeImageSpec",
    "NodeImageStatus",
]

CONDITION_UP_TO_DATE = "UpToDate"
"""True when every node runs the desired image and no replacement is in flight."""
CONDITION_PROGRESSING = "Progressing"
"""True while the rollout moves; its reason names the step it is at."""
CONDITION_DEGRADED = "Degraded"
"""True when something needs a human: bad input, a missing scale set, a drain stuck past its
timeout."""

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
