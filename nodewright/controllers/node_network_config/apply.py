"""The apply stage of a node_network_config pass: the writes a plan asks for, and their answers.

Owns ``PassApplier``:

- ``spec``: the spec body through ``spec_writer.SpecWriter`` (server-side apply under its own
  field manager; another writer of the spec is noticed and followed, never overwritten);
- ``nic``: at most one NIC write per pass (additions first; removals wait for the next pass),
  started, not waited for (``operations``: its end enqueues the node, whose next pass absorbs
  it), within the shared cloud's one mutation budget (``cloud_access``). ARM's answers go to the
  pass's ``Outcome`` and the write guard in the book: backoff after a failure, batch halving
  and subnet exhaustion after a capacity error, a terminal refusal remembered until a write goes
  through; a failed write that ended since the last pass is answered the same way.

Side effects: Kubernetes spec applies, ARM writes and reads, the book's guards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodewright.api.acn.v1alpha import NETWORK_CONTAINER_STATUS_FAILED, NETWORK_CONTAINER_STATUS_SUBNET_FULL
from nodewright.cloud.backoff import BackingOffError
from nodewright.cloud.errors import (
    CloudError,
    LimitExceededError,
    NotFoundError,
    SubnetFullError,
    is_terminal,
    kept_back,
)
from nodewright.cloud.models import NicInfo
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.operations import NicWrites, with_add_count
from nodewright.controllers.node_network_config.plan import SpecPlan
from nodewright.controllers.node_network_config.spec_writer import SpecWriter
from nodewright.controllers.node_network_config.status import Outcome, refused_container_status
from nodewright.controllers.node_network_config.subnets import SubnetBook
from nodewright.controllers.node_network_config.view import PENDING_REQUEUE_SECONDS, PassView
from nodewright.ipam import AllocationPlan
from nodewright.runtime import get_logger

__all__ = ["PassApplier"]

log = get_logger(__name__)
Object = dict[str, Any]
ReadNic = Callable[[str, float], NicInfo]
"""A fresh read of the NIC (``PassReader.nic``), remembered in the book."""


class PassApplier:
    """Carries out a pass's plan (see the module docstring)."""

    def __init__(
        self,
        *,
        book: NicBook,
        writes: NicWrites,
        subnets: SubnetBook,
        spec_writer: SpecWriter,
        read_nic: ReadNic,
    ) -> None:
        self._book = book
        self._writes = writes
        self._subnets = subnets
        self._spec_writer = spec_writer
        self._read_nic = read_nic

    def spec(self, view: PassView, plan: SpecPlan) -> Object | None:
        """Write the planned spec; the object as stored after it, or None when another writer
        holds the spec (the pass then follows the stored one)."""
        if plan.write is None:
            return view.raw
        stored = self._spec_writer.write(view.raw, plan.write)
        if stored is not None:
            log.info(
                "Requested IPs",
                node=view.name,
                demand=view.demand,
                requested=plan.requested,
                not_in_use=len(plan.listed),
            )
        return stored

    def nic(self, view: PassView, nic: NicInfo, plan: AllocationPlan, outcome: Outcome) -> NicInfo:
        """Start the plan's one NIC write (unless backed off), or take the failure of the write
        ended since the last pass; returns the NIC as known after it."""
        failed = view.ended.error if view.ended is not None else None
        if not plan.changes_nic and failed is None:
            return nic
        outcome.refusal = self._book.refusal(view.nic_id)  # said until a write goes through
        if outcome.refusal is not None:
            outcome.container_status = refused_container_status(outcome.refusal[0])
        guard = self._book.guard(view.nic_id)
        if failed is None and not guard.may_write(view.now):
            outcome.complete = False
            outcome.retry_in = guard.retry_in(view.now)
            return nic
        try:
            if failed is not None and view.ended is not None:
                plan = with_add_count(plan, view.ended)
                raise failed
            self._writes.start(view.name, view.nic_id, plan, view.subnet_id, view.now)
            outcome.complete = False
            return nic
        except BackingOffError as error:  # not sent: the NIC backs off after a failed write
            outcome.complete = False
            outcome.retry_in = error.retry_after
            if error.terminal:
                outcome.container_status = refused_container_status(error.code)
                self._refused(view, outcome, (error.code or "", error.last_message))
            return nic
        except (SubnetFullError, LimitExceededError) as error:
            self._on_capacity_error(view, plan, outcome, error)
        except NotFoundError as error:
            outcome.retry_in = self._book.back_off(view.nic_id, view.now)
            outcome.problems.append(("NetworkInterfaceNotFound", f"NIC {view.nic_id}: {error}"))
            return nic
        except CloudError as error:
            if kept_back(error):  # our budget kept it back: nothing failed, nothing to re-read
                outcome.complete = False
                outcome.retry_in = error.retry_after or PENDING_REQUEUE_SECONDS
                return nic
            self._on_cloud_error(view, outcome, error)
        try:
            return self._read_nic(view.nic_id, view.now)
        except CloudError:
            return nic

    def _on_cloud_error(self, view: PassView, outcome: Outcome, error: CloudError) -> None:
        outcome.retry_in = max(self._book.back_off(view.nic_id, view.now), error.retry_after or 0.0)
        outcome.complete = False
        outcome.container_status = NETWORK_CONTAINER_STATUS_FAILED
        if is_terminal(error):  # a condition, and an Event when it starts (StatusWriter)
            self._refused(view, outcome, (error.code or "", error.message))
        else:
            outcome.warnings.append(("CloudError", f"Changing NIC {view.nic_id} failed: {error}"))

    def _on_capacity_error(
        self, view: PassView, plan: AllocationPlan, outcome: Outcome, error: CloudError
    ) -> None:
        guard = self._book.guard(view.nic_id).after_capacity_error(plan.add_count, view.now)
        self._book.set_guard(view.nic_id, guard)
        outcome.complete = False
        outcome.container_status = NETWORK_CONTAINER_STATUS_SUBNET_FULL
        # The cloud layer backs the NIC off (2 s doubling to minutes): come back when it ends.
        outcome.retry_in = max(guard.retry_in(view.now), error.retry_after or 0.0) or PENDING_REQUEUE_SECONDS
        self._refused(view, outcome, (error.code or "SubnetIsFull", error.message))
        if guard.exhausted and view.subnet_id:
            self._subnets.mark_exhausted(view.subnet_id)
        log.info("Adding IPs refused by ARM", node=view.name, requested=plan.add_count, **error.log_fields())

    def _refused(self, view: PassView, outcome: Outcome, refusal: tuple[str, str]) -> None:
        """ARM refused the NIC's write with a terminal answer: the condition says so until a
        write goes through."""
        outcome.refusal = refusal
        self._book.note_refusal(view.nic_id, refusal)
