"""The apply step of an identity pass over a VM or scale set: read what the target holds (a GET,
or what the last GET or PATCH left, ``known_identities``), plan the delta (``pass_plan``), record
the ownership intent *before* the PATCH (``assigned_writes``), then send one delta PATCH through
``IdentityCompute`` (ARM's refusals by name are isolated there). A PATCH planned from a stale
read is refused by its etag (412): the step reads again and plans again, ``READS_PER_PASS`` times.

Owns ``TargetUpdates`` (the ARM side of the passes, with what each target held last and ARM's
recent refusals per target, ``RejectionTable``) and the ``IdentityCompute`` protocol it needs.
Side effects: ARM calls, and the intent writes of ``AssignedIdentityWriter``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Protocol

from nodewright.cloud.compute import IdentityUpdateIncompleteError
from nodewright.cloud.errors import CloudError, NotFoundError, PreconditionFailedError
from nodewright.cloud.models import IdentityRejection, IdentityUpdateResult, ResourceIdentities
from nodewright.controllers.identity.assigned_writes import AssignedIdentityWriter
from nodewright.controllers.identity.decisions import AssignmentPolicy, IdentityTarget
from nodewright.controllers.identity.known_identities import KnownIdentities
from nodewright.controllers.identity.pass_plan import plan_update
from nodewright.controllers.identity.pass_view import CloudOutcome, CloudPlan, TargetView
from nodewright.controllers.identity.targets import Rejection, note_rejection
from nodewright.runtime import get_logger

__all__ = ["READS_PER_PASS", "REMEMBER_SECONDS", "IdentityCompute", "RejectionTable", "TargetUpdates"]

log = get_logger(__name__)

READS_PER_PASS = 2
"""GETs a pass makes when the target changes between its GET and its PATCH (412) before it
gives up and retries later."""
REMEMBER_SECONDS = 60.0
"""How long a target's identities (with their etag) may stand in for a GET in a pass that writes."""


class IdentityCompute(Protocol):
    """The cloud operations the passes need (``ComputeService`` provides them)."""

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


class RejectionTable:
    """ARM's recent refusals, per target and identity (thread-safe)."""

    def __init__(self, policy: AssignmentPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, Rejection]] = {}

    def of(self, key: str) -> dict[str, Rejection]:
        with self._lock:
            return dict(self._table.get(key, {}))

    def note(
        self, key: str, rejected: Iterable[IdentityRejection], landed: frozenset[str] | None, now: datetime
    ) -> dict[str, Rejection]:
        """Count this pass's refusals (backoff grows) and forget identities that landed."""
        first, cap = self.policy.rejected_identity_first_retry, self.policy.rejected_identity_retry
        with self._lock:
            table = self._table.setdefault(key, {})
            for identity_id in landed or ():
                table.pop(identity_id.lower(), None)
            for rejection in rejected:
                identity_id = rejection.identity_id.lower()
                table[identity_id] = note_rejection(
                    table.get(identity_id), rejection.code, rejection.message, now, first=first, cap=cap
                )
            return dict(table)


class TargetUpdates:
    """The apply step (see the module docstring); one pass per target at a time."""

    def __init__(
        self,
        compute: IdentityCompute,
        writer: AssignedIdentityWriter,
        policy: AssignmentPolicy,
        *,
        max_per_request: int | None,
        clock: Callable[[], datetime],
    ) -> None:
        self.compute = compute
        self.writer = writer
        self.policy = policy
        self.max_per_request = max_per_request
        self.clock = clock
        self.known = KnownIdentities(max_age=REMEMBER_SECONDS, clock=time.monotonic)
        self.rejections = RejectionTable(policy)

    def apply(self, view: TargetView) -> CloudOutcome:
        """Plan from the identities remembered from the last pass when this pass writes (else a
        GET), write the intents, then PATCH the delta (fewer only when ARM refuses an identity
        by name)."""
        remembered = self.known.fresh(view.key)
        if remembered is not None:
            plan = self._plan(view, remembered, target_gone=False)
            if plan.sends:
                try:
                    return self._send(view, plan)
                except PreconditionFailedError:
                    self.known.forget(view.key)
                    log.info("Found target changed since it was read, reading again", target=view.key)
        for _ in range(READS_PER_PASS):
            current, target_gone = self._read(view)
            plan = self._plan(view, current, target_gone=target_gone)
            try:
                return self._send(view, plan)
            except PreconditionFailedError as error:  # changed between the GET and the PATCH
                self.known.forget(view.key)
                failed = dataclasses.replace(
                    plan.outcome(), landed=None, failure=error, untouched=current.user_assigned
                )
        return failed

    def _read(self, view: TargetView) -> tuple[ResourceIdentities, bool]:
        """The target's identities from a GET (remembered), and whether the target is gone."""
        try:
            current = self.compute.get_identities(view.target)
        except NotFoundError:
            log.info("Found target gone from Azure", target=view.key)
            self.known.forget(view.key)
            return ResourceIdentities(type="None", system_assigned=False, user_assigned=frozenset()), True
        self.known.remember(view.key, current)
        return current, False

    def _plan(self, view: TargetView, current: ResourceIdentities, *, target_gone: bool) -> CloudPlan:
        rejections = self.rejections.of(view.key)
        return plan_update(view, current, rejections, self.clock(), self.policy, target_gone=target_gone)

    def _send(self, view: TargetView, plan: CloudPlan) -> CloudOutcome:
        """Intents, then the PATCH when there is anything to change, and what landed (re-read
        after a failure by ``ComputeService``); a 412 goes to ``apply``, which reads again."""
        if plan.repairs:
            log.info(
                "Re-added identities removed out of band", target=view.key, identities=sorted(plan.repairs)
            )
        self.writer.write_intents(view.changes, view.key, plan.add, view.records_here)
        if not plan.sends:
            return plan.outcome()
        key, current = view.key, plan.current
        try:
            result = self.compute.update_identities(
                view.target,
                add=plan.add,
                remove=plan.remove,
                current=current,
                max_per_request=self.max_per_request,
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
            table = self.rejections.note(key, rejected, landed, self.clock())
            untouched = current.user_assigned - plan.add - plan.remove
            return dataclasses.replace(
                plan.outcome(), landed=landed, rejections=table, failure=error, untouched=untouched
            )
        landed = result.identities.user_assigned
        self.known.remember(key, result.identities)
        log.info(
            "Updated identities",
            target=key,
            added=sorted(plan.add & landed),
            removed=sorted(plan.remove - landed),
            rejected=sorted(r.identity_id.lower() for r in result.rejected),
            requests=result.requests,
        )
        table = self.rejections.note(key, result.rejected, landed, self.clock())
        return dataclasses.replace(plan.outcome(), landed=landed, rejections=table)
