"""The identity assignment reconciler: one pass per VM or scale set (the *target*), level-based.

A target's pass is four steps, each with one owner:

1. read (``reading.read_target``): the target's nodes, their labelled pods, the identities,
   bindings and the AzureAssignedIdentities recorded there, and what should exist (``TargetView``);
2. plan and apply (``cloud_update.TargetUpdates``): what the target holds (a GET, or what the last
   GET or PATCH left, guarded by its etag), the delta (``pass_plan.plan_update``, pure), the
   ownership intent recorded *before* the PATCH, then one delta PATCH (``CloudOutcome``);
3. plan the records (``pass_plan.plan_records``, pure): Assigned only when the identity is on the
   target, otherwise Created with a reason; released objects to delete;
4. record (``AssignedIdentityWriter.write_records``): statuses, deletes and MIC's Events.

Requests are typed keys (``keys``): a target by its lowercased ARM ID; every watch maps to
targets (``watches.TargetRequests``). ``UNRESOLVED_PODS`` runs ``unresolved``'s pass for pods on
nodes that are missing or name no Azure VM or scale set, and MIC's objects whose node is gone.
Each target is re-checked every ``repairInterval`` (drift repair, add only, ``pass_plan.next_pass``).

Side effects: Kubernetes writes and Events, ARM calls through ``IdentityCompute``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from nodewright.controllers.identity.assigned_writes import AssignedIdentityWriter
from nodewright.controllers.identity.cloud_update import IdentityCompute, TargetUpdates
from nodewright.controllers.identity.keys import IdentityWork, TargetKey
from nodewright.controllers.identity.options import IdentityOptions
from nodewright.controllers.identity.pass_plan import next_pass, plan_records
from nodewright.controllers.identity.pass_view import CloudOutcome
from nodewright.controllers.identity.reading import IdentityStores, read_target
from nodewright.controllers.identity.unresolved import UnresolvedPass
from nodewright.controllers.identity.watches import (
    ASSIGNED_NODE_INDEX,
    ASSIGNED_POD_INDEX,
    ASSIGNED_TARGET_INDEX,
    BINDING_LABEL_INDEX,
    NODE_NAME_INDEX,
    TARGET_INDEX,
    TargetRequests,
    assigned_node_index,
    assigned_pod_index,
    assigned_target_index,
    node_relevant_change,
    node_target_index,
    pod_binding_label_index,
    pod_node_index,
    pod_relevant_change,
    spec_or_deletion_change,
)
from nodewright.runtime import CacheView, Client, EventRecorder, Result

__all__ = [
    "IdentityAssignmentReconciler",
    "IdentityCompute",
    "node_relevant_change",
    "pod_relevant_change",
    "spec_or_deletion_change",
]


def _now() -> datetime:
    return datetime.now(UTC)


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
        self.options = options
        self.clock = clock
        self.stores = IdentityStores.of(cache)
        self.requests = TargetRequests(self.stores.nodes, self.stores.pods, self.stores.bindings)
        self.writer = AssignedIdentityWriter(
            client,
            self.stores.bindings,
            recorder,
            options.policy,
            write_concurrency=options.write_concurrency,
            clock=clock,
        )
        self.updates = TargetUpdates(
            compute,
            self.writer,
            options.policy,
            max_per_request=options.max_identities_per_request,
            clock=clock,
        )
        self.unresolved = UnresolvedPass(self.stores, self.writer, recorder, options.policy, clock)

    def add_indexers(self) -> None:
        """Indexes the passes and map functions read (call before the cache starts)."""
        self.stores.nodes.ensure_indexer(TARGET_INDEX, node_target_index)
        self.stores.pods.ensure_indexer(NODE_NAME_INDEX, pod_node_index)
        self.stores.pods.ensure_indexer(BINDING_LABEL_INDEX, pod_binding_label_index)  # the migration's too
        self.stores.assigned.ensure_indexer(ASSIGNED_TARGET_INDEX, assigned_target_index)
        self.stores.assigned.ensure_indexer(ASSIGNED_NODE_INDEX, assigned_node_index)
        self.stores.assigned.ensure_indexer(ASSIGNED_POD_INDEX, assigned_pod_index)

    def reconcile(self, request: IdentityWork) -> Result:
        if not isinstance(request, TargetKey):
            return self.unresolved.run()
        key = request.arm_id
        view = read_target(
            self.stores,
            key,
            force_namespaced=self.options.policy.force_namespaced,
        )
        if view is None:
            return Result()
        if view.touches_cloud:
            cloud = self.updates.apply(view)
        else:
            self.writer.write_intents(view.changes, key, frozenset(), view.records_here)
            cloud = CloudOutcome()
        self.writer.write_records(plan_records(view, cloud))
        if cloud.failure is not None:
            raise cloud.failure
        return next_pass(view, cloud, self.clock(), self.options.repair_interval)
