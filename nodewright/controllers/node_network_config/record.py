"""The record stage of a node_network_config pass: what the pass learnt, said where it belongs.

Owns ``PassRecorder``: the book's memory of the NIC after the pass (the surplus clock, the marks
of names in ipsNotInUse, the leak tracker's first-seen times, names released), the Events (what
the plan found, what an ended write did, what ARM answered), the status (``status``:
networkContainers[0], assignedIPCount, the scaler, the reconcile status and a ``Ready``
condition; problems set ``Error``, the condition and a Warning Event, never a crash loop) and
the ``nodewright_ipam_*`` figures (``metrics``). Also what a pass stopped before planning says
(``halted``). Side effects: status patches, Events, metrics, the book.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodewright.cloud.models import NicInfo
from nodewright.controllers.node_network_config.metrics import IpamMetrics, NodeFigures, node_pool_of
from nodewright.controllers.node_network_config.nic_book import NicBook
from nodewright.controllers.node_network_config.operations import ended_write_events
from nodewright.controllers.node_network_config.plan import Accounting, SpecPlan
from nodewright.controllers.node_network_config.status import (
    EventSink,
    Outcome,
    StatusWriter,
    build_container,
)
from nodewright.controllers.node_network_config.view import Halt, PassView
from nodewright.ipam import addresses_of
from nodewright.runtime import Result

__all__ = ["PassRecorder", "remember_pass", "remember_spec"]

Object = dict[str, Any]


def remember_spec(book: NicBook, nic_id: str, spec: SpecPlan, now: float) -> None:
    """What the book keeps of a pass's spec: the surplus clock, the marks (side effect)."""
    book.set_surplus_since(nic_id, spec.count.surplus_since)
    book.mark(nic_id, spec.marked, spec.unmarked, now)


def remember_pass(book: NicBook, nic_id: str, spec: SpecPlan, accounting: Accounting, now: float) -> None:
    """What the book keeps of one pass: the spec's clock and marks, the leak tracker's
    first-seen times, the names removed (side effect: the book)."""
    remember_spec(book, nic_id, spec, now)
    book.observe_leaks(nic_id, accounting.leaks, now)
    book.after_removal(nic_id, accounting.removed, accounting.on_nic, now)


class PassRecorder:
    """Records a pass (see the module docstring)."""

    def __init__(
        self, *, book: NicBook, status: StatusWriter, events: EventSink, metrics: IpamMetrics, blocks: bool
    ) -> None:
        self._book = book
        self._status = status
        self._events = events
        self.metrics = metrics
        self._blocks = blocks

    def halted(self, halt: Halt, resync: float) -> Result:
        """Say what stopped a pass before it planned; the Result to return."""
        if halt.warning is not None:
            self._events.event(halt.raw, "Warning", *halt.warning)
        if halt.problem is not None and halt.config is not None:
            self._status.report_problem(halt.raw, halt.config, *halt.problem)
            return Result(requeue_after=halt.retry_in if halt.retry_in else resync)
        return halt.result or Result()

    def say(self, raw: Object, warnings: Sequence[tuple[str, str]]) -> None:
        """Warning Events (reason, message) about the NodeNetworkConfig."""
        for reason, message in warnings:
            self._events.event(raw, "Warning", reason, message)

    def record(
        self, view: PassView, spec: SpecPlan, accounting: Accounting, nic: NicInfo, outcome: Outcome
    ) -> None:
        """The book, what the write that ended since the last pass did, the status and the
        figures after the pass."""
        remember_pass(self._book, view.nic_id, spec, accounting, view.now)
        for event_type, reason, message in ended_write_events(view.ended):
            self._events.event(view.raw, event_type, reason, message)
        previous = view.config.status.network_containers
        container = build_container(
            previous=previous[0] if previous else None,
            nic_id=view.nic_id,
            nic=nic,
            subnet=view.subnet,
            assignments=accounting.assignments,
            container_status=outcome.container_status,
            blocks=self._blocks,
        )
        self._status.write(view.raw, view.config, container, outcome)
        present = dict(accounting.assignments)
        held = [address for entry in present.values() for address in addresses_of(entry)]
        figures = NodeFigures(
            pool=node_pool_of(view.node),
            allocated=len(held),
            available=len([a for a in held if a not in view.in_use]),
            requested=spec.requested,
            pending_release=len([n for n in spec.listed if n in present]),
        )
        self.metrics.record(view.name, figures)
