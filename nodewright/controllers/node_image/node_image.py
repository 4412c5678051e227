"""NodeImageReconciler: replaces the nodes of its own ScalingGroups whose image is not the
NodeImage's, within its surge, canary first, gated on health, rolled back when a gate fails.

One reconcile reads the cluster (the Nodes of its claimed pools through the cache's pool index,
``pools``, this NodeImage's PendingNodes, every ScalingGroup and NodeImage,
AutoscalingStrategies, PodDisruptionBudgets, Pods, NodeNetworkConfigs) from the shared cache, so
its cost follows its pools, not the cluster; the API server is asked fresh only right before a
write that cannot be taken back (the claims, and a removed node's pods and heir before its Leave).
It asks the cloud only what it cannot know (a new node's image), calls the pure functions in
``grouping``, ``pairing``, ``scale_out``, ``draining``, ``targeting`` and ``rollout_state`` and
writes what they say, each write idempotent and named by a checkpoint:

1. claim the scale sets of this NodeImage's ScalingGroups (``targeting``: a scale set another
   ScalingGroup claimed first is a Conflict, with one Warning Event; a claim counts once settled,
   and before the writes of steps 3-6 it is confirmed from a fresh list, ``claim_checks``);
   annotate their nodes with scale set and image (a VM node's scale set, Flexible orchestration,
   is read from the cloud once; a VM in none belongs to its resource group's group of standalone
   VMs, if one is claimed); track with Join PendingNodes the machines of each recorded scale-out
   whose operation ended, or that a restart left (recorded on its ScalingGroup before it is made);
2. group the claimed nodes against the desired image (the previous image while rolling back;
   a node a capacity step still in flight adds is its step's, not grouped: ``StepsInFlight``);
   delete Join PendingNodes that are done, and those naming a node that already served as a heir
   (stale: a Warning Event and a log line); decide the rollout state (canary, soak, health gates,
   rollback; ``rollout_state``); compute the budget;
3. pair new nodes with outdated ones (heir annotation first, then donor, then the Join record
   goes), mark unneeded and abandoned new nodes obsolete, release stale annotations, and uncordon
   nodes an abandoned replacement left cordoned;
4. per pair (``replacement``): copy labels, wait for the heir to be Ready (up to
   ``maxUnavailable`` donors may be cordoned and drained before, ``unavailable``; none leaves
   before it) and for its IP pool to take the donor's pods, cordon the donor, evict its pods
   (PodDisruptionBudgets respected; each eviction recorded on the heir first, and the record
   removed once the pods are Ready elsewhere, ``evicted_pods``), then hand it to a Leave
   PendingNode, whose reconciler deletes the machine and the Node; obsolete nodes the same way; a
   drain past drainTimeout quarantines the donor or fails the rollout;
5. keep autoscaling off while any NodeImage's rollout runs and restore it (after the status says
   this one is over) when none does;
6. scale out within the budget and the canary's cap: one capacity step per scale set, left to
   the operation tracker (its end enqueues the NodeImage; no worker waits), none beside one in
   flight, whose machines count against surge and canary and as in flight; write the status.

Writes are merge patches, creates that accept AlreadyExists, deletes that accept NotFound, and
status updates under ``retry_on_conflict``, so a restart at any checkpoint resumes. The reconcile
ends only once the cache shows its own writes (``ReadYourWrites``), so the next one never counts
a surge it already spent. Neighbours: ``pending_node`` (machines leaving and joining),
``node_placement`` (annotating nodes), ``scaling_group`` (the scale set's model image),
``cloud.compute`` through ``NodeImageCloud``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Any

from nodewright.api.base import ValidationError
from nodewright.api.nodewright.v1alpha1 import (
    CONDITION_DEGRADED,
    CONDITION_IMAGE_APPLIED,
    CONDITION_PROGRESSING,
    NodeImage,
    PendingNode,
    RolloutState,
    ScalingGroup,
    UndrainableNodeBehavior,
)
from nodewright.cloud.models import ImageReference
from nodewright.controllers.node_image.claim_checks import ClaimChecks
from nodewright.controllers.node_image.collaborators import Collaborators
from nodewright.controllers.node_image.conditions import ConditionState, node_image_status, rollout_conditions
from nodewright.controllers.node_image.evicted_pods import EvictedPodsVerdict, EvictionCheck, PodFactsCache
from nodewright.controllers.node_image.grouping import (
    OBSOLETE_ANNOTATION,
    ClusterNode,
    InvalidImageError,
    NodeGroups,
    group_nodes,
    new_node_budget,
    parse_desired_image,
    rollout_in_progress,
    settled_joins,
    stale_joins,
)
from nodewright.controllers.node_image.pairing import (
    PairingPlan,
    ReplacementPair,
    ReplacementStep,
    nodes_to_restore,
    pair_nodes,
)
from nodewright.controllers.node_image.pools import pool_nodes, unplaced_nodes
from nodewright.controllers.node_image.replacement import NodeReplacement, RemovalContext, ReplacementPass
from nodewright.controllers.node_image.resources import is_controlled_by
from nodewright.controllers.node_image.rollout_state import (
    ACTIVE_STATES,
    RolloutDecision,
    RolloutMemory,
    any_rollout_running,
    decide_rollout,
    desired_image_of,
    gate_failure,
    overlay_conditions,
)
from nodewright.controllers.node_image.rollout_writes import (
    SCALE_OUT_ANNOTATION,
    NodeImageCloud,
    NodeImageStores,
)
from nodewright.controllers.node_image.scale_out import (
    ScaleOutPlan,
    StepsInFlight,
    canary_placed,
    cap_scale_out,
    plan_scale_out,
)
from nodewright.controllers.node_image.targeting import (
    Claims,
    claim_scaling_groups,
    nodes_claimed,
    parse_scaling_groups,
)
from nodewright.controllers.node_image.unavailable import (
    InvalidMaxUnavailableError,
    parse_max_unavailable,
    resolve_max_unavailable,
    unavailable_allowance,
)
from nodewright.runtime import NODE, PolicyRule, Request, Result, TerminalError, get_logger

__all__ = ["RBAC_RULES", "SCALE_OUT_ANNOTATION", "NodeImageCloud", "NodeImageReconciler", "NodeImageStores"]

log = get_logger(__name__)


RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("nodewright.io", ("nodeimages",), ("get", "list", "watch")),
    PolicyRule("nodewright.io", ("nodeimages/status",), ("get", "update")),
    PolicyRule("nodewright.io", ("scalinggroups",), ("get", "list", "watch", "patch")),
    PolicyRule("nodewright.io", ("pendingnodes",), ("get", "list", "watch", "create", "delete")),
    PolicyRule("nodewright.io", ("autoscalingstrategies",), ("get", "list", "watch", "patch")),
    PolicyRule("", ("nodes",), ("get", "list", "watch", "patch")),
    PolicyRule("", ("pods",), ("list", "watch")),
    PolicyRule("", ("pods/eviction",), ("create",)),
    PolicyRule("policy", ("poddisruptionbudgets",), ("get", "list", "watch")),
    # The heir IP-pool gate reads NodeNetworkConfigs where CNS keeps them (the default of the
    # nodeNetworkConfigNamespace option): a Role there, not cluster-wide.
    PolicyRule("acn.azure.com", ("nodenetworkconfigs",), ("get", "list", "watch"), namespace="kube-system"),
    # The heir identity gate reads the identity reconciler's AzureAssignedIdentities (any namespace).
    PolicyRule("aadpodidentity.k8s.io", ("azureassignedidentities",), ("get", "list", "watch")),
)


@dataclass
class _View:
    """What one reconcile read and grouped, and what it learns while writing."""

    obj: dict[str, Any]
    node_image: NodeImage
    memory: RolloutMemory
    desired: ImageReference
    claims: Claims
    pending: list[PendingNode]
    groups: NodeGroups
    current: dict[str, ClusterNode]
    evictions: list[EvictionCheck] = field(default_factory=list)
    """The heirs' eviction records checked (the evicted-pods health gate)."""
    coming: StepsInFlight = field(default_factory=StepsInFlight)
    """The capacity steps still in flight (``_finish_scale_outs``): their machines are in flight."""
    progress: ReplacementPass = field(default_factory=ReplacementPass)
    pairing: PairingPlan = field(init=False)  # ``pair_nodes``: its released heirs (donor gone) are done

    @property
    def new_nodes(self) -> list[ClusterNode]:
        """Nodes on the desired image: heirs, mints and up-to-date nodes."""
        return [*self.groups.heirs, *(m.node for m in self.groups.mints), *self.groups.up_to_date]

    @property
    def in_flight(self) -> bool:
        groups, finished = self.groups, {heir.name for heir in self.pairing.clear_donor_annotation}
        return bool(
            groups.donors
            or any(heir.name not in finished for heir in groups.heirs)
            or groups.mints
            or groups.obsolete
            or groups.awaiting_annotation
            or self.pending
            or self.coming.total
            or any(check.verdict is not EvictedPodsVerdict.SATISFIED for check in self.evictions)
        )


class NodeImageReconciler(NodeReplacement):
    """Drives the nodes towards the NodeImage's image (see the module docstring)."""

    def __init__(self, collaborators: Collaborators[NodeImageCloud], *, stores: NodeImageStores) -> None:
        super().__init__(collaborators, stores=stores)
        self._claim_checks = ClaimChecks(collaborators.client, collaborators.events, collaborators.clock)
        self._pod_facts = PodFactsCache()

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
        memory = RolloutMemory.from_status(node_image.status)
        try:
            desired = parse_desired_image(desired_image_of(memory, node_image.spec.image))
        except InvalidImageError as error:
            self._events.event(obj, "Warning", "InvalidImageReference", str(error))
            self._write_status(
                obj, None, [*rollout_conditions(NodeGroups(), [], image="", image_error=str(error))]
            )
            return Result()
        try:
            parse_max_unavailable(node_image.spec.max_unavailable)
        except InvalidMaxUnavailableError as error:
            problem = [
                ConditionState(
                    CONDITION_PROGRESSING, "False", "InvalidMaxUnavailable", "Nothing is replaced"
                ),
                ConditionState(CONDITION_DEGRADED, "True", "InvalidMaxUnavailable", str(error)),
            ]
            self._write_status(obj, None, problem)  # with one Warning Event (a new Degraded reason)
            return Result()
        started = time.thread_time()
        try:
            return self._roll_out(self._read(obj, node_image, memory, desired))
        finally:
            self._metrics.pass_done(node_image.name, time.thread_time() - started)
            self._writes.wait()

    def _read(
        self, obj: dict[str, Any], node_image: NodeImage, memory: RolloutMemory, desired: ImageReference
    ) -> _View:
        """Steps 1 and 2: the claimed scale sets, PendingNodes (adopting recorded scale-outs), the
        claimed nodes annotated and grouped, settled joins deleted."""
        claims = claim_scaling_groups(self._all_scaling_groups(), node_image.name, now=self._clock())
        pending = self._pending_nodes(str(obj["metadata"]["uid"]))
        joins, coming = self._finish_scale_outs(obj, claims.scaling_groups, pending)
        pending += joins
        nodes, invalid = self._annotated_nodes(claims, node_image.name, coming)
        groups = group_nodes(coming.without_their_machines(nodes, invalid), pending, desired, invalid=invalid)
        for join in settled_joins(groups, pending):
            self._delete_pending_node(join, "delete-settled-join")
            pending.remove(join)
        for stale in stale_joins(groups, pending):
            self._ignore_stale_join(obj, stale)
            pending.remove(stale.pending_node)
        current = {node.name: node for node in groups.all_nodes()}
        evictions = self._check_evicted_pods(current.values(), node_image.spec.evicted_pods_ready_deadline)
        view = _View(obj, node_image, memory, desired, claims, pending, groups, current, evictions, coming)
        view.pairing = pair_nodes(groups)
        return view

    def _roll_out(self, view: _View) -> Result:
        if view.claims.settles_at is not None:  # nothing said or done until every claim counts
            return Result(requeue_after=max(0.1, (view.claims.settles_at - self._clock()).total_seconds()))
        decision = self._decide(view)
        if decision.started_rollback:
            return self._start_rollback(view, decision)
        may_write = view.in_flight or bool(view.groups.outdated)
        if may_write and not self._claim_checks.still_held(view.node_image.name, view.claims.scale_set_ids):
            return Result(requeue_after=self._settings.drain_poll_seconds)  # the cache catches up
        pairing = view.pairing
        finished = len(pairing.clear_donor_annotation)  # heirs whose donor is gone: slots free now
        surge, coming = view.node_image.spec.max_surge, view.coming.total  # steps in flight spent theirs
        budget = new_node_budget(surge, view.groups, view.pending, finished_heirs=finished, coming=coming)
        gated = decision.memory.state in (RolloutState.CANARY, RolloutState.SOAKING, RolloutState.ROLLING)
        if self._settle_evictions(view.evictions, view.current, gated=gated):
            view.progress.steps.append(ReplacementStep.WAIT_FOR_EVICTED_PODS)
            view.progress.waiting_for_pods = True
        self._replace(view, pairing, decision)
        memory = self._handle_stuck_drains(view, decision.memory)
        own_active = memory.state in ACTIVE_STATES or (
            memory.state not in (RolloutState.FAILED, RolloutState.ROLLED_BACK)
            and rollout_in_progress(view.groups, view.pending)
        )
        others = [o for name, o in self._node_image_objects() if name != view.node_image.name]
        others_active = any_rollout_running(others)
        autoscaler_running = (own_active or others_active) and self._keep_autoscaling_off(True)
        scale = decision.scale_out and memory.state is not RolloutState.FAILED
        cap = decision.canary_cap if scale else 0
        plan = self._scale(view, pairing, budget, cap, autoscaler_running=autoscaler_running)
        self._report(view, memory, budget, plan)
        if not own_active and not others_active:
            self._keep_autoscaling_off(False)  # restored only once the status says this rollout is over
        return self._requeue(view, decision, plan, waiting_for_others=others_active)

    def _requeue(
        self, view: _View, decision: RolloutDecision, plan: ScaleOutPlan, *, waiting_for_others: bool
    ) -> Result:
        """Soon while pods or a heir's pool are waited for; at the soak's end; at the resync while
        anything is in flight or another rollout holds the autoscaler off; else never."""
        progress = view.progress
        heirs_waiting = progress.heirs_short_of_addresses or progress.heirs_short_of_identities
        if progress.waiting_for_pods or heirs_waiting:
            return Result(requeue_after=self._settings.drain_poll_seconds)
        if decision.requeue_at is not None:
            wait = (decision.requeue_at - self._clock()).total_seconds()
            return Result(requeue_after=min(max(wait, 0.2), self._settings.resync_seconds))
        busy = rollout_in_progress(view.groups, view.pending) or decision.memory.state in ACTIVE_STATES
        if busy or plan.total or waiting_for_others:
            return Result(requeue_after=self._settings.resync_seconds)
        return Result()

    def _decide(self, view: _View) -> RolloutDecision:
        """Where the rollout goes: the health gates are checked while it runs towards its image."""
        memory, spec = view.memory, view.node_image.spec
        failure = None
        gated = memory.state in (RolloutState.CANARY, RolloutState.SOAKING, RolloutState.ROLLING)
        if gated and memory.target_image.lower() == spec.image.lower():
            failure = gate_failure(
                view.new_nodes,
                now=self._clock(),
                heir_ready_timeout=spec.heir_ready_deadline,
                conditions=view.node_image.status.conditions,
                gate_conditions=spec.gate_conditions,
                evicted_pods_overdue=[
                    check.describe()
                    for check in view.evictions
                    if check.verdict is EvictedPodsVerdict.OVERDUE
                ],
            )
        return decide_rollout(
            memory,
            view.node_image,
            outdated_images=[node.image for node in [*view.groups.outdated, *view.groups.donors]],
            outdated_left=bool(view.groups.outdated),
            in_flight=view.in_flight,
            failure=failure,
            now=self._clock(),
            canary_placed=canary_placed(view.groups, view.pending, max(spec.canary, 1), view.coming.counts),
            quarantined=bool(view.groups.quarantined),
        )

    def _start_rollback(self, view: _View, decision: RolloutDecision) -> Result:
        """Record the failed gate; the next reconcile rolls towards the previous image."""
        memory = decision.memory
        message = f"{memory.failure_message}; rolling back to {memory.previous_image}"
        self._events.event(view.obj, "Warning", "RollingBack", message)
        self._metrics.rolled_back(view.node_image.name)
        log.info("Rolling back NodeImage", node_image=view.node_image.name, reason=memory.failure_reason)
        self._report(view, memory, 0, ScaleOutPlan())
        return Result(requeue_after=self._settings.drain_poll_seconds)

    def _replace(self, view: _View, pairing: PairingPlan, decision: RolloutDecision) -> None:
        """Steps 3 and 4: pairing, restoring, the per-pair steps, obsolete nodes, ready marks."""
        current = view.current
        for node in view.groups.obsolete:
            self._annotate(current, node.name, {OBSOLETE_ANNOTATION: "true"}, "mark-obsolete")
        self._apply_pairing(pairing, current)
        for node in nodes_to_restore(view.groups, view.pending):
            self._restore(current, node)
        rolling_back = decision.memory.state in (RolloutState.ROLLING_BACK, RolloutState.ROLLED_BACK)
        groups = view.groups
        size = len(groups.outdated) + len(groups.donors) + len(groups.up_to_date)
        context = RemovalContext(
            owner=view.obj,
            drain_timeout=view.node_image.spec.drain_deadline,
            reason="Rollback" if rolling_back else "ImageOutdated",
            scaling_group_names={g.spec.group_id.lower(): g.name for g in view.claims.scaling_groups},
            max_unavailable=resolve_max_unavailable(view.node_image.spec.max_unavailable, size),
            identity_wait=view.node_image.spec.heir_ready_deadline,
        )
        pairs = [ReplacementPair(current[p.donor.name], current[p.heir.name]) for p in pairing.pairs]
        view.progress.unavailable_left = unavailable_allowance(context.max_unavailable, pairs)
        for replacement in pairs:
            self._advance(context, replacement, current, view.progress)
        for node in view.groups.obsolete:
            self._take_out(context, current[node.name], None, current, view.progress)
        if not rolling_back:
            done = [current[node.name] for node in view.groups.up_to_date if node.name in current]
            self._mark_ready_seen(current, done)

    def _handle_stuck_drains(self, view: _View, memory: RolloutMemory) -> RolloutMemory:
        """Apply undrainableNodeBehavior to drains past their timeout; returns the memory, Failed
        when the rollout must stop."""
        spec = view.node_image.spec
        blocked = len(view.groups.quarantined)
        for name in view.progress.overdue_drains:
            heir_of = view.current[name].heir if name in view.current else ""
            cordon = spec.undrainable_node_behavior is UndrainableNodeBehavior.CORDON
            if cordon and heir_of and blocked < spec.max_blocked_nodes:
                context = RemovalContext(view.obj, spec.drain_deadline, "", {})
                self._quarantine(context, view.current, name)
                blocked += 1
                continue
            why = (
                "Fail" if not cordon else f"more than maxBlockedNodes ({spec.max_blocked_nodes}) quarantined"
            )
            return replace(
                memory,
                state=RolloutState.FAILED,
                failure_reason="DrainTimeout",
                failure_message=f"Drain of {name} not done within {spec.drain_timeout} ({why})",
            )
        return memory

    def _scale(
        self,
        view: _View,
        pairing: PairingPlan,
        budget: int,
        canary_cap: int | None,
        *,
        autoscaler_running: bool,
    ) -> ScaleOutPlan:
        """Step 6: new machines within the budget (and the canary's cap; 0 creates none)."""
        plan = plan_scale_out(
            view.groups,
            pairing,
            view.pending,
            view.claims.scaling_groups,
            desired_image=view.desired,
            budget=budget,
            autoscaler_running=autoscaler_running,
            in_progress=view.coming.counts,
        )
        plan = cap_scale_out(plan, view.groups, view.pending, canary_cap, view.coming.counts)
        for scale_out in plan.scale_outs:
            group = next(g for g in view.claims.scaling_groups if g.spec.group_id == scale_out.group_id)
            self._scale_out(view.obj, group, scale_out.count, view.desired)
        return plan

    def _report(self, view: _View, memory: RolloutMemory, budget: int, plan: ScaleOutPlan) -> None:
        """Write the status (lists, rollout state, conditions); the state metric; a log line."""
        groups, progress = view.groups, view.progress
        generation = int(view.obj["metadata"].get("generation", 0))
        status = node_image_status(groups, view.pending, budget=budget, observed_generation=generation)
        status = replace(status, **memory.status_fields())
        conditions = rollout_conditions(
            groups,
            view.pending,
            image=view.desired.format(),
            steps=progress.steps,
            scale_out=plan,
            stuck_drains=progress.stuck_drains,
            stuck_heir_networks=progress.heir_networks_stuck,
        )
        broken = [
            f"ScalingGroup {group.name}: {condition.reason}: {condition.message}"
            for group in view.claims.scaling_groups
            for condition in group.status.conditions
            if condition.type == CONDITION_IMAGE_APPLIED and condition.status == "False"
        ]
        conditions = overlay_conditions(
            conditions,
            memory,
            conflicts=view.claims.conflicts,
            broken_groups=broken,
            evicted_pods_waiting=ReplacementStep.WAIT_FOR_EVICTED_PODS in progress.steps,
            quarantined=[node.name for node in groups.quarantined],
        )
        self._claim_checks.report_conflict(view.obj, view.claims.conflicts)
        self._write_status(view.obj, status.to_dict(), conditions)
        self._metrics.rollout_state(view.node_image.name, memory.state)
        log.info(
            "Reconciled NodeImage",
            node_image=view.node_image.name,
            state=memory.state.value if memory.state else "",
            outdated=len(groups.outdated),
            donors=len(groups.donors),
            heirs=len(groups.heirs),
            mints=len(groups.mints),
            pending=len(view.pending),
            budget=budget,
            scaled_out=plan.total,
        )

    # ---- reads --------------------------------------------------------------------------------

    def _all_scaling_groups(self) -> list[ScalingGroup]:
        return parse_scaling_groups(self._stores.scaling_groups.list())

    def _node_image_objects(self) -> list[tuple[str, dict[str, Any]]]:
        return [(str(o["metadata"]["name"]), o) for o in self._stores.node_images.list()]

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

    def _annotated_nodes(
        self, claims: Claims, name: str, coming: StepsInFlight
    ) -> tuple[list[ClusterNode], set[str]]:
        """The Nodes of the claimed scale sets (by annotation or providerID), annotated with their
        scale set and image when they were not yet; the names of those the cloud cannot find
        (grouping marks them invalid; the Degraded condition and its one Event name them)."""
        nodes: list[ClusterNode] = []
        invalid: set[str] = set()
        for claimed in self._claimed_nodes(claims, name):
            node = claimed
            if not node.scaling_group_id or not node.image:
                annotations, problem = self._placement(node, step_machine=coming.adds(node))
                if problem is not None:
                    invalid.add(node.name)
                    log.info("Found node the cloud cannot place", node=node.name, problem=problem)
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

    def _claimed_nodes(self, claims: Claims, name: str) -> list[ClusterNode]:
        """The cached Nodes of the claimed pools, found through the pool index (never a scan of
        every Node), VM nodes not placed yet placed first (a Flexible member gets its scale set);
        sorted by name. Only these are decoded (their number is the nodes-read metric)."""
        found = {
            node.name: node
            for node in map(ClusterNode.from_object, pool_nodes(self._stores.nodes, claims.scale_set_ids))
        }
        for cached in unplaced_nodes(self._stores.nodes, self.known_standalone):
            placed = self._place_member(ClusterNode.from_object(cached))
            found[placed.name] = placed  # kept below only when its pool is claimed
        self._metrics.nodes_read(name, len(found))
        return sorted(nodes_claimed(found.values(), claims), key=lambda n: n.name)
