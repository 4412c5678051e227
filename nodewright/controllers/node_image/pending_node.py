"""PendingNodeReconciler: follows a machine joining or leaving the cluster until it gets there or
its deadline passes.

Reads the machine's state from the cloud and whether its Node exists, records both in the
status, and acts as ``pending_node_decisions.decide_pending_node`` says: a join that timed out (or whose
machine failed) becomes a Leave first and has its machine deleted next, so a restart between the
two still deletes it; a leave deletes the machine (again, past its deadline) and, once the cloud
says Terminated, the Node (if it still names that machine) and then the record. A VM of a group of
standalone VMs is deleted with its NIC and OS disk (``standalone``). A Join naming a node that
already served as a heir is stale and left alone (never given up, which would delete a heir's
machine); the NodeImage reconciler deletes it. Each write is
named by a checkpoint and idempotent. Neighbours: ``node_image`` (creates and owns the records;
deletes a Join once its node is paired), ``cloud.compute`` through ``PendingNodeCloud``.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Protocol

from nodewright.api.base import ValidationError
from nodewright.api.nodewright.v1alpha1 import RESOURCE_GROUP_ID_PATTERN, PendingNode
from nodewright.cloud.models import NodeState
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    MachineId,
    ScaleSetId,
    VirtualMachineId,
    parse_provider_id,
    parse_scale_set_id,
)
from nodewright.controllers.node_image.collaborators import Collaborators, WithCollaborators
from nodewright.controllers.node_image.grouping import ClusterNode
from nodewright.controllers.node_image.pending_node_decisions import (
    PendingNodeAction,
    PendingNodeDecision,
    decide_pending_node,
)
from nodewright.controllers.node_image.resources import (
    PENDING_NODE,
)
from nodewright.runtime import (
    NODE,
    PolicyRule,
    Request,
    Result,
    Store,
    TerminalError,
    errors,
    format_time,
    get_logger,
    replace_status,
    retry_on_conflict,
)

__all__ = ["RBAC_RULES", "PendingNodeCloud", "PendingNodeReconciler"]

log = get_logger(__name__)

RBAC_RULES: tuple[PolicyRule, ...] = (
    PolicyRule("nodewright.io", ("pendingnodes",), ("get", "list", "watch", "update", "delete")),
    PolicyRule("nodewright.io", ("pendingnodes/status",), ("get", "update")),
    PolicyRule("", ("nodes",), ("get", "list", "watch", "delete")),
)


class PendingNodeCloud(Protocol):
    """The cloud operations the PendingNode reconciler needs (``ComputeService`` has them)."""

    def get_node_state(self, machine: MachineId) -> NodeState: ...

    def delete_instance(self, machine: MachineId, member_of: ScaleSetId | None = None) -> None: ...


class PendingNodeReconciler(WithCollaborators[PendingNodeCloud]):
    """Follows one machine to its goal (see the module docstring)."""

    def __init__(
        self, collaborators: Collaborators[PendingNodeCloud], *, pending_nodes: Store, nodes: Store
    ) -> None:
        super().__init__(collaborators)
        self._pending_nodes = pending_nodes
        self._nodes = nodes

    def reconcile(self, request: Request) -> Result:
        cached = self._pending_nodes.get(request.name)
        if cached is None or (cached.get("metadata") or {}).get("deletionTimestamp"):
            return Result()
        obj = copy.deepcopy(cached)
        try:
            pending = PendingNode.from_object(obj)
            machine = parse_provider_id(pending.spec.provider_id)
        except (ValidationError, InvalidResourceIdError) as error:
            self._events.event(obj, "Warning", "InvalidSpec", str(error))
            raise TerminalError(f"PendingNode {request.name}: {error}") from error
        state = self._cloud.get_node_state(machine)
        node = self._node_of(pending)
        now = self._clock()
        decision = decide_pending_node(
            pending,
            state,
            node_exists=node is not None,
            now=now,
            timeouts=self._settings.timeouts,
            node_served_as_heir=node is not None and bool(ClusterNode.from_object(node).served_as_heir),
        )
        self._write_status(obj, decision.cloud_state.value, decision.reached_goal)
        action = decision.action
        if action is PendingNodeAction.GIVE_UP_JOIN:
            return self._give_up_join(obj, pending, decision)
        if action is PendingNodeAction.DELETE_MACHINE:
            return self._request_deletion(obj, pending, machine, decision)
        if action is PendingNodeAction.DELETE_RECORD:
            return self._finish(obj, pending, node, decision)
        if decision.requeue_after is None:
            return Result()
        return Result(requeue_after=max(0.05, decision.requeue_after.total_seconds()))

    def _give_up_join(
        self, obj: dict[str, Any], pending: PendingNode, decision: PendingNodeDecision
    ) -> Result:
        """A join that failed or timed out becomes a Leave (the next pass deletes the machine)."""
        assert decision.deadline is not None
        self._events.event(
            obj, "Warning", decision.reason, f"Machine {pending.spec.node_name} did not join; deleting it"
        )
        self._update_spec(obj, {"goal": "Leave", "deadline": format_time(decision.deadline)}, "give-up-join")
        return Result(requeue=True)

    def _request_deletion(
        self, obj: dict[str, Any], pending: PendingNode, machine: MachineId, decision: PendingNodeDecision
    ) -> Result:
        """Delete the machine (again, with a new deadline, past the old one)."""
        if decision.deadline is not None:
            self._events.event(
                obj,
                "Warning",
                decision.reason,
                f"Machine {pending.spec.node_name} still exists; deleting it again",
            )
            self._update_spec(obj, {"deadline": format_time(decision.deadline)}, "extend-leave")
        self._checkpoint("delete-machine")
        self._delete_machine(pending, machine)
        log.info("Deleted machine", pending_node=pending.name, machine=str(machine))
        return Result(requeue=True)

    def _finish(
        self,
        obj: dict[str, Any],
        pending: PendingNode,
        node: dict[str, Any] | None,
        decision: PendingNodeDecision,
    ) -> Result:
        """The record is done: delete the Node (if it still names the machine), then the record."""
        if node is not None:
            self._checkpoint("delete-node")
            uid = str(node["metadata"].get("uid", ""))
            with contextlib.suppress(errors.NotFound, errors.Conflict):
                self._client.delete(NODE, pending.spec.node_name, preconditions={"uid": uid})
            log.info("Deleted node", node=pending.spec.node_name)
        self._checkpoint("delete-record")
        try:
            self._client.delete(
                PENDING_NODE, pending.name, preconditions={"uid": str(obj["metadata"]["uid"])}
            )
        except (errors.NotFound, errors.Conflict):
            return Result()
        log.info(
            "Finished PendingNode",
            pending_node=pending.name,
            goal=pending.spec.goal.value,
            reason=decision.reason,
        )
        return Result()

    def _delete_machine(self, pending: PendingNode, machine: MachineId) -> None:
        """Delete the machine; a standalone group's VM goes with its NIC and OS disk; a Flexible
        member's delete names its scale set (it lowers the capacity: ``delete_instance``)."""
        if isinstance(machine, VirtualMachineId) and RESOURCE_GROUP_ID_PATTERN.fullmatch(
            pending.spec.group_id
        ):
            self._standalone.release_machine(machine)
        else:
            self._cloud.delete_instance(machine, member_of=_scale_set_of(pending.spec.group_id))

    def _node_of(self, pending: PendingNode) -> dict[str, Any] | None:
        """The Node of the record's machine: named as the record says and naming the same machine."""
        node = self._nodes.get(pending.spec.node_name)
        if node is None:
            return None
        provider_id = str((node.get("spec") or {}).get("providerID", ""))
        return node if provider_id.lower() == pending.spec.provider_id.lower() else None

    def _update_spec(self, obj: dict[str, Any], changes: dict[str, Any], step: str) -> None:
        self._checkpoint(step)

        def attempt() -> None:
            fresh = self._client.get(PENDING_NODE, obj["metadata"]["name"])
            if fresh["metadata"].get("uid") != obj["metadata"].get("uid"):
                return
            fresh["spec"] = {**fresh.get("spec", {}), **changes}
            self._client.update(PENDING_NODE, fresh)

        try:
            retry_on_conflict(attempt)
        except errors.NotFound:
            return

    def _write_status(self, obj: dict[str, Any], cloud_state: str, reached_goal: bool) -> None:
        desired: dict[str, Any] = {"cspState": cloud_state}
        if reached_goal:
            desired["reachedGoal"] = True
        if desired == (obj.get("status") or {}):
            return
        self._checkpoint("pending-node-status")

        replace_status(self._client, PENDING_NODE, obj, desired)


def _scale_set_of(group_id: str) -> ScaleSetId | None:
    """The scale set a PendingNode's group names (None for any other group)."""
    try:
        return parse_scale_set_id(group_id)
    except InvalidResourceIdError:
        return None
