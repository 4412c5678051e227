"""NodeImageReconciler: replaces every node whose image is not the NodeImage's, within its surge.

One reconcile reads the cluster (Nodes, this NodeImage's PendingNodes and ScalingGroups,
AutoscalingStrategies, PodDisruptionBudgets) from the shared cache, asks the cloud only what it
cannot know (a new node's image), calls the pure functions in ``decisions`` and writes what they
say, each write idempotent and named by a checkpoint:

1. annotate nodes with their scale set and image; adopt machines a restart left without a Join
   PendingNode (a scale-out is recorded on its ScalingGroup before it is made);
2. group nodes; delete Join PendingNodes that are done; compute the budget;
3. pair new nodes with outdated ones (heir annotation first, then donor, then the Join record
   goes), mark unneeded new nodes obsolete, release stale annotations, and uncordon nodes an
   abandoned replacement left cordoned;
4. per pair: copy labels, wait for the heir to be Ready, cordon the donor, evict its pods
   (PodDisruptionBudgets respected, an Event when the drain is stuck), then hand it to a Leave
   PendingNode, whose reconciler deletes the machine and the Node; obsolete nodes the same way;
5. keep autoscaling off while a rollout runs and restore it after;
6. scale out within the budget, control plane first, each new machine tracked by a Join
   PendingNode; write the status with conditions that say where the rollout stands.

Writes are merge patches, creates that accept AlreadyExists, deletes that accept NotFound, and
status updates under ``retry_on_conflict``, so a restart at any checkpoint resumes. The reconcile
ends only once the cache shows its own writes (``ReadYourWrites``), so the next one never counts
a surge it already spent. Neighbours: ``pending_node`` (machines leaving and joining),
``scaling_group`` (the scale set's model image), ``cloud.compute`` through ``NodeImageCloud``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from nodewright.api.base import ValidationError
from nodewright.api.nodewright.v1alpha1 import (
    NodeImage,
    PendingNode,
    PendingNodeGoal,
    PendingNodeSpec,
    ScalingGroup,
)
from nodewright.cloud.errors import NotFoundError
from nodewright.cloud.models import ImageReference
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ScaleSetInstanceId,
    parse_provider_id,
)
from nodewright.controllers.node_image.decisions import (
    DONOR_ANNOTATION,
    DRAIN_STARTED_ANNOTATION,
    HEIR_ANNOTATION,
    NODE_IMAGE_ANNOTATION,
    OBSOLETE_ANNOTATION,
    SCALING_GROUP_ANNOTATION,
    ClusterNode,
    DrainPlan,
    InvalidImageError,
    NodeGroups,
    PairingPlan,
    ReplacementPair,
    ReplacementStep,
    group_nodes,
    labels_to_copy,
    new_node_budget,
    node_image_status,
    nodes_to_restore,
    pair_nodes,
    parse_desired_image,
    plan_drain,
    plan_scale_out,
    removal_step,
    replacement_step,
    rollout_conditions,
    rollout_in_progress,
    settled_joins,
)
from nodewright.controllers.node_image.resources import (
    format_time,
    is_controlled_by,
    parse_time,
)
from nodewright.controllers.node_image.rollout_writes import (
    SCALE_OUT_ANNOTATION,
    NodeImageCloud,
    NodeImageStores,
    RolloutWrites,
)
from nodewright.runtime import errors
from nodewright.runtime.kinds import NODE, POD
from nodewright.runtime.logs import get_logger
from nodewright.runtime.rbac import PolicyRule
from nodewright.runtime.reconcile import Request, Result, TerminalError

__all__ = ["RBAC_RULES", "SCALE_OUT_ANNOTATION", "NodeImageCloud", "NodeImageReconciler", "NodeImageStores"]

log = get_logger(__name__)


RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("nodewright.io", ("nodeimages",), ("get", "list", "watch")),
    PolicyRule("nodewright.io", ("nodeimages/status",), ("get", "update")),
    PolicyRule("nodewright.io", ("scalinggroups",), ("get", "list", "watch", "patch")),
    PolicyRule("nodewright.io", ("pendingnodes",), ("get", "list", "watch", "create", "delete")),
    PolicyRule("nodewright.io", ("autoscalingstrategies",), ("get", "list", "watch", "patch")),
    PolicyRule("", ("nodes",), ("get", "list", "watch", "patch")),
    PolicyRule("", ("pods",), ("list",)),
    PolicyRule("", ("pods/eviction",), ("create",)),
    PolicyRule("policy", ("poddisruptionbudgets",), ("get", "list", "watch")),
)


@dataclass
class _Pass:
    """What one reconcile learned while writing, for the status and the requeue."""

    steps: list[ReplacementStep] = field(default_factory=list)
    stuck_drains: list[str] = field(default_factory=list)
    waiting_for_pods: bool = False


class NodeImageReconciler(RolloutWrites):
    """Drives the nodes towards the NodeImage's image (see the module docstring)."""

    # ---- the reconcile ------------------------------------------------------------------------

    def reconcile(self, request: Request) -> Result:
        cached = self._stores.node_images.get(request.name)
        if cached is None or (cached.get("metadata") or {}).get("deletionTimestamp"):
            return Result()
        obj = copy.deepcopy(cached)
        try:
            node_image = NodeImage.from_object(obj)
        except ValidationError as error:
            self._events.event(obj, "Warning", "InvalidSpec", str(error))
            raise TerminalError(f"NodeImage {request.name}: {error}") from error
        try:
            desired = parse_desired_image(node_image.spec.image)
        except InvalidImageError as error:
            self._events.event(obj, "Warning", "InvalidImageReference", str(error))
            self._write_status(
                obj, None, [*rollout_conditions(NodeGroups(), [], image="", image_error=str(error))]
            )
            return Result()
        try:
            return self._roll_out(obj, node_image, desired)
        finally:
            self._writes.wait()

    def _roll_out(self, obj: dict[str, Any], node_image: NodeImage, desired: ImageReference) -> Result:
        uid = str(obj["metadata"]["uid"])
        scaling_groups = self._scaling_groups(node_image.name)
        pending = self._pending_nodes(uid)
        pending += self._adopt_recorded_scale_outs(obj, scaling_groups, pending)
        nodes, invalid = self._annotated_nodes(obj)
        groups = group_nodes(nodes, pending, desired, invalid=invalid)
        for join in settled_joins(groups, pending):
            self._delete_pending_node(join, "delete-settled-join")
            pending.remove(join)
        budget = new_node_budget(node_image.spec.max_surge, groups, pending)
        pairing = pair_nodes(groups)
        current = {node.name: node for node in groups.all_nodes()}
        self._apply_pairing(pairing, current)
        for node in nodes_to_restore(groups, pending):
            self._restore(current, node)
        progress = _Pass()
        for pair in pairing.pairs:
            self._advance(
                obj, ReplacementPair(current[pair.donor.name], current[pair.heir.name]), current, progress
            )
        for node in groups.obsolete:
            self._take_out(obj, current[node.name], None, current, progress)
        in_progress = rollout_in_progress(groups, pending)
        autoscaler_running = self._keep_autoscaling_off(in_progress)
        plan = plan_scale_out(
            groups,
            pairing,
            pending,
            scaling_groups,
            desired_image=desired,
            budget=budget,
            autoscaler_running=autoscaler_running,
        )
        self._report_blockers(obj, plan)
        for scale_out in plan.scale_outs:
            scaling_group = next(g for g in scaling_groups if g.spec.group_id == scale_out.group_id)
            for _ in range(scale_out.count):
                self._scale_out_one(obj, scaling_group)
        if progress.stuck_drains:
            self._events.event(
                obj,
                "Warning",
                "DrainStuck",
                "Drain not finished in time on " + ", ".join(progress.stuck_drains),
            )
        status = node_image_status(
            groups, pending, budget=budget, observed_generation=int(obj["metadata"].get("generation", 0))
        )
        conditions = rollout_conditions(
            groups,
            pending,
            image=desired.format(),
            steps=progress.steps,
            scale_out=plan,
            stuck_drains=progress.stuck_drains,
        )
        self._write_status(obj, status.to_dict(), conditions)
        log.info(
            "Reconciled NodeImage",
            node_image=node_image.name,
            outdated=len(groups.outdated),
            donors=len(groups.donors),
            heirs=len(groups.heirs),
            mints=len(groups.mints),
            pending=len(pending),
            budget=budget,
            scaled_out=plan.total,
        )
        if progress.waiting_for_pods:
            return Result(requeue_after=self._settings.drain_poll_seconds)
        if in_progress or plan.total:
            return Result(requeue_after=self._settings.resync_seconds)
        return Result()

    # ---- reads --------------------------------------------------------------------------------

    def _scaling_groups(self, node_image: str) -> list[ScalingGroup]:
        found: list[ScalingGroup] = []
        for cached in self._stores.scaling_groups.list():
            try:
                scaling_group = ScalingGroup.from_object(copy.deepcopy(cached))
            except ValidationError:
                continue  # the ScalingGroup reconciler reports it
            if scaling_group.spec.node_image == node_image:
                found.append(scaling_group)
        return sorted(found, key=lambda g: g.name)

    def _pending_nodes(self, owner_uid: str) -> list[PendingNode]:
        found: list[PendingNode] = []
        for cached in self._stores.pending_nodes.list():
            if not is_controlled_by(cached, owner_uid):
                continue
            try:
                found.append(PendingNode.from_object(copy.deepcopy(cached)))
            except ValidationError as error:
                log.warning(
                    "Skipped invalid PendingNode",
                    pending_node=cached["metadata"].get("name"),
                    error=str(error),
                )
        return sorted(found, key=lambda p: p.name)

    def _annotated_nodes(self, owner: dict[str, Any]) -> tuple[list[ClusterNode], set[str]]:
        """Every Node, annotated with its scale set and image when it was not yet; the names of
        Nodes the cloud cannot place (not a scale-set instance, or no such machine). Nodes without
        providerID or that cannot be placed get a Warning Event (grouping marks them invalid)."""
        nodes: list[ClusterNode] = []
        invalid: set[str] = set()
        for cached in sorted(self._stores.nodes.list(), key=lambda n: n["metadata"]["name"]):
            node = ClusterNode.from_object(cached)
            if not node.provider_id:
                self._events.event(owner, "Warning", "InvalidNode", f"Node {node.name} has no providerID")
            elif not node.scaling_group_id or not node.image:
                annotations, problem = self._placement(node)
                if problem is not None:
                    invalid.add(node.name)
                    self._events.event(owner, "Warning", "InvalidNode", f"Node {node.name}: {problem}")
                elif annotations:
                    patched = self._patch(
                        NODE,
                        self._stores.nodes,
                        node.name,
                        {"metadata": {"annotations": annotations}},
                        "annotate-node",
                    )
                    node = ClusterNode.from_object(patched) if patched is not None else node
            nodes.append(node)
        return nodes, invalid

    def _placement(self, node: ClusterNode) -> tuple[dict[str, str], str | None]:
        """The annotations a node lacks, read from its providerID and the cloud, or a problem."""
        try:
            machine = parse_provider_id(node.provider_id)
        except InvalidResourceIdError:
            return {}, f"providerID {node.provider_id!r} is not an Azure machine"
        if not isinstance(machine, ScaleSetInstanceId):
            return {}, "not an instance of a uniform scale set"
        annotations = {SCALING_GROUP_ANNOTATION: str(machine.scale_set)}
        if not node.image:
            try:
                image = self._cloud.get_instance(machine).image
            except NotFoundError:
                return {}, f"no machine {machine} at the cloud"
            if image is not None:
                annotations[NODE_IMAGE_ANNOTATION] = image.format()
        return {k: v for k, v in annotations.items() if node.annotations.get(k) != v}, None

    # ---- pairing ------------------------------------------------------------------------------

    def _apply_pairing(self, pairing: PairingPlan, current: dict[str, ClusterNode]) -> None:
        for pair in pairing.to_annotate:
            self._annotate(current, pair.heir.name, {DONOR_ANNOTATION: pair.donor.name}, "pair-heir")
            self._annotate(current, pair.donor.name, {HEIR_ANNOTATION: pair.heir.name}, "pair-donor")
            if pair.pending_node is not None:
                self._delete_pending_node(pair.pending_node, "delete-mint-record")
            log.info("Paired nodes", donor=pair.donor.name, heir=pair.heir.name)
        for mint in pairing.unneeded_mints:
            self._annotate(current, mint.node.name, {OBSOLETE_ANNOTATION: "true"}, "mark-obsolete")
            self._delete_pending_node(mint.pending_node, "delete-mint-record")
        for heir in pairing.clear_donor_annotation:
            self._annotate(current, heir.name, {DONOR_ANNOTATION: None}, "release-heir")
        for donor in pairing.clear_heir_annotation:
            self._annotate(current, donor.name, {HEIR_ANNOTATION: None}, "release-donor")

    def _restore(self, current: dict[str, ClusterNode], node: ClusterNode) -> None:
        """Undo the marks of a replacement that will not happen (uncordon only what we cordoned)."""
        body: dict[str, Any] = {
            "metadata": {"annotations": {DRAIN_STARTED_ANNOTATION: None, HEIR_ANNOTATION: None}}
        }
        if DRAIN_STARTED_ANNOTATION in node.annotations:
            body["spec"] = {"unschedulable": None}
        patched = self._patch(NODE, self._stores.nodes, node.name, body, "restore-node")
        if patched is not None:
            current[node.name] = ClusterNode.from_object(patched)
            log.info("Restored node", node=node.name)

    # ---- replacing and removing ---------------------------------------------------------------

    def _advance(
        self, owner: dict[str, Any], pair: ReplacementPair, current: dict[str, ClusterNode], progress: _Pass
    ) -> None:
        """Take one replacement as far as it can go now."""
        step = replacement_step(pair)
        if step is ReplacementStep.COPY_LABELS:
            labels = labels_to_copy(pair.donor.labels, pair.heir.labels)
            patched = self._patch(
                NODE, self._stores.nodes, pair.heir.name, {"metadata": {"labels": labels}}, "copy-labels"
            )
            if patched is None:
                return
            current[pair.heir.name] = ClusterNode.from_object(patched)
            pair = ReplacementPair(pair.donor, current[pair.heir.name])
            step = replacement_step(pair)
        if step is ReplacementStep.WAIT_FOR_HEIR_READY:
            progress.steps.append(step)
            return
        self._take_out(owner, pair.donor, pair.heir, current, progress)

    def _take_out(
        self,
        owner: dict[str, Any],
        node: ClusterNode,
        heir: ClusterNode | None,
        current: dict[str, ClusterNode],
        progress: _Pass,
    ) -> None:
        """Cordon, drain and hand a node to a Leave PendingNode (a donor, or an obsolete node)."""
        if removal_step(node) is ReplacementStep.CORDON:
            body = {
                "metadata": {"annotations": {DRAIN_STARTED_ANNOTATION: format_time(self._clock())}},
                "spec": {"unschedulable": True},
            }
            patched = self._patch(NODE, self._stores.nodes, node.name, body, "cordon")
            if patched is None:
                return
            node = current[node.name] = ClusterNode.from_object(patched)
            self._events.event(
                owner,
                "Normal",
                "CordonedNode",
                f"Cordoned {node.name}" + (f" for heir {heir.name}" if heir else ""),
            )
        drain = self._drain(node)
        if drain.stuck:
            progress.stuck_drains.append(node.name)
        step = removal_step(node, drain)
        progress.steps.append(step)
        if step is ReplacementStep.DRAIN:
            progress.waiting_for_pods = True
            return
        self._create_pending_node(
            owner,
            PendingNodeSpec(
                provider_id=node.provider_id,
                group_id=node.scaling_group_id,
                node_name=node.name,
                goal=PendingNodeGoal.LEAVE,
                deadline=format_time(self._clock() + self._settings.timeouts.leave),
            ),
            "create-leave",
        )

    def _drain(self, node: ClusterNode) -> DrainPlan:
        """Plan the node's drain and evict what the plan allows now (side effect: evictions)."""
        pods = self._client.list(POD, field_selector=f"spec.nodeName={node.name}").items
        plan = plan_drain(
            pods,
            self._stores.pod_disruption_budgets.list(),
            now=self._clock(),
            drain_started=parse_time(node.annotations.get(DRAIN_STARTED_ANNOTATION)),
            timeout=self._settings.timeouts.drain,
        )
        for key in plan.evict:
            self._checkpoint("evict")
            try:
                self._client.evict(key.name, key.namespace)
            except errors.TooManyRequests:
                plan.blocked[key] = "the API server refused the eviction (disruption budget)"
                continue
            except errors.NotFound:
                continue
            log.info("Evicted pod", node=node.name, pod=str(key))
        if plan.evict:
            plan.terminating.extend(k for k in plan.evict if k not in plan.blocked)
            plan.evict = []
        if plan.blocked:
            names = "; ".join(f"{key}: {why}" for key, why in sorted(plan.blocked.items()))
            log.info("Drain waiting for disruption budgets", node=node.name, pods=names)
        return plan
