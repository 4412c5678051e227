"""Writes of AzureAssignedIdentities for the identity assignment passes: creating and rewriting
objects with the ownership intent recorded *before* the cloud update, recording each outcome (state,
target, the Assigned condition) with MIC's Events on the binding, and deleting released objects
once their identity is off the target (finalizer first). Kubernetes writes run ``writeConcurrency``
at a time. ``write_intents`` is the apply step's Kubernetes half; ``write_records`` carries out a
pass's ``RecordPlan`` (the record step). Side effects: API server writes through the runtime
``Client`` and Events.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    CONDITION_ASSIGNED,
    NODE_NAME_LABEL,
    AzureAssignedIdentity,
    IdentityType,
)
from nodewright.controllers.identity.conditions import with_condition
from nodewright.controllers.identity.decisions import (
    EVENT_BINDING_APPLIED,
    EVENT_BINDING_APPLY_ERROR,
    EVENT_BINDING_REMOVE_ERROR,
    EVENT_BINDING_REMOVED,
    AssignmentChanges,
    AssignmentPolicy,
    DesiredAssignment,
)
from nodewright.controllers.identity.intent import intent_annotations
from nodewright.controllers.identity.options import AZURE_ASSIGNED_IDENTITY, AZURE_IDENTITY_BINDING
from nodewright.controllers.identity.pass_view import OutcomeWrite, RecordPlan, ReleaseWrite
from nodewright.controllers.identity.targets import (
    TARGET_UPDATE_FAILED,
    AssignmentOutcome,
    AssignmentRecord,
    owned_by_nodewright,
)
from nodewright.controllers.identity.watches import with_kind
from nodewright.runtime import Client, EventRecorder, EventType, FanOut, InformerView, errors, get_logger

__all__ = ["AssignedIdentityWriter"]

log = get_logger(__name__)


@dataclass(frozen=True)
class _TargetPass:
    """The target one pass writes intents for: its key (empty: none yet), the identities this
    attempt adds to it, and the records already on it."""

    key: str
    attempt: frozenset[str]
    records_here: list[AssignmentRecord]


class AssignedIdentityWriter:
    """Writes AzureAssignedIdentities and their Events (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        bindings: InformerView,
        recorder: EventRecorder,
        policy: AssignmentPolicy,
        *,
        write_concurrency: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.client = client
        self.bindings = bindings
        self.recorder = recorder
        self.policy = policy
        self.write_concurrency = write_concurrency
        self.clock = clock
        self.fan_out = FanOut(thread_name_prefix="identity-writes")

    def write_intents(
        self,
        changes: AssignmentChanges,
        key: str,
        attempt: frozenset[str],
        records_here: list[AssignmentRecord],
    ) -> None:
        """Create new objects and rewrite changed ones before the PATCH, recording the target and
        whether nodewright is the one adding the identity (so a crash after the PATCH cannot
        leave an identity nodewright added without a record that lets it remove it later)."""
        target = _TargetPass(key, attempt, records_here)
        self.each(changes.create, functools.partial(self._create, target=target))
        self.each(changes.update, functools.partial(self._rewrite, target=target))
        self.each(changes.keep, functools.partial(self._note_target, target=target))

    def write_records(self, plan: RecordPlan) -> None:
        """The record step: each outcome into its object's status and each release finished
        (independent objects: written together, ``writeConcurrency`` at a time), then a failure
        of the whole target update announced once per binding."""
        newly_failed: list[DesiredAssignment] = []
        writes: list[OutcomeWrite | ReleaseWrite] = [*plan.outcomes, *plan.releases]
        self.each(writes, functools.partial(self._write_record, plan, newly_failed))
        self.announce_target_failure([*plan.waiting, *newly_failed], plan.target, plan.failure)

    def _write_record(
        self, plan: RecordPlan, newly_failed: list[DesiredAssignment], write: OutcomeWrite | ReleaseWrite
    ) -> None:
        if isinstance(write, ReleaseWrite):
            self.finish_release(
                write.assigned_object, write.record, plan.landed, plan.retained, plan.target_gone
            )
        elif self.record_outcome(write.wanted, write.assigned_object, write.outcome):
            newly_failed.append(write.wanted)

    def each(self, items: Iterable[Any], function: Callable[[Any], object]) -> None:
        """Run ``function`` on every item, ``writeConcurrency`` at a time (MIC's createDeleteBatch),
        on threads shared by the passes; raises the first failure once all are done."""
        self.fan_out.each(items, function, self.write_concurrency)

    def _create(self, wanted: DesiredAssignment, target: _TargetPass) -> None:
        body = wanted.to_resource().to_object()
        intended = self._intent_status(wanted, target)
        if intended["target"]:  # recorded in the create itself (``intent``); the outcome writes status
            metadata = body["metadata"]
            metadata["annotations"] = {
                **(metadata.get("annotations") or {}),
                **intent_annotations(intended["target"], intended["addedByNodewright"]),
            }
        try:
            created = self.client.create(AZURE_ASSIGNED_IDENTITY, body)
        except errors.AlreadyExists:
            log.info(
                "Found AzureAssignedIdentity already created", name=wanted.name, namespace=wanted.namespace
            )
            return
        if not intended["target"]:
            self.patch_status(created, intended)
        log.info(
            "Created AzureAssignedIdentity",
            name=wanted.name,
            namespace=wanted.namespace,
            pod=f"{wanted.key.pod_namespace}/{wanted.key.pod_name}",
            node=wanted.node_name,
        )

    def _rewrite(self, pair: tuple[AzureAssignedIdentity, DesiredAssignment], target: _TargetPass) -> None:
        assigned_object, wanted = pair
        body = assigned_object.to_object()
        body["metadata"]["labels"] = {
            **(body["metadata"].get("labels") or {}),
            NODE_NAME_LABEL: wanted.node_name,
        }
        body["spec"] = wanted.to_resource().to_object()["spec"]
        body.pop("status", None)
        updated = self.client.update(AZURE_ASSIGNED_IDENTITY, body)  # Conflict: stale cache, retried
        self.patch_status(updated, self._intent_status(wanted, target))
        log.info(
            "Updated AzureAssignedIdentity",
            name=wanted.name,
            namespace=wanted.namespace,
            node=wanted.node_name,
        )

    def _note_target(
        self, pair: tuple[AzureAssignedIdentity, DesiredAssignment], target: _TargetPass
    ) -> None:
        assigned_object, wanted = pair
        status = assigned_object.status
        intended = self._intent_status(wanted, target, previous=assigned_object)
        if status.target != intended["target"] or status.added_by_nodewright != intended["addedByNodewright"]:
            self.patch_status(
                assigned_object.to_object(),
                {"target": intended["target"], "addedByNodewright": intended["addedByNodewright"]},
            )

    def _intent_status(
        self,
        wanted: DesiredAssignment,
        target: _TargetPass,
        previous: AzureAssignedIdentity | None = None,
    ) -> dict[str, Any]:
        if wanted.identity_type is not IdentityType.USER_ASSIGNED_MSI:
            return {
                "status": ASSIGNED_STATUS_CREATED,
                "availableReplicas": 1,
                "target": "",
                "addedByNodewright": False,
                "conditions": self._pending(""),
            }
        key, resource = target.key, wanted.resource_key
        added = resource in target.attempt or owned_by_nodewright(target.records_here, key, resource)
        if previous is not None and previous.status.target == key and previous.status.added_by_nodewright:
            added = True
        if (
            previous is not None
            and not previous.status.target
            and previous.status.status == ASSIGNED_STATUS_ASSIGNED
            and self.policy.remove_unmarked_assignments
        ):
            added = True  # adopting MIC's object: MIC would have removed it, as configured
        status: dict[str, Any] = {"target": key, "addedByNodewright": added}
        if previous is None:
            status.update(status=ASSIGNED_STATUS_CREATED, availableReplicas=1, conditions=self._pending(key))
        return status

    def _pending(self, key: str) -> list[dict[str, Any]]:
        """The condition a new object carries until its outcome is known: never Created without
        a reason."""
        where = f"the identity update of {key}" if key else "its node"
        pending = with_condition(
            [],
            CONDITION_ASSIGNED,
            status="False",
            reason="Pending",
            message=f"waiting for {where}",
            now=self.clock(),
        )
        return [c.to_dict() for c in pending]

    def patch_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        try:
            self.client.patch(
                AZURE_ASSIGNED_IDENTITY,
                str(metadata["name"]),
                {"status": dict(status)},
                str(metadata.get("namespace") or ""),
                subresource="status",
            )
        except errors.NotFound:
            log.info(
                "Found AzureAssignedIdentity gone before its status was written", name=metadata.get("name")
            )

    def _binding_object(
        self, wanted_or_assigned: DesiredAssignment | AzureAssignedIdentity
    ) -> dict[str, Any] | None:
        if isinstance(wanted_or_assigned, DesiredAssignment):
            namespace, name = wanted_or_assigned.binding.namespace, wanted_or_assigned.binding.name
        else:
            reference = wanted_or_assigned.spec.azure_binding_ref
            if reference is None:
                return None
            namespace, name = reference.namespace, reference.name
        obj = self.bindings.store.get(f"{namespace}/{name}")
        return with_kind(obj, AZURE_IDENTITY_BINDING.api_version, "AzureIdentityBinding") if obj else None

    def _binding_event(
        self,
        wanted_or_assigned: DesiredAssignment | AzureAssignedIdentity,
        event_type: EventType,
        reason: str,
        message: str,
    ) -> None:
        """Record an Event on the AzureIdentityBinding behind an assignment, if it still exists."""
        binding = self._binding_object(wanted_or_assigned)
        if binding is not None:
            self.recorder.event(binding, event_type, reason, message)

    def record_outcome(
        self,
        wanted: DesiredAssignment,
        assigned_object: AzureAssignedIdentity | None,
        outcome: AssignmentOutcome,
    ) -> bool:
        """Write the outcome into the object's status (when it changed), with a log line and
        MIC's Event on the binding when the object became Assigned or failed for a new reason.
        Returns True for a new failure of the whole target, which the caller announces once per
        binding (``announce_target_failure``) instead of once per pod."""
        previous = assigned_object.status if assigned_object is not None else None
        previous_condition = next(
            (c for c in (previous.conditions if previous else []) if c.type == CONDITION_ASSIGNED), None
        )
        same_condition = (
            previous_condition is not None
            and previous_condition.reason == outcome.reason
            and previous_condition.message == outcome.message
        )
        if (
            previous is not None
            and same_condition
            and (previous.status, previous.target, previous.added_by_nodewright)
            == (outcome.status, outcome.target, outcome.added_by_nodewright)
        ):
            return False
        conditions = with_condition(
            previous.conditions if previous else [],
            CONDITION_ASSIGNED,
            status="True" if outcome.assigned else "False",
            reason=outcome.reason,
            message=outcome.message,
            now=self.clock(),
        )
        status = {
            "status": outcome.status,
            "availableReplicas": 1,
            "target": outcome.target,
            "addedByNodewright": outcome.added_by_nodewright,
            "conditions": [c.to_dict() for c in conditions],
        }
        self.patch_status({"metadata": {"name": wanted.name, "namespace": wanted.namespace}}, status)
        was_assigned = previous is not None and previous.status == ASSIGNED_STATUS_ASSIGNED
        if outcome.assigned and not was_assigned:
            self._announce_assigned(wanted)
        elif not outcome.assigned and not same_condition:
            if outcome.reason == TARGET_UPDATE_FAILED:
                return True
            self._announce_failure(wanted, outcome)
        return False

    def announce_target_failure(self, failed: Sequence[DesiredAssignment], target: str, failure: str) -> None:
        """One Warning Event per binding for assignments that a failed target update left waiting
        (the controller logs the failure itself, once)."""
        by_binding: dict[tuple[str, str], list[DesiredAssignment]] = {}
        for wanted in failed:
            by_binding.setdefault((wanted.binding.namespace, wanted.binding.name), []).append(wanted)
        for (_, name), waiting in sorted(by_binding.items()):
            message = f"Applying binding {name} on {target} failed for {len(waiting)} pods: {failure}"
            self._binding_event(waiting[0], "Warning", EVENT_BINDING_APPLY_ERROR, message)

    def _announce_assigned(self, wanted: DesiredAssignment) -> None:
        pod = f"{wanted.key.pod_namespace}/{wanted.key.pod_name}"
        log.info(
            "Assigned identity",
            identity=wanted.resource_key or wanted.key.identity_name,
            pod=pod,
            node=wanted.node_name,
        )
        self._binding_event(
            wanted,
            "Normal",
            EVENT_BINDING_APPLIED,
            f"Binding {wanted.binding.name} applied on node {wanted.node_name} for pod {pod}",
        )

    def _announce_failure(self, wanted: DesiredAssignment, outcome: AssignmentOutcome) -> None:
        pod = f"{wanted.key.pod_namespace}/{wanted.key.pod_name}"
        log.warning(
            "Failed to assign identity",
            identity=wanted.resource_key,
            pod=pod,
            reason=outcome.reason,
            detail=outcome.message,
        )
        self._binding_event(
            wanted,
            "Warning",
            EVENT_BINDING_APPLY_ERROR,
            f"Applying binding {wanted.binding.name} on node {wanted.node_name} for pod {pod} "
            f"failed: {outcome.reason}: {outcome.message}",
        )

    def finish_release(
        self,
        assigned_object: AzureAssignedIdentity,
        record: AssignmentRecord | None,
        landed: frozenset[str] | None,
        retained: Mapping[str, str],
        target_gone: bool,
    ) -> None:
        """Delete a released object once its identity is off the target, or is not nodewright's
        to remove; otherwise keep it (and its record) for the next pass."""
        binding = self._binding_object(assigned_object)
        pod = f"{assigned_object.spec.pod_namespace}/{assigned_object.spec.pod}"
        done = (
            target_gone
            or record is None
            or record.identity_type is not IdentityType.USER_ASSIGNED_MSI
            or record.resource_key in retained
            or (landed is not None and record.resource_key not in landed)
        )
        if not done:
            log.warning("Failed to remove identity", identity=record.resource_key if record else "", pod=pod)
            self._binding_event(
                assigned_object,
                "Warning",
                EVENT_BINDING_REMOVE_ERROR,
                f"Removing binding from node {assigned_object.spec.node_name} for pod {pod} "
                "did not complete; retrying",
            )
            return
        self._delete(assigned_object)
        reason = retained.get(record.resource_key, "") if record is not None else ""
        log.info(
            "Released AzureAssignedIdentity",
            name=assigned_object.name,
            namespace=assigned_object.namespace,
            identity_kept=reason or None,
        )
        if binding is not None:
            kept = f" (identity kept on the node: {reason})" if reason else ""
            self.recorder.event(
                binding,
                "Normal",
                EVENT_BINDING_REMOVED,
                f"Binding {binding['metadata'].get('name')} removed from node "
                f"{assigned_object.spec.node_name} for pod {pod}{kept}",
            )

    def _delete(self, assigned_object: AzureAssignedIdentity) -> None:
        """Remove MIC's finalizer, then delete. The delete event this causes wakes no pass (the
        controller ignores its own deletes), and the passes no longer read the object."""
        finalizers = list(assigned_object.metadata.get("finalizers") or [])
        if ASSIGNED_IDENTITY_FINALIZER in finalizers:
            index = finalizers.index(ASSIGNED_IDENTITY_FINALIZER)
            operations = [
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": ASSIGNED_IDENTITY_FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ]
            try:
                self.client.patch(
                    AZURE_ASSIGNED_IDENTITY,
                    assigned_object.name,
                    operations,
                    assigned_object.namespace,
                    patch_type="json",
                )
            except errors.NotFound:
                return
        if not assigned_object.metadata.get("deletionTimestamp"):
            self.client.delete(
                AZURE_ASSIGNED_IDENTITY,
                assigned_object.name,
                assigned_object.namespace,
                ignore_not_found=True,
            )
