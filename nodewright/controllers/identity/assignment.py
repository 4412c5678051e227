"""The identity assignment reconciler: one pass per VM or scale set (the *target*), level-based.

A pass reads (``reading``) the target's nodes, their labelled pods, the identities, bindings and
the AzureAssignedIdentities recorded there; asks ``decisions`` what should exist; GETs the
target's identities once (or, when the pass writes, plans from what the last GET or PATCH left,
guarded by the target's etag, ``known_identities``); records new objects and the ownership
intent *before* the PATCH (``assigned_writes``); sends one delta PATCH (identities ARM refuses
are isolated and retried on a capped backoff, ``targets``); then records what landed (Assigned
only when the identity is on the target, otherwise Created with a reason) and deletes released
objects. MIC's Events.

Requests are typed keys (``keys``): a target by its lowercased ARM ID; every watch maps to
targets (``watches``). ``UNRESOLVED_PODS`` handles pods on nodes that are missing (retried on a
backoff, then collected, ``lifecycle``) or name no Azure VM or scale set, and MIC's objects whose
node is gone. Status-only churn is filtered out; each target is re-checked every
``repairInterval`` (drift repair, add only); a wave of changes is batched into one pass per
target (the work queue's shared ``BatchWindow``, set in ``__init__``).

Side effects: Kubernetes writes and Events, ARM calls through ``IdentityCompute``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from nodewright.api.aadpodidentity.v1 import (
    POD_LABEL,
    AzureAssignedIdentity,
    AzureIdentity,
    AzureIdentityBinding,
)
from nodewright.cloud.compute import IdentityUpdateIncompleteError
from nodewright.cloud.errors import CloudError, NotFoundError, PreconditionFailedError
from nodewright.cloud.models import IdentityRejection, IdentityUpdateResult, ResourceIdentities
from nodewright.controllers.identity.assigned_writes import AssignedIdentityWriter
from nodewright.controllers.identity.decisions import (
    EVENT_BINDING_APPLY_ERROR,
    DesiredAssignment,
    IdentityTarget,
    NodeInfo,
    PodInfo,
    assignment_changes,
    kept_and_new,
)
from nodewright.controllers.identity.intent import recorded_target
from nodewright.controllers.identity.keys import IdentityWork, TargetKey, target_key
from nodewright.controllers.identity.known_identities import KnownIdentities
from nodewright.controllers.identity.lifecycle import NodeWait, next_wait_in, node_wait_step
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
    IdentityOptions,
)
from nodewright.controllers.identity.pass_view import CloudOutcome, TargetView
from nodewright.controllers.identity.reading import (
    parse_assigned,
    parse_bindings,
    parse_identities,
    plan_desired,
    typed_target,
)
from nodewright.controllers.identity.targets import (
    AssignmentRecord,
    Rejection,
    assignment_outcome,
    drift_repairs,
    identities_to_attempt,
    identity_diff,
    keeps_confirmed,
    next_attempt_in,
    note_rejection,
    owned_by_nodewright,
    target_failure,
    update_throttled,
)
from nodewright.controllers.identity.validation import validate
from nodewright.controllers.identity.watches import (
    ASSIGNED_NODE_INDEX,
    ASSIGNED_POD_INDEX,
    ASSIGNED_TARGET_INDEX,
    BINDING_LABEL_INDEX,
    NODE_NAME_INDEX,
    TARGET_INDEX,
    assigned_node_index,
    assigned_pod_index,
    assigned_target_index,
    node_relevant_change,
    node_target_index,
    pod_binding_label_index,
    pod_node_index,
    pod_relevant_change,
    spec_or_deletion_change,
    target_key_of_node,
    with_kind,
)
from nodewright.runtime.cache_view import CacheView
from nodewright.runtime.client import Client
from nodewright.runtime.events import EventRecorder
from nodewright.runtime.kinds import NODE, POD
from nodewright.runtime.logs import get_logger
from nodewright.runtime.reconcile import Result

__all__ = [
    "CloudOutcome",
    "IdentityAssignmentReconciler",
    "IdentityCompute",
    "TargetView",
    "node_relevant_change",
    "pod_relevant_change",
    "spec_or_deletion_change",
]

log = get_logger(__name__)

MIN_REQUEUE = 0.05
"""Seconds: the soonest a pass comes back for a retry that is already due."""
READS_PER_PASS = 2
"""GETs a pass makes when the target changes between its GET and its PATCH (412) before it
gives up and retries later."""
REMEMBER_SECONDS = 60.0
"""How long a target's identities (with their etag) may stand in for a GET in a pass that writes."""


def _now() -> datetime:
    return datetime.now(UTC)


class IdentityCompute(Protocol):
    """The cloud operations this reconciler needs (``ComputeService`` provides them)."""

    def get_identities(self, target: IdentityTarget) -> ResourceIdentities: ...

    def update_identities(
        self,
        target: IdentityTarget,
        add: Iterable[str] = (),
        remove: Iterable[str] = (),
        *,
        current: ResourceIdentities | None = None,
        max_per_request: int | None = None,
    ) -> IdentityUpdateResult: ...


class IdentityAssignmentReconciler:
    """Drives each VM and scale set to carry exactly the identities its pods need (see the module
    docstring). One worker per target at a time (the work queue guarantees it); targets run in
    parallel up to the controller's ``max_concurrent_reconciles``."""

    def __init__(
        self,
        client: Client,
        cache: CacheView,
        compute: IdentityCompute,
        recorder: EventRecorder,
        options: IdentityOptions,
        *,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.client = client
        self.cache = cache
        self.compute = compute
        self.recorder = recorder
        self.options = options
        self.policy = options.policy
        self.clock = clock
        self.nodes = cache.informer(NODE)
        self.pods = cache.informer(POD, label_selector=POD_LABEL)
        self.identities = cache.informer(AZURE_IDENTITY)
        self.bindings = cache.informer(AZURE_IDENTITY_BINDING)
        self.assigned = cache.informer(AZURE_ASSIGNED_IDENTITY)
        self._rejected_lock = threading.Lock()
        self._rejected: dict[str, dict[str, Rejection]] = {}
        self._node_waits: dict[tuple[str, str, str], NodeWait] = {}
        self.known = KnownIdentities(max_age=REMEMBER_SECONDS, clock=time.monotonic)
        self.writer = AssignedIdentityWriter(
            client,
            self.bindings,
            recorder,
            self.policy,
            write_concurrency=options.write_concurrency,
            clock=clock,
        )

    def add_indexers(self) -> None:
        """Indexes the passes and map functions read (call before the cache starts)."""
        self.nodes.ensure_indexer(TARGET_INDEX, node_target_index)
        self.pods.ensure_indexer(NODE_NAME_INDEX, pod_node_index)
        self.pods.ensure_indexer(BINDING_LABEL_INDEX, pod_binding_label_index)  # the migration's too
        self.assigned.ensure_indexer(ASSIGNED_TARGET_INDEX, assigned_target_index)
        self.assigned.ensure_indexer(ASSIGNED_NODE_INDEX, assigned_node_index)
        self.assigned.ensure_indexer(ASSIGNED_POD_INDEX, assigned_pod_index)

    # --- map functions --------------------------------------------------------------------------

    def _target_request_of_node(self, node_name: str) -> IdentityWork:
        node = self.nodes.store.get(node_name)
        return target_key(target_key_of_node(node) if node is not None else "")

    def requests_for_pod(self, pod: dict[str, Any]) -> list[IdentityWork]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        return [self._target_request_of_node(str(node_name))] if node_name else []

    def requests_for_node(self, node: dict[str, Any]) -> list[IdentityWork]:
        return [target_key(target_key_of_node(node))]

    def _requests_for_selectors(self, selectors: Iterable[str]) -> list[IdentityWork]:
        requests: dict[IdentityWork, None] = {}
        for selector in selectors:
            if not selector:
                continue
            for pod in self.pods.store.by_index(BINDING_LABEL_INDEX, selector):
                for request in self.requests_for_pod(pod):
                    requests.setdefault(request, None)
        return list(requests)

    def requests_for_binding(self, binding: dict[str, Any]) -> list[IdentityWork]:
        return self._requests_for_selectors([str((binding.get("spec") or {}).get("selector") or "")])

    def requests_for_identity(self, identity: dict[str, Any]) -> list[IdentityWork]:
        metadata = identity.get("metadata") or {}
        selectors = [
            str((binding.get("spec") or {}).get("selector") or "")
            for binding in self.bindings.store.list()
            if (binding.get("metadata") or {}).get("namespace") == metadata.get("namespace")
            and (binding.get("spec") or {}).get("azureIdentity") == metadata.get("name")
        ]
        return self._requests_for_selectors(selectors)

    def requests_for_assigned(self, assigned: dict[str, Any]) -> list[IdentityWork]:
        requests: dict[IdentityWork, None] = {}
        target = recorded_target(assigned)
        if target:
            requests.setdefault(TargetKey(target), None)
        spec = assigned.get("spec") or {}
        if spec.get("nodename"):
            requests.setdefault(self._target_request_of_node(str(spec["nodename"])), None)
        pod = self.pods.store.get(f"{spec.get('podNamespace', '')}/{spec.get('pod', '')}")
        if pod is not None:
            for request in self.requests_for_pod(pod):
                requests.setdefault(request, None)
        return list(requests)

    # --- the pass ---------------------------------------------------------------------------------

    def reconcile(self, request: IdentityWork) -> Result:
        if isinstance(request, TargetKey):
            return self._reconcile_target(request.arm_id)
        return self._reconcile_unresolved()

    def _read_identities_and_bindings(self) -> tuple[list[AzureIdentity], list[AzureIdentityBinding]]:
        return parse_identities(self.identities.store.list()), parse_bindings(self.bindings.store.list())

    def _plan_desired(
        self, pods: list[PodInfo], existing_here: list[AzureAssignedIdentity]
    ) -> tuple[list[DesiredAssignment], set[tuple[str, str]]]:
        identities, bindings = self._read_identities_and_bindings()
        return plan_desired(
            pods,
            existing_here,
            identities,
            bindings,
            self.assigned.store.get,
            force_namespaced=self.policy.force_namespaced,
        )

    def _read_target(self, key: str) -> TargetView | None:
        """Read step: the target's nodes, their pods and the objects recorded there (as this
        process last wrote them while the cache is behind), and what should exist (None when the
        target has neither nodes nor objects)."""
        nodes = self.nodes.store.by_index(TARGET_INDEX, key)
        node_names = {str(node["metadata"]["name"]) for node in nodes}
        pods = [
            PodInfo.from_object(pod)
            for name in sorted(node_names)
            for pod in self.pods.store.by_index(NODE_NAME_INDEX, name)
        ]
        recorded = self.assigned.store.by_index(ASSIGNED_TARGET_INDEX, key)
        unrecorded = [
            obj
            for name in node_names
            for obj in self.assigned.store.by_index(ASSIGNED_NODE_INDEX, name)
            if not recorded_target(obj)
        ]
        existing_here = parse_assigned([*recorded, *unrecorded])
        if not nodes and not existing_here:
            return None
        desired, names_in_use = self._plan_desired(pods, existing_here)
        changes = assignment_changes(desired, existing_here, names_in_use=names_in_use)
        return TargetView(
            key=key,
            target=typed_target(key, nodes),
            has_nodes=bool(nodes),
            desired=desired,
            changes=changes,
            records_here=[r for r in (AssignmentRecord.of(a, node_target=key) for a in existing_here) if r],
            released={
                (a.namespace, a.name): AssignmentRecord.of(a, node_target=key) for a in changes.release
            },
        )

    def _reconcile_target(self, key: str) -> Result:
        view = self._read_target(key)
        if view is None:
            return Result()
        if view.touches_cloud:
            cloud = self._update_cloud(view)
        else:
            self.writer.write_intents(view.changes, key, frozenset(), view.records_here)
            cloud = CloudOutcome()
        self._record(view, cloud)
        if cloud.failure is not None:
            raise cloud.failure
        if not view.has_nodes:
            return Result()
        waiting = (cloud.attempt | cloud.held) - (cloud.landed or frozenset())
        retry = next_attempt_in(waiting, cloud.rejections, self.clock())
        interval = self.options.repair_interval
        # requeue_after 0 would mean "no requeue": a due retry comes back after a moment instead
        return Result(requeue_after=max(MIN_REQUEUE, min(interval, retry)) if retry is not None else interval)

    def _update_cloud(self, view: TargetView) -> CloudOutcome:
        """Apply step: the target's identities (remembered from the last pass when this pass
        writes, see ``known_identities``; else a GET), the delta, intents, then one delta PATCH
        (fewer only when ARM refuses an identity by name)."""
        remembered = self.known.fresh(view.key)
        if remembered is not None:
            remove, outcome = self._decide_cloud(view, remembered, target_gone=False)
            if outcome.attempt or remove:
                try:
                    return self._apply_cloud(view, remembered, outcome, remove)
                except PreconditionFailedError:
                    self.known.forget(view.key)
                    log.info("Found target changed since it was read, reading again", target=view.key)
        for _ in range(READS_PER_PASS):
            current, target_gone = self._read_cloud(view)
            remove, outcome = self._decide_cloud(view, current, target_gone=target_gone)
            try:
                return self._apply_cloud(view, current, outcome, remove)
            except PreconditionFailedError as error:  # changed between the GET and the PATCH
                self.known.forget(view.key)
                failed = dataclasses.replace(
                    outcome, landed=None, failure=error, untouched=current.user_assigned
                )
        return failed

    def _read_cloud(self, view: TargetView) -> tuple[ResourceIdentities, bool]:
        """The target's identities from a GET (remembered), and whether the target is gone."""
        try:
            current = self.compute.get_identities(view.target)
        except NotFoundError:
            log.info("Found target gone from Azure", target=view.key)
            self.known.forget(view.key)
            return ResourceIdentities(type="None", system_assigned=False, user_assigned=frozenset()), True
        self.known.remember(view.key, current)
        return current, False

    def _decide_cloud(
        self, view: TargetView, current: ResourceIdentities, *, target_gone: bool
    ) -> tuple[frozenset[str], CloudOutcome]:
        """Decide step: what to add (held back by ARM's refusals) and remove, given ``current``."""
        released = [r for r in view.released.values() if r is not None]
        diff = identity_diff(current.user_assigned, view.needs, released, self.policy)
        table = self._rejections_of(view.key)
        attempt, held = identities_to_attempt(diff.to_add, table, self.clock())
        if target_gone:
            attempt = frozenset()
        outcome = CloudOutcome(
            landed=current.user_assigned,
            attempt=attempt,
            held=held,
            rejections=table,
            retained=diff.retained,
            target_gone=target_gone,
        )
        return (frozenset() if target_gone else diff.to_remove), outcome

    def _apply_cloud(
        self, view: TargetView, current: ResourceIdentities, outcome: CloudOutcome, remove: frozenset[str]
    ) -> CloudOutcome:
        """Intents, then the PATCH when there is anything to change."""
        repairs = drift_repairs(current.user_assigned, view.records_here, view.key) & outcome.attempt
        if repairs:
            log.info("Re-added identities removed out of band", target=view.key, identities=sorted(repairs))
        self.writer.write_intents(view.changes, view.key, outcome.attempt, view.records_here)
        if outcome.attempt or remove:
            return self._send(view, current, outcome, remove)
        return outcome

    def _send(
        self,
        view: TargetView,
        current: ResourceIdentities,
        outcome: CloudOutcome,
        remove: frozenset[str],
    ) -> CloudOutcome:
        """The PATCH, and what landed (re-read after a failure by ``ComputeService``)."""
        key, attempt = view.key, outcome.attempt
        try:
            result = self.compute.update_identities(
                view.target,
                add=attempt,
                remove=remove,
                current=current,
                max_per_request=self.options.max_identities_per_request,
            )
        except PreconditionFailedError:
            raise
        except CloudError as error:
            self.known.forget(key)
            landed: frozenset[str] | None = None
            rejected: tuple[IdentityRejection, ...] = ()
            if isinstance(error, IdentityUpdateIncompleteError):
                landed = error.identities.user_assigned if error.identities is not None else None
                rejected = error.rejected
            table = self._note_rejections(key, rejected, landed, self.clock())
            untouched = current.user_assigned - attempt - remove
            return dataclasses.replace(
                outcome, landed=landed, rejections=table, failure=error, untouched=untouched
            )
        landed = result.identities.user_assigned
        self.known.remember(key, result.identities)
        table = self._note_rejections(key, result.rejected, landed, self.clock())
        log.info(
            "Updated identities",
            target=key,
            added=sorted(attempt & landed),
            removed=sorted(remove - landed),
            rejected=sorted(r.identity_id.lower() for r in result.rejected),
            requests=result.requests,
        )
        return dataclasses.replace(outcome, landed=landed, rejections=table)

    def _record(self, view: TargetView, cloud: CloudOutcome) -> None:
        """Status step: each kept or new object's outcome and the released objects; a failure of
        the whole update is announced once per binding. After a 429 an object with no status yet
        keeps its recorded intent, which the retry will carry out (no "failed" to rewrite)."""
        key, failure, failed = view.key, target_failure(cloud.failure), []
        throttled = update_throttled(cloud.failure)

        def decide(pair: tuple[AzureAssignedIdentity | None, DesiredAssignment]) -> None:
            assigned_object, wanted = pair
            if throttled and (assigned_object is None or not assigned_object.status.status):
                failed.append(wanted)  # the binding hears of it once
                return
            own = AssignmentRecord.of(assigned_object, node_target=key) if assigned_object else None
            if keeps_confirmed(own, key, cloud.landed, cloud.target_gone):
                return
            outcome = assignment_outcome(
                wanted,
                view.target,
                None if cloud.target_gone else cloud.seen,
                attempted=cloud.attempt,
                owned=owned_by_nodewright(view.records_here, key, wanted.resource_key)
                or (own is not None and own.target == key and own.added_by_nodewright),
                rejections=cloud.rejections,
                held=cloud.held,
                failure=failure,
            )
            if self.writer.record_outcome(wanted, assigned_object, outcome):
                failed.append(wanted)

        def release(released: AzureAssignedIdentity) -> None:
            record = view.released[(released.namespace, released.name)]
            self.writer.finish_release(released, record, cloud.landed, cloud.retained, cloud.target_gone)

        # Outcomes and releases are independent objects: written together, writeConcurrency at a time.
        work: list[tuple[Callable[[Any], None], Any]] = [(decide, p) for p in kept_and_new(view.changes)]
        work += [(release, released) for released in view.changes.release]
        self.writer.each(work, lambda item: item[0](item[1]))
        self.writer.announce_target_failure(failed, key, failure)

    def _rejections_of(self, key: str) -> dict[str, Rejection]:
        with self._rejected_lock:
            return dict(self._rejected.get(key, {}))

    def _note_rejections(
        self, key: str, rejected: Iterable[IdentityRejection], landed: frozenset[str] | None, now: datetime
    ) -> dict[str, Rejection]:
        """Count this pass's refusals (backoff grows) and forget identities that landed."""
        first, cap = self.policy.rejected_identity_first_retry, self.policy.rejected_identity_retry
        with self._rejected_lock:
            table = self._rejected.setdefault(key, {})
            for identity_id in landed or ():
                table.pop(identity_id.lower(), None)
            for rejection in rejected:
                identity_id = rejection.identity_id.lower()
                table[identity_id] = note_rejection(
                    table.get(identity_id), rejection.code, rejection.message, now, first=first, cap=cap
                )
            return dict(table)

    # --- pods on nodes with no Azure target ---------------------------------------------------

    def _unresolved_pods(self) -> tuple[list[PodInfo], dict[str, NodeInfo]]:
        """Active labelled pods on nodes that are missing or name no Azure target, and the nodes
        that exist among theirs."""
        unresolved_pods: list[PodInfo] = []
        node_infos: dict[str, NodeInfo] = {}
        for pod in self.pods.store.list():
            info = PodInfo.from_object(pod)
            if not info.is_active or not info.binding_label:
                continue
            node = self.nodes.store.get(info.node_name)
            if node is not None:
                node_infos[info.node_name] = NodeInfo.from_object(node)
                if target_key_of_node(node):
                    continue
            unresolved_pods.append(info)
        return unresolved_pods, node_infos

    def _step_node_waits(self, pods: list[PodInfo], node_infos: Mapping[str, NodeInfo]) -> list[PodInfo]:
        """Advance each waiting pod's backoff; the pods whose node is missing and that waited
        through all their attempts (their objects are collected, with a Warning Event once)."""
        now, policy = self.clock(), self.policy
        first, cap = policy.rejected_identity_first_retry, policy.rejected_identity_retry
        waiting = {(p.namespace, p.name, p.node_name): p for p in pods if p.node_name not in node_infos}
        exhausted: list[PodInfo] = []
        with self._rejected_lock:
            for stale in set(self._node_waits) - set(waiting):
                del self._node_waits[stale]
            for wait_key, pod in waiting.items():
                previous = self._node_waits.get(wait_key)
                wait = node_wait_step(previous, now, first, cap)
                self._node_waits[wait_key] = wait
                if wait.exhausted(policy.missing_node_attempts):
                    exhausted.append(pod)
                    if previous is None or not previous.exhausted(policy.missing_node_attempts):
                        self._report_collected(pod, wait.attempts - 1)
        return exhausted

    def _report_collected(self, pod: PodInfo, attempts: int) -> None:
        message = (
            f"Node {pod.node_name} does not exist after {attempts} attempts; "
            "the pod's AzureAssignedIdentity is collected until the node appears"
        )
        log.warning(
            "Collected AzureAssignedIdentity of pod on missing node", pod=f"{pod.namespace}/{pod.name}"
        )
        pod_object = self.pods.store.get(f"{pod.namespace}/{pod.name}")
        if pod_object is not None:
            self.recorder.event(with_kind(pod_object, "v1", "Pod"), "Warning", "NodeNotFound", message)

    def _reconcile_unresolved(self) -> Result:
        """Pods on nodes that are missing or name no Azure VM or scale set get their objects (so
        NMI and users see them) with a condition saying why nothing can be assigned, and a
        Warning Event; retried on a backoff, and for a missing node collected after
        ``missingNodeAttempts``. MIC's objects whose node is gone are deleted, as MIC did."""
        unresolved_pods, node_infos = self._unresolved_pods()
        exhausted = {(p.namespace, p.name) for p in self._step_node_waits(unresolved_pods, node_infos)}
        kept = [p for p in unresolved_pods if (p.namespace, p.name) not in exhausted]
        candidates = parse_assigned(self.assigned.store.by_index(ASSIGNED_TARGET_INDEX, ""))
        existing_here = [
            a
            for a in candidates
            if self.nodes.store.get(a.spec.node_name) is None
            or not target_key_of_node(self.nodes.store.get(a.spec.node_name) or {})
        ]
        desired, names_in_use = self._plan_desired(kept, existing_here)
        changes = assignment_changes(desired, existing_here, names_in_use=names_in_use)
        self.writer.write_intents(changes, "", frozenset(), [])
        self.writer.each(
            kept_and_new(changes),
            lambda pair: self.writer.record_outcome(
                pair[1],
                pair[0],
                assignment_outcome(pair[1], None, None, node_exists=pair[1].node_name in node_infos),
            ),
        )
        self._report_unresolved(desired, kept, node_infos)
        self.writer.each(
            changes.release,
            lambda assigned_object: self.writer.finish_release(assigned_object, None, None, {}, False),
        )
        with self._rejected_lock:
            retry = next_wait_in(self._node_waits.values(), self.clock(), self.policy.missing_node_attempts)
        return Result(requeue_after=max(MIN_REQUEUE, retry)) if retry is not None else Result()

    def _report_unresolved(
        self, desired: list[DesiredAssignment], pods: list[PodInfo], node_infos: Mapping[str, NodeInfo]
    ) -> None:
        """A Warning Event on each matched pod that cannot get its identity, saying why."""
        matched = {(d.key.pod_namespace, d.key.pod_name) for d in desired}
        identities, bindings = self._read_identities_and_bindings()
        matched_pods = [p for p in pods if (p.namespace, p.name) in matched]
        for problem in validate(identities, bindings, matched_pods, node_infos):
            pod_object = (
                self.pods.store.get(f"{problem.namespace}/{problem.name}") if problem.kind == "Pod" else None
            )
            if pod_object is not None:
                self.recorder.event(
                    with_kind(pod_object, "v1", "Pod"), "Warning", EVENT_BINDING_APPLY_ERROR, problem.message
                )
