"""The writes of the NodeImage reconciler, shared by its steps: merge patches recorded for
read-your-writes, PendingNode creates and deletes, the status, autoscaling kept off while any
rollout runs, and scale-outs (a standalone group's new VM, see ``standalone``, or a scale set's
capacity step by any count, whose operation no worker waits for: ``scale_out_operations``),
recorded on their ScalingGroup first. The step's new machines, read side by side, are each
tracked by a Join PendingNode: at once when ARM lists them as it accepts the step (the record
is then cleared and the scale set is free for its next step while the operation runs), else in
the pass after the step ended (or after a restart), found by difference with the record. A new
machine is read once, by whichever of its Join and its Node's annotation comes first
(``remember_machine``, ``recall_machine``). Each write passes the checkpoint hook with its step's
name. Side effects: Kubernetes and ARM writes.
Neighbour: ``node_image`` (``NodeImageReconciler`` builds on ``RolloutWrites``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol

from nodewright.api.base import ValidationError
from nodewright.api.nodewright.v1alpha1 import (
    ENABLED_BEFORE_ROLLOUT_ANNOTATION,
    SCALE_OUT_ANNOTATION,
    AutoscalingStrategy,
    PendingNode,
    PendingNodeGoal,
    PendingNodeSpec,
    ScaleOutRecord,
    ScalingGroup,
)
from nodewright.cloud.errors import NotFoundError
from nodewright.cloud.models import ImageReference, InstanceInfo, ScaleOutAccepted
from nodewright.cloud.operations import OperationOutcome
from nodewright.cloud.resource_ids import (
    MachineId,
    ScaleSetId,
    ScaleSetInstanceId,
    parse_resource_group_id,
    parse_scale_set_id,
)
from nodewright.controllers.node_image.autoscaling_decisions import decide_autoscaling
from nodewright.controllers.node_image.collaborators import Collaborators, WithCollaborators
from nodewright.controllers.node_image.conditions import degraded_to_report
from nodewright.controllers.node_image.grouping import ClusterNode
from nodewright.controllers.node_image.resources import (
    AUTOSCALING_STRATEGY,
    NODE_IMAGE,
    PENDING_NODE,
    SCALING_GROUP,
    ReadYourWrites,
    controller_reference,
)
from nodewright.controllers.node_image.rollout_metrics import RolloutMetrics
from nodewright.controllers.node_image.scale_out import StepsInFlight
from nodewright.controllers.node_image.scale_out_operations import ScaleOutOperations
from nodewright.controllers.node_image.standalone import (
    CREATING_ANNOTATION,
    machine_model,
    new_machine_name,
)
from nodewright.runtime import (
    NODE,
    Kind,
    Store,
    errors,
    format_time,
    get_logger,
    replace_status,
    set_condition,
)

__all__ = ["SCALE_OUT_ANNOTATION", "NodeImageCloud", "NodeImageStores", "RolloutWrites"]

log = get_logger(__name__)

INSTANCE_READS_AT_ONCE = 8
"""A wave's new instances are read this many at a time (each read is one ARM GET either way)."""
MACHINES_KEPT = 1_000
"""New machines' reads kept for their other pass at most (machines that never register a Node
would otherwise be kept for ever)."""


class NodeImageCloud(Protocol):
    """The cloud operations the NodeImage reconciler needs (``ComputeService`` has them)."""

    def get_instance(self, machine: MachineId) -> InstanceInfo: ...

    def list_instance_ids(self, scale_set: ScaleSetId) -> list[str]: ...

    def scale_out(
        self,
        scale_set: ScaleSetId,
        count: int,
        record_before: Callable[[list[str]], None],
        on_done: Callable[[OperationOutcome], None],
    ) -> ScaleOutAccepted: ...


@dataclass(frozen=True)
class NodeImageStores:
    """The informer stores the reconciler reads (filled by the shared cache)."""

    node_images: Store
    nodes: Store
    pending_nodes: Store
    scaling_groups: Store
    autoscaling_strategies: Store
    pod_disruption_budgets: Store
    pods: Store
    """Every Pod, indexed by ``spec.nodeName`` (``POD_NODE_INDEX``) and controller
    (``POD_CONTROLLER_INDEX``): a pass reads the
    pods it drains and checks from here, and only the last look before a node leaves is fresh."""
    node_network_configs: Store | None = None
    """NodeNetworkConfigs of the configured namespace (``None``: no heir IP-pool gate)."""
    assigned_identities: Store | None = None
    """AzureAssignedIdentities (``None``: no heir identity gate)."""


class RolloutWrites(WithCollaborators[NodeImageCloud]):
    """Write helpers and the reconciler's collaborators (see the module docstring)."""

    def __init__(self, collaborators: Collaborators[NodeImageCloud], *, stores: NodeImageStores) -> None:
        super().__init__(collaborators)
        self._stores = stores
        self._writes = ReadYourWrites(collaborators.client)
        self._metrics = RolloutMetrics(collaborators.metrics)
        self._reported: dict[str, tuple[str, str]] = {}
        """The Degraded problem last reported per NodeImage (one Event per problem)."""
        self._standalone_machines: set[str] = set()
        """providerIDs of VM nodes the cloud says belong to no scale set (not asked again)."""
        self.scale_out_operations = ScaleOutOperations()
        """The scale-outs in flight; the ``nodeimage`` controller's source of their ends."""
        self._read_once: dict[str, InstanceInfo] = {}
        """A new machine read by one of the two passes that need it (its Join's, its Node's
        annotation), by lowercased providerID, for the other: the entry goes once used, and after
        a restart the read is made again. At most ``MACHINES_KEPT``, the oldest dropped first."""

    def _annotate(
        self, current: dict[str, ClusterNode], name: str, annotations: Mapping[str, str | None], step: str
    ) -> None:
        node = current.get(name)
        if node is not None and all(node.annotations.get(k) == v for k, v in annotations.items()):
            return  # already written (a restart came between this and the next write)
        patched = self._patch(
            NODE, self._stores.nodes, name, {"metadata": {"annotations": dict(annotations)}}, step
        )
        if patched is not None:
            current[name] = ClusterNode.from_object(patched)

    # ---- autoscaling --------------------------------------------------------------------------

    def _keep_autoscaling_off(self, in_progress: bool) -> bool:
        """Turn autoscaling off during a rollout and back to its earlier value after it;
        returns whether an autoscaler still runs (reported by its status)."""
        running = False
        for cached in sorted(self._stores.autoscaling_strategies.list(), key=lambda o: o["metadata"]["name"]):
            try:
                strategy = AutoscalingStrategy.from_object(copy.deepcopy(cached))
            except ValidationError:
                continue
            running = running or strategy.status.enabled
            value = (strategy.metadata.get("annotations") or {}).get(ENABLED_BEFORE_ROLLOUT_ANNOTATION)
            remembered = None if value is None else value == "true"
            change = decide_autoscaling(strategy.spec.enabled, remembered, in_progress=in_progress)
            if change is None:
                continue
            body = {
                "metadata": {
                    "annotations": {
                        ENABLED_BEFORE_ROLLOUT_ANNOTATION: None
                        if change.remembered is None
                        else str(change.remembered).lower()
                    }
                },
                "spec": {"enabled": change.enabled},
            }
            self._patch(
                AUTOSCALING_STRATEGY, self._stores.autoscaling_strategies, strategy.name, body, "autoscaling"
            )
            log.info("Set autoscaling", strategy=strategy.name, enabled=change.enabled, rollout=in_progress)
        return running

    # ---- scale-out ----------------------------------------------------------------------------

    def _scale_out(
        self, owner: dict[str, Any], scaling_group: ScalingGroup, count: int, image: ImageReference
    ) -> None:
        """Add ``count`` machines: one capacity step of the scale set, recorded first and left to
        the operation tracker (the pass after its end turns the new instances into Joins,
        ``_finish_scale_outs``), or ``count`` VMs built with ``image`` in a standalone group."""
        if scaling_group.spec.standalone:
            for _ in range(count):
                self._create_standalone_machine(owner, scaling_group, image)
            return
        group_id = scaling_group.spec.group_id

        def record(before: list[str]) -> None:
            """The instance IDs the scale-out listed, recorded before the capacity changes."""
            value = ScaleOutRecord(frozenset(before), count).render()
            body = {"metadata": {"annotations": {SCALE_OUT_ANNOTATION: value}}}
            self._patch(
                SCALING_GROUP, self._stores.scaling_groups, scaling_group.name, body, "record-scale-out"
            )
            self._checkpoint("scale-out")

        on_done = self.scale_out_operations.begin(group_id, str(owner["metadata"]["name"]), count)
        try:
            accepted = self._cloud.scale_out(parse_scale_set_id(group_id), count, record, on_done)
        except BaseException:
            self.scale_out_operations.forget(group_id)  # not sent: the record alone decides
            raise
        self._checkpoint("scale-out-sent")  # ARM accepted it; the record finds its machines
        if len(accepted.added) >= count:  # listed already: tracked now, not after the operation
            self._join_new_instances(owner, scaling_group, accepted.added, set(), ours=True)
            self._clear_scale_out_record(scaling_group)
            self.scale_out_operations.joined(group_id)

    def _finish_scale_outs(
        self, owner: dict[str, Any], scaling_groups: Sequence[ScalingGroup], pending: Sequence[PendingNode]
    ) -> tuple[list[PendingNode], StepsInFlight]:
        """The one path from a recorded scale-out to Joins: a scale-out still in flight here keeps
        its record (its step counted in flight, by lowercased group ID); one that ended, or that a
        restart left behind, has its new instances tracked by Join PendingNodes and its record
        cleared (a failed one reported first). Returns the new Joins and the steps in flight."""
        adopted: list[PendingNode] = []
        coming: dict[str, ScaleOutRecord] = {}
        known = {p.spec.provider_id.lower() for p in pending}
        for scaling_group in scaling_groups:
            if scaling_group.spec.standalone:
                adopted += self._adopt_standalone_machine(owner, scaling_group, known)
                continue
            group_id = scaling_group.spec.group_id
            annotations = scaling_group.metadata.get("annotations") or {}
            record = ScaleOutRecord.parse(annotations.get(SCALE_OUT_ANNOTATION))
            if record is None:
                continue
            operation = self.scale_out_operations.operation(group_id)
            if operation is not None and operation.running:
                coming[group_id.lower()] = replace(record, count=max(record.count, operation.count))
                continue
            error = operation.outcome.error if operation is not None and operation.outcome else None
            if error is not None:
                message = f"Adding {record.count} machines to {scaling_group.name} failed: {error}"
                self._events.event(owner, "Warning", "ScaleOutFailed", message)
            ours = operation is not None
            new_ids = self._cloud.list_instance_ids(parse_scale_set_id(group_id))
            added = [instance_id for instance_id in new_ids if instance_id not in record.before]
            adopted += self._join_new_instances(owner, scaling_group, added, known, ours=ours)
            self._clear_scale_out_record(scaling_group)
            self.scale_out_operations.forget(group_id)
        for scale_set, ended in self.scale_out_operations.take_ended_joined(str(owner["metadata"]["name"])):
            if ended.outcome is not None and ended.outcome.error is not None:
                message = f"Adding {ended.count} machines to {scale_set} failed: {ended.outcome.error}"
                self._events.event(owner, "Warning", "ScaleOutFailed", message)
        return adopted, StepsInFlight(coming)

    def _clear_scale_out_record(self, scaling_group: ScalingGroup) -> None:
        clear = {"metadata": {"annotations": {SCALE_OUT_ANNOTATION: None}}}
        self._patch(
            SCALING_GROUP, self._stores.scaling_groups, scaling_group.name, clear, "clear-scale-out-record"
        )

    def _join_new_instances(
        self,
        owner: dict[str, Any],
        scaling_group: ScalingGroup,
        new_ids: Sequence[str],
        known: set[str],
        *,
        ours: bool,
    ) -> list[PendingNode]:
        """A Join PendingNode (and an Event) for each new instance of the scale set not tracked
        yet; ``ours``: this process sent the scale-out (else a restart found it)."""
        scale_set = parse_scale_set_id(scaling_group.spec.group_id)
        joins: list[PendingNode] = []
        machines = [scale_set.instance(instance_id) for instance_id in sorted(new_ids)]
        recalled = {m: self.recall_machine(m.provider_id) for m in machines}
        fetched = self._instances([m for m, instance in recalled.items() if instance is None])
        for instance in fetched:
            self.remember_machine(instance)  # for its Node's annotation
        for instance in [*(i for i in recalled.values() if i is not None), *fetched]:
            if instance.provider_id.lower() in known:
                continue
            joins.append(
                self._track_join(owner, scaling_group, instance, "create-join" if ours else "adopt-machine")
            )
            known.add(instance.provider_id.lower())
            if ours:
                message = f"Added {instance.name} to {scaling_group.name}"
                self._events.event(owner, "Normal", "ScaledOut", message)
            else:
                message = f"Tracking {instance.name} created before a restart"
                self._events.event(owner, "Normal", "AdoptedMachine", message)
        return joins

    def _instances(self, machines: Sequence[ScaleSetInstanceId]) -> list[InstanceInfo]:
        """The machines read side by side (a wave's new instances: one round trip, not ten)."""
        if len(machines) <= 1:
            return [self._cloud.get_instance(machine) for machine in machines]
        with ThreadPoolExecutor(max_workers=min(INSTANCE_READS_AT_ONCE, len(machines))) as pool:
            return list(pool.map(self._cloud.get_instance, machines))

    def remember_machine(self, instance: InstanceInfo) -> None:
        """Keep a new machine's read for the other pass that needs it (``_read_once``)."""
        self._read_once[instance.provider_id.lower()] = instance
        while len(self._read_once) > MACHINES_KEPT:
            del self._read_once[next(iter(self._read_once))]

    def recall_machine(self, provider_id: str) -> InstanceInfo | None:
        """A new machine's read kept by the other pass, once (``None``: ask the cloud)."""
        return self._read_once.pop(provider_id.lower(), None)

    def _create_standalone_machine(
        self, owner: dict[str, Any], scaling_group: ScalingGroup, image: ImageReference
    ) -> None:
        """Create one VM of a standalone group (see ``standalone``): a name recorded before (or
        reused from a create a restart cut short), NIC and VM, a Join, the record cleared."""
        name = (scaling_group.metadata.get("annotations") or {}).get(CREATING_ANNOTATION)
        if not name:
            name = new_machine_name(scaling_group)
            record = {"metadata": {"annotations": {CREATING_ANNOTATION: name}}}
            self._patch(
                SCALING_GROUP, self._stores.scaling_groups, scaling_group.name, record, "record-scale-out"
            )
        group = parse_resource_group_id(scaling_group.spec.group_id)
        self._checkpoint("scale-out")
        instance = self._standalone.create_machine(group, name, machine_model(scaling_group, image))
        self._track_join(owner, scaling_group, instance, "create-join")
        self._events.event(owner, "Normal", "ScaledOut", f"Created {instance.name} in {scaling_group.name}")
        clear = {"metadata": {"annotations": {CREATING_ANNOTATION: None}}}
        self._patch(
            SCALING_GROUP, self._stores.scaling_groups, scaling_group.name, clear, "clear-scale-out-record"
        )
        (scaling_group.metadata.get("annotations") or {}).pop(CREATING_ANNOTATION, None)  # used up

    def _adopt_standalone_machine(
        self, owner: dict[str, Any], scaling_group: ScalingGroup, known: set[str]
    ) -> list[PendingNode]:
        """Track the VM a restart cut off from its Join, if it exists (then clear the record); a
        VM not created yet keeps the record, so the next scale-out reuses its name."""
        name = (scaling_group.metadata.get("annotations") or {}).get(CREATING_ANNOTATION)
        if not name:
            return []
        machine = parse_resource_group_id(scaling_group.spec.group_id).virtual_machine(name)
        try:
            instance = self._cloud.get_instance(machine)
        except NotFoundError:
            return []
        adopted: list[PendingNode] = []
        if instance.provider_id.lower() not in known:
            adopted.append(self._track_join(owner, scaling_group, instance, "adopt-machine"))
            known.add(instance.provider_id.lower())
            self._events.event(
                owner, "Normal", "AdoptedMachine", f"Tracking {instance.name} created before a restart"
            )
        clear = {"metadata": {"annotations": {CREATING_ANNOTATION: None}}}
        self._patch(
            SCALING_GROUP, self._stores.scaling_groups, scaling_group.name, clear, "clear-scale-out-record"
        )
        return adopted

    def _track_join(
        self, owner: dict[str, Any], scaling_group: ScalingGroup, instance: InstanceInfo, step: str
    ) -> PendingNode:
        spec = PendingNodeSpec(
            provider_id=instance.provider_id,
            group_id=scaling_group.spec.group_id,
            node_name=instance.name,
            goal=PendingNodeGoal.JOIN,
            deadline=format_time(self._clock() + self._settings.timeouts.join),
        )
        return self._create_pending_node(owner, spec, step)

    # ---- writes -------------------------------------------------------------------------------

    def _patch(
        self, kind: Kind, store: Store, name: str, body: dict[str, Any], step: str
    ) -> dict[str, Any] | None:
        """Merge-patch one object; ``None`` when it is gone. Recorded for read-your-writes."""
        before = store.get(name)
        self._checkpoint(step)
        try:
            patched = self._client.patch(kind, name, body)
        except errors.NotFound:
            return None
        self._writes.written(kind, store, name, before)
        return patched

    def _create_pending_node(
        self,
        owner: dict[str, Any],
        spec: PendingNodeSpec,
        step: str,
        confirm: Callable[[], bool] | None = None,
    ) -> PendingNode:
        """Create the record; ``confirm``, asked just before, may still call it off. The answer
        has no uid when nothing was created (it existed already, or ``confirm`` said no)."""
        pending = PendingNode(
            metadata={"name": spec.node_name, "ownerReferences": [controller_reference(owner)]}, spec=spec
        )
        body = pending.to_object()
        del body["status"]
        self._checkpoint(step)
        if confirm is not None and not confirm():
            return pending
        try:
            created = self._client.create(PENDING_NODE, body)
        except errors.AlreadyExists:
            return pending
        self._writes.written(PENDING_NODE, self._stores.pending_nodes, spec.node_name, None)
        log.info("Created PendingNode", pending_node=spec.node_name, goal=spec.goal.value)
        return PendingNode.from_object(created)

    def _delete_pending_node(self, pending: PendingNode, step: str) -> None:
        uid = str(pending.metadata.get("uid", ""))
        self._checkpoint(step)
        try:
            self._client.delete(PENDING_NODE, pending.name, preconditions={"uid": uid} if uid else None)
        except (errors.NotFound, errors.Conflict):
            return
        self._writes.deleted(PENDING_NODE, self._stores.pending_nodes, pending.name, uid)

    def _write_status(
        self, obj: dict[str, Any], status: dict[str, Any] | None, conditions: Sequence[Any]
    ) -> None:
        """Write the status (``None`` keeps the lists) with the conditions, if anything changed."""
        generation = int(obj["metadata"].get("generation", 0))
        desired = dict(obj.get("status") or {}) if status is None else dict(status)
        existing_conditions = copy.deepcopy((obj.get("status") or {}).get("conditions") or [])
        for condition in conditions:
            set_condition(
                existing_conditions,
                condition.type,
                condition.status,
                condition.reason,
                condition.message,
                generation,
            )
        desired["conditions"] = existing_conditions
        if desired == (obj.get("status") or {}):
            return
        self._checkpoint("status")
        if replace_status(self._client, NODE_IMAGE, obj, desired):
            # The status is the rollout's memory (state, canary, batch): the next pass must start
            # from it, not from a cache that has not shown it yet, or it decides on the state
            # before this one and writes that back (a rolling rollout fell back to its canary).
            self._writes.written(NODE_IMAGE, self._stores.node_images, str(obj["metadata"]["name"]), obj)
        self._report_problem_change(obj, existing_conditions)

    def _report_problem_change(self, obj: dict[str, Any], conditions: Sequence[dict[str, Any]]) -> None:
        """One Warning Event when the Degraded condition turns True or names another problem (a
        problem that lasts is reported once, not on every reconcile)."""
        name = str(obj["metadata"]["name"])
        before = (obj.get("status") or {}).get("conditions") or []
        report, problem = degraded_to_report(before, conditions, self._reported.get(name))
        if problem is None:
            self._reported.pop(name, None)
        else:
            self._reported[name] = problem
        if report is not None:
            self._events.event(obj, "Warning", str(report["reason"]), str(report.get("message", "")))
