"""Replacing and removing nodes, one pair at a time: the writes of steps 3 and 4 of the NodeImage
reconcile (see ``node_image``).

Pairing marks are written heir first (its donor annotation with the lasting served-as-heir mark, in
one patch), then donor; stale marks are released (a released heir keeps its served-as-heir mark) and
nodes an abandoned replacement left cordoned are made schedulable again. Per pair: labels are
copied, the heir must be Ready, then the heir's IP pool must be able to take the donor's pods
(``heir_network``, read from the NodeNetworkConfigs' status; while the donor holds pods bound for
the heir, the heir carries the ``nodewright.io/incoming-pods`` annotation, first written in the
pairing patch itself, so IPAM sizes its pool for them first and once) and the heir's machine must
hold the identities the donor's pods use (``heir_identity``, read from the AzureAssignedIdentities'
status); only then is the donor cordoned and drained (Eviction API, PodDisruptionBudgets respected,
never forced; the pods about to be evicted are first recorded on the heir for the evicted-pods
health gate, ``evicted_pods``) and handed to a Leave PendingNode, once fresh reads (not the cache)
still show the heir Ready and no pod left to drain on the node. Every other pod read is the cache's
(the Pod informer's ``spec.nodeName`` and namespace indexes). A drain not done within the
reconciler's ``drainTimeoutSeconds`` is reported (Degraded DrainStuck); one not done within the
NodeImage's ``drainTimeout`` meets ``undrainableNodeBehavior``: under ``Cordon`` the donor is
labelled ``nodewright.io/upgrade-status=Quarantined``, stays cordoned and its heir is released (at
most ``maxBlockedNodes``); otherwise the rollout fails. New-image nodes get the ready-seen mark the
health gate reads. Side effects: Node patches, evictions, PendingNode creates, Events, metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from nodewright.api.nodewright.v1alpha1 import (
    INCOMING_PODS_ANNOTATION,
    QUARANTINE_LABEL,
    IncomingPods,
    PendingNodeGoal,
    PendingNodeSpec,
)
from nodewright.cloud.resource_ids import InvalidResourceIdError, ScaleSetInstanceId, parse_provider_id
from nodewright.controllers.node_image.draining import DrainPlan, PodKey, plan_drain
from nodewright.controllers.node_image.evicted_pods import (
    EVICTED_PODS_ANNOTATION,
    EvictedPodsVerdict,
    EvictionCheck,
    EvictionRecord,
    PodFacts,
    PodFactsCache,
    check_eviction_facts,
    controller_of,
    new_record,
)
from nodewright.controllers.node_image.evictions import evict_all
from nodewright.controllers.node_image.grouping import (
    DONOR_ANNOTATION,
    DRAIN_STARTED_ANNOTATION,
    HEIR_ANNOTATION,
    OBSOLETE_ANNOTATION,
    SERVED_AS_HEIR_ANNOTATION,
    ClusterNode,
    StaleJoin,
)
from nodewright.controllers.node_image.heir_identity import heir_identities_missing
from nodewright.controllers.node_image.heir_network import (
    heir_pool_verdict,
    incoming_pods,
    pods_needing_addresses,
)
from nodewright.controllers.node_image.node_placement import NodePlacement
from nodewright.controllers.node_image.pairing import (
    PairingPlan,
    ReplacementPair,
    ReplacementStep,
    labels_to_copy,
    removal_step,
    replacement_step,
)
from nodewright.controllers.node_image.pools import (
    ASSIGNED_NODE_INDEX,
    ASSIGNED_TARGET_INDEX,
    POD_CONTROLLER_INDEX,
    POD_NODE_INDEX,
)
from nodewright.controllers.node_image.rollout_state import READY_SEEN_ANNOTATION
from nodewright.runtime import (
    NODE,
    POD,
    errors,
    format_time,
    get_logger,
    object_key,
    parse_time,
)

__all__ = ["QUARANTINED", "NodeReplacement", "RemovalContext", "ReplacementPass"]

log = get_logger(__name__)

INCOMING_PODS_LIFETIME = timedelta(minutes=10)
"""How long a heir's incoming-pods expectation holds unless refreshed (at half of it, by a pass
that still sees the donor's pods): a rollout that crashed or was abandoned lets it lapse."""

QUARANTINED = "Quarantined"
"""The value of ``nodewright.io/upgrade-status`` on a node that could not be drained in time."""


@dataclass
class ReplacementPass:
    """What one reconcile learned while writing, for the status and the requeue."""

    steps: list[ReplacementStep] = field(default_factory=list)
    stuck_drains: list[str] = field(default_factory=list)
    waiting_for_pods: bool = False
    heirs_short_of_addresses: list[str] = field(default_factory=list)
    heir_networks_stuck: list[str] = field(default_factory=list)
    """Heirs whose pool is short while their subnet is full (``heir_network``: Degraded)."""
    heirs_short_of_identities: list[str] = field(default_factory=list)
    overdue_drains: list[str] = field(default_factory=list)
    """Drains not done within the NodeImage's drainTimeout (undrainableNodeBehavior applies)."""
    unavailable_left: int = 0
    """How many more donors may be cordoned before their heir is Ready (``unavailable``)."""


@dataclass(frozen=True)
class RemovalContext:
    """What a removal needs to know of its rollout: the NodeImage (owner of the PendingNodes), the
    drain timeout, the metrics' reason, and the ScalingGroup names by lowercased scale set ID."""

    owner: dict[str, Any]
    drain_timeout: timedelta
    reason: str
    scaling_group_names: Mapping[str, str]
    max_unavailable: int = 0
    """The NodeImage's maxUnavailable, resolved to a count."""
    identity_wait: timedelta = timedelta(minutes=10)
    """How long a VM heir (its own identity target) is waited for after it registered (the
    NodeImage's heirReadyTimeout)."""


class NodeReplacement(NodePlacement):
    """Pairing and the per-pair steps (see the module docstring)."""

    _pod_facts: PodFactsCache
    """What the eviction gate read of each pod, kept while the pod is unchanged."""

    def _apply_pairing(self, pairing: PairingPlan, current: dict[str, ClusterNode]) -> None:
        for pair in pairing.to_annotate:
            mark: dict[str, str | None] = {
                DONOR_ANNOTATION: pair.donor.name,
                SERVED_AS_HEIR_ANNOTATION: pair.donor.name,
            }
            if self._node_network_configs(pair) is not None:  # announced in the same patch: IPAM
                mark |= self._incoming_mark(pair, pair.heir, self._pods_on(pair.donor.name))
            self._annotate(current, pair.heir.name, mark, "pair-heir")
            self._annotate(current, pair.donor.name, {HEIR_ANNOTATION: pair.heir.name}, "pair-donor")
            if pair.pending_node is not None:
                self._delete_pending_node(pair.pending_node, "delete-mint-record")
            log.info("Paired nodes", donor=pair.donor.name, heir=pair.heir.name)
        for mint in pairing.unneeded_mints:
            self._annotate(current, mint.node.name, {OBSOLETE_ANNOTATION: "true"}, "mark-obsolete")
            self._delete_pending_node(mint.pending_node, "delete-mint-record")
        for heir in pairing.clear_donor_annotation:
            released = {
                DONOR_ANNOTATION: None,
                INCOMING_PODS_ANNOTATION: None,
                SERVED_AS_HEIR_ANNOTATION: heir.served_as_heir,
            }
            self._annotate(current, heir.name, released, "release-heir")
        for donor in pairing.clear_heir_annotation:
            self._annotate(current, donor.name, {HEIR_ANNOTATION: None}, "release-donor")

    def _ignore_stale_join(self, owner: dict[str, Any], stale: StaleJoin) -> None:
        """Delete a Join naming a node that already served as a heir, with one Warning Event on
        the NodeImage and one log line (once: the record is gone after)."""
        pending, node = stale.pending_node, stale.node
        self._delete_pending_node(pending, "delete-stale-join")
        message = (
            f"Join PendingNode {pending.name} names {node.name}, which already served as heir of "
            f"{node.served_as_heir}: ignored and deleted"
        )
        self._events.event(owner, "Warning", "StaleJoinIgnored", message)
        log.info(
            "Ignored stale Join PendingNode",
            pending_node=pending.name,
            node=node.name,
            heir_of=node.served_as_heir,
        )

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

    def _mark_ready_seen(self, current: dict[str, ClusterNode], nodes: list[ClusterNode]) -> None:
        """Record on each Ready new-image node that it was Ready (the health gate's memory)."""
        for node in nodes:
            if node.ready and READY_SEEN_ANNOTATION not in node.annotations:
                stamp = format_time(self._clock())
                self._annotate(current, node.name, {READY_SEEN_ANNOTATION: stamp}, "mark-ready-seen")

    def _advance(
        self,
        context: RemovalContext,
        pair: ReplacementPair,
        current: dict[str, ClusterNode],
        progress: ReplacementPass,
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
        configs = self._node_network_configs(pair)
        donor_pods = [] if configs is None else self._announce_incoming(pair, current)
        if step is ReplacementStep.WAIT_FOR_HEIR_READY:
            progress.steps.append(step)
            if not _may_drain_early(context, pair, progress):
                return
        elif (
            step is ReplacementStep.CORDON
            and configs is not None
            and self._heir_short_of_addresses(context, pair, configs, donor_pods, progress)
        ):
            progress.steps.append(ReplacementStep.WAIT_FOR_HEIR_NETWORK)
            progress.heirs_short_of_addresses.append(pair.heir.name)
            return
        elif step is ReplacementStep.CORDON and self._heir_short_of_identities(context, pair):
            progress.steps.append(ReplacementStep.WAIT_FOR_HEIR_IDENTITIES)
            progress.heirs_short_of_identities.append(pair.heir.name)
            return
        self._take_out(context, pair.donor, pair.heir, current, progress)

    def _node_network_configs(
        self, pair: ReplacementPair
    ) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
        """The donor's and the heir's NodeNetworkConfigs, as cached; ``None`` when the donor has
        none (not on pod-subnet networking, or IPAM is not watched): no gate, nothing to announce."""
        store = self._stores.node_network_configs
        namespace = self._settings.node_network_config_namespace
        if store is None or not namespace:
            return None
        donor_config = store.get(f"{namespace}/{pair.donor.name}")
        if donor_config is None:
            return None
        return donor_config, store.get(f"{namespace}/{pair.heir.name}")

    def _announce_incoming(
        self, pair: ReplacementPair, current: dict[str, ClusterNode]
    ) -> list[dict[str, Any]]:
        """Tell IPAM how many of the donor's pods the heir is about to need IPs for (the
        incoming-pods annotation on the heir; removed once none are left to move), so it sizes
        the heir's pool before the gate asks for it. Returns the donor's pods, as cached. (The
        first announcement rides on the pairing patch, ``_apply_pairing``: this keeps it true.)"""
        pods = self._pods_on(pair.donor.name)
        heir = current.get(pair.heir.name, pair.heir)
        mark = self._incoming_mark(pair, heir, pods)
        if mark:
            self._annotate(current, pair.heir.name, mark, "announce-incoming")
            count = incoming_pods(pods)
            log.info("Announced incoming pods", donor=pair.donor.name, heir=pair.heir.name, pods=count)
        return pods

    def _incoming_mark(
        self, pair: ReplacementPair, heir: ClusterNode, donor_pods: list[dict[str, Any]]
    ) -> dict[str, str | None]:
        """The incoming-pods annotation to write on the heir now (``None`` removes it); empty
        when the heir carries the right one already, refreshed at half its lifetime."""
        count = incoming_pods(donor_pods)
        if not count:
            return {INCOMING_PODS_ANNOTATION: None} if INCOMING_PODS_ANNOTATION in heir.annotations else {}
        known = IncomingPods.parse(heir.annotations.get(INCOMING_PODS_ANNOTATION))
        now = self._clock()
        fresh = (
            known is not None
            and (known.donor, known.pods) == (pair.donor.name, count)
            and known.expires - now > INCOMING_PODS_LIFETIME / 2
        )
        if fresh:
            return {}
        return {
            INCOMING_PODS_ANNOTATION: IncomingPods(
                pair.donor.name, count, now + INCOMING_PODS_LIFETIME
            ).format()
        }

    def _heir_short_of_addresses(
        self,
        context: RemovalContext,
        pair: ReplacementPair,
        configs: tuple[dict[str, Any], dict[str, Any] | None],
        donor_pods: list[dict[str, Any]],
        progress: ReplacementPass,
    ) -> bool:
        """Whether the heir's IP pool cannot take the donor's pods yet (logged with why; a pool
        that cannot grow is reported, one that can never hold them all lets the donor go with a
        Warning Event once it is full)."""
        heir_pods = self._pods_on(pair.heir.name)
        verdict = heir_pool_verdict(
            *configs,
            incoming=incoming_pods(donor_pods),
            resident=pods_needing_addresses(heir_pods, moving=False),
        )
        if verdict.waits is None:
            if verdict.short is not None:
                message = f"Heir {pair.heir.name} of {pair.donor.name}: {verdict.short}"
                self._events.event(context.owner, "Warning", "HeirNetworkShort", message)
            return False
        if verdict.stuck:
            progress.heir_networks_stuck.append(pair.heir.name)
        donor, heir = pair.donor.name, pair.heir.name
        log.info("Donor waits for its heir's IP pool", donor=donor, heir=heir, why=verdict.waits)
        return True

    def _heir_short_of_identities(self, context: RemovalContext, pair: ReplacementPair) -> bool:
        """Whether the heir's machine lacks identities the donor's pods use (logged with which).
        A VM heir is its own identity target, and the identity reconciler puts identities on a VM
        only once a pod using them runs there: it is waited for ``identity_wait`` after it
        registered, then the donor goes on with a Warning Event naming what is missing."""
        store = self._stores.assigned_identities
        if store is None:
            return False
        try:
            machine = parse_provider_id(pair.heir.provider_id)
        except InvalidResourceIdError:
            return False  # grouping reports a node the cloud cannot place
        target = machine.scale_set if isinstance(machine, ScaleSetInstanceId) else machine
        relevant = {  # the donor's and those on the heir's target, not every one in the cluster
            object_key(assigned): assigned
            for assigned in [
                *store.by_index(ASSIGNED_NODE_INDEX, pair.donor.name),
                *store.by_index(ASSIGNED_TARGET_INDEX, str(target).lower()),
            ]
        }
        missing = heir_identities_missing(relevant.values(), donor=pair.donor.name, heir_target=str(target))
        if not missing:
            return False
        created = pair.heir.created
        waited = created is not None and self._clock() - created >= context.identity_wait
        if not isinstance(machine, ScaleSetInstanceId) and waited:
            message = (
                f"Heir {pair.heir.name} of {pair.donor.name} still lacks identities after "
                f"{context.identity_wait}: {', '.join(missing)}; draining anyway"
            )
            self._events.event(context.owner, "Warning", "HeirIdentitiesMissing", message)
            return False
        log.info(
            "Donor waits for its heir's identities",
            donor=pair.donor.name,
            heir=pair.heir.name,
            missing=", ".join(missing),
        )
        return True

    def _take_out(
        self,
        context: RemovalContext,
        node: ClusterNode,
        heir: ClusterNode | None,
        current: dict[str, ClusterNode],
        progress: ReplacementPass,
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
            message = f"Cordoned {node.name}" + (f" for heir {heir.name}" if heir else "")
            self._events.event(context.owner, "Normal", "CordonedNode", message)
        drain = self._drain(node, self._settings.timeouts.drain, heir)
        if drain.stuck:
            progress.stuck_drains.append(node.name)
        started = parse_time(node.annotations.get(DRAIN_STARTED_ANNOTATION))
        if not drain.done and started is not None and self._clock() - started >= context.drain_timeout:
            progress.overdue_drains.append(node.name)
        step = removal_step(node, drain)
        progress.steps.append(step)
        if step is ReplacementStep.DRAIN:
            progress.waiting_for_pods = True
            return
        if heir is not None and not heir.ready:
            return  # drained early (maxUnavailable): the node leaves only once its heir is Ready
        self._hand_over(context, node, heir)

    def _hand_over(self, context: RemovalContext, node: ClusterNode, heir: ClusterNode | None) -> None:
        """Create the node's Leave PendingNode; counted in the metrics when it is new. The Leave
        deletes the machine without looking back, so a donor's heir is read from the API server
        once more just before: the cached copy the pass decided on may not show it NotReady yet."""
        spec = PendingNodeSpec(
            provider_id=node.provider_id,
            group_id=node.scaling_group_id,
            node_name=node.name,
            goal=PendingNodeGoal.LEAVE,
            deadline=format_time(self._clock() + self._settings.timeouts.leave),
        )
        cached = self._stores.pending_nodes.get(node.name) or {}
        if (cached.get("spec") or {}).get("goal") == PendingNodeGoal.LEAVE.value:
            return  # handed over already: no fresh reads, no create answered AlreadyExists

        def confirm() -> bool:
            return self._drained_on_server(node) and (heir is None or self._heir_still_ready(node, heir))

        if not self._create_pending_node(context.owner, spec, "create-leave", confirm).metadata.get("uid"):
            return  # it existed already (a restart: counted then), or the heir is no longer Ready
        group = context.scaling_group_names.get(node.scaling_group_id.lower(), node.scaling_group_id)
        seconds = None
        if heir is not None and heir.created is not None:
            seconds = (self._clock() - heir.created).total_seconds()
        self._metrics.node_replaced(context.reason if heir is not None else "Obsolete", group, seconds)

    def _pods_on(self, node: str) -> list[dict[str, Any]]:
        """The cached pods bound to ``node`` (through the informer's index, never a LIST)."""
        return self._stores.pods.by_index(POD_NODE_INDEX, node)

    def _plan_drain(self, node: ClusterNode, pods: list[dict[str, Any]], timeout: timedelta) -> DrainPlan:
        return plan_drain(
            pods,
            self._stores.pod_disruption_budgets.list(),
            now=self._clock(),
            drain_started=parse_time(node.annotations.get(DRAIN_STARTED_ANNOTATION)),
            timeout=timeout,
        )

    def _drained_on_server(self, node: ClusterNode) -> bool:
        """Whether the API server, asked now for the node's pods (one LIST narrowed to the node,
        not the cache), agrees that nothing is left to evict or wait for: the Leave deletes the
        machine, so a pod bound a moment ago and not cached yet must hold it back."""
        pods = self._client.list(POD, field_selector=f"spec.nodeName={node.name}").items
        if self._plan_drain(node, pods, self._settings.timeouts.drain).done:
            return True
        log.info("Node stays: the API server still shows pods to drain", node=node.name)
        return False

    def _heir_still_ready(self, donor: ClusterNode, heir: ClusterNode) -> bool:
        """Whether the heir is Ready as the API server has it now (a fresh read, not the cache)."""
        try:
            ready = ClusterNode.from_object(self._client.get(NODE, heir.name)).ready
        except errors.NotFound:
            ready = False
        if not ready:
            log.info("Donor stays: its heir is no longer Ready", donor=donor.name, heir=heir.name)
        return ready

    def _record_evictions(
        self, donor: ClusterNode, heir: ClusterNode, pods: list[dict[str, Any]], evict: list[PodKey]
    ) -> None:
        """Merge the pods about to be evicted (those with a controller) into the heir's record."""
        wanted = {str(key) for key in evict}
        controlled = {
            key: owner
            for pod in pods
            if (key := f"{pod['metadata'].get('namespace', '')}/{pod['metadata'].get('name', '')}") in wanted
            and (owner := controller_of(pod)) is not None
        }
        if not controlled:
            return
        now = self._clock()
        record = EvictionRecord.parse(heir.annotations.get(EVICTED_PODS_ANNOTATION))
        if record is None or record.donor != donor.name:
            record = new_record(donor.name, controlled, now)
        else:
            record = record.merged(controlled, now)
        body = {"metadata": {"annotations": {EVICTED_PODS_ANNOTATION: record.format()}}}
        self._patch(NODE, self._stores.nodes, heir.name, body, "record-evictions")

    def _check_evicted_pods(self, nodes: Iterable[ClusterNode], timeout: timedelta) -> list[EvictionCheck]:
        """The eviction records on ``nodes`` checked against their namespaces' pods (as cached)."""
        records = {
            node.name: record
            for node in nodes
            if (record := EvictionRecord.parse(node.annotations.get(EVICTED_PODS_ANNOTATION))) is not None
        }
        return check_eviction_facts(
            records, self._recorded_pods(records.values()), now=self._clock(), timeout=timeout
        )

    def _recorded_pods(self, records: Iterable[EvictionRecord]) -> list[PodFacts]:
        """What ``check_evictions`` reads of the records' namespaces, through the indexes: the
        pods of the controllers they name and those still on their donors (work proportional to
        the evicted workloads, not to the namespace, which may hold every pod of the cluster),
        each decoded from the store only when it changed (``PodFactsCache.of_stored``: decoding
        them was half of a pass's CPU at 1,000 nodes)."""
        controllers: set[str] = set()
        donors: set[str] = set()
        for record in records:
            controllers.update(f"{key.split('/', 1)[0]}/{owner}" for key, owner in record.pods.items())
            donors.add(record.donor)
        pods = self._stores.pods
        found: dict[str, object] = {}
        for controller in sorted(controllers):
            found.update(pods.by_index_stored(POD_CONTROLLER_INDEX, controller))
        for donor in sorted(donors):
            found.update(pods.by_index_stored(POD_NODE_INDEX, donor))
        return self._pod_facts.of_stored(found.items(), pods.decode)

    def _settle_evictions(
        self, checks: Iterable[EvictionCheck], current: dict[str, ClusterNode], *, gated: bool
    ) -> bool:
        """Remove the records that are done: satisfied once their donor is gone or unpaired, and
        overdue ones once no gate reads them (the failure is in the status by then). Returns
        whether any record still waits."""
        waiting = False
        for check in checks:
            donor = current.get(check.record.donor)
            donor_done = donor is None or donor.heir != check.heir
            satisfied = check.verdict is EvictedPodsVerdict.SATISFIED
            if (satisfied and donor_done) or (check.verdict is EvictedPodsVerdict.OVERDUE and not gated):
                self._annotate(current, check.heir, {EVICTED_PODS_ANNOTATION: None}, "clear-evictions")
                log.info("Found evicted pods settled", heir=check.heir, donor=check.record.donor)
            elif not satisfied:
                waiting = True
        return waiting

    def _quarantine(self, context: RemovalContext, current: dict[str, ClusterNode], name: str) -> None:
        """Leave a node that could not be drained cordoned, labelled Quarantined, its heir freed."""
        body = {
            "metadata": {"labels": {QUARANTINE_LABEL: QUARANTINED}, "annotations": {HEIR_ANNOTATION: None}}
        }
        patched = self._patch(NODE, self._stores.nodes, name, body, "quarantine")
        if patched is not None:
            current[name] = ClusterNode.from_object(patched)
            message = (
                f"Drain of {name} not done within {context.drain_timeout}: left cordoned and quarantined"
            )
            self._events.event(context.owner, "Warning", "NodeQuarantined", message)
            log.info("Quarantined node", node=name)

    def _drain(self, node: ClusterNode, timeout: timedelta, heir: ClusterNode | None = None) -> DrainPlan:
        """Plan the node's drain and evict what the plan allows now, recorded on the heir first
        (side effects: the record, evictions). The pods are the cache's: a pod it does not show
        yet is found by the fresh read before the node leaves (``_drained_on_server``)."""
        pods = self._pods_on(node.name)
        plan = self._plan_drain(node, pods, timeout)
        if heir is not None and plan.evict:
            self._record_evictions(node, heir, pods, plan.evict)
        plan.blocked.update(evict_all(self._client.evict, node.name, plan.evict, self._checkpoint))
        if plan.evict:
            plan.terminating.extend(k for k in plan.evict if k not in plan.blocked)
            plan.evict = []
        if plan.blocked:
            names = "; ".join(f"{key}: {why}" for key, why in sorted(plan.blocked.items()))
            log.info("Drain waiting for disruption budgets", node=node.name, pods=names)
        return plan


def _may_drain_early(context: RemovalContext, pair: ReplacementPair, progress: ReplacementPass) -> bool:
    """Whether the donor may be cordoned and drained while its heir is not Ready: one that is
    cordoned already goes on draining; a new one spends the maxUnavailable allowance. The IP-pool
    gate does not apply (the pods cannot land on a heir that is not Ready)."""
    if context.max_unavailable <= 0:
        return False
    if pair.donor.unschedulable:
        return True
    if progress.unavailable_left > 0:
        progress.unavailable_left -= 1
        return True
    return False
