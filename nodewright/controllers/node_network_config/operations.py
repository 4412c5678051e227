"""The IPAM reconciler's NIC writes as operations that no worker waits for.

Owns ``NicOperation`` (what one write in flight on a NIC changes: names added or removed, when
it started, and, once ARM's operation ended, its error or none), ``NicWrites`` (starts a write
through ``NetworkService``'s ``begin_`` methods, records it in the ``NicBook`` before ARM sees it,
and on its end records the outcome and wakes the node's pass; the next pass ``absorb``s it into
the book) and ``ended_write_events`` (pure: what an ended write says). The pass comes through a
runtime ``ChannelSource`` that ``notify`` feeds.

A pass that starts a write returns at once; the cloud layer's ``OperationTracker`` polls the
operation (at ARM's ``Retry-After``), and its end enqueues the node. A pass that finds its NIC's
write in flight does nothing to the NIC (one writer per NIC), while every other node's pass goes
on: how many writes are in flight is bounded by ARM's write budget (the clients' token bucket and
request budget), not by the worker count. The pass after the end reads the NIC afresh and
settles: a success counts the names added as the pool's and reports releases; a failure goes the
way of a failed write (backoff, condition, Event). Nothing survives a restart: a new process
reads the NIC, finds the names a lost write added unaccounted, and adopts them when the pool
needs them (it never adds twice for one need). Side effects: ARM writes (through ``network``),
the book, requests enqueued.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from nodewright.cloud.errors import CloudError
from nodewright.cloud.models import NicInfo
from nodewright.cloud.operations import OperationOutcome
from nodewright.controllers.node_network_config.cloud import NetworkOperations
from nodewright.ipam import AllocationPlan, NicGuard
from nodewright.runtime import Request, get_logger

__all__ = [
    "NicOperation",
    "NicWrites",
    "ended_write_events",
    "landed",
    "removed_names",
    "with_add_count",
]

log = get_logger(__name__)

OnDone = Callable[[OperationOutcome], None]
STALE_OPERATION_SECONDS = 7200.0
"""Twice the tracker's deadline: a write in flight this long lost its tracker (closed). Also
when a pass that leaves a write in flight asks to come back: the write's end enqueues the node
long before, and the pass it starts sets the next periodic visit (an earlier one would win)."""


@dataclass(frozen=True)
class NicOperation:
    """One NIC write: ``added`` or ``removed`` names (``released`` of them from ipsNotInUse,
    ``collected`` unaccounted ones); ``done`` once ARM's operation ended, ``error`` if it failed."""

    owner: str
    started_at: float
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    released: int = 0
    collected: int = 0
    done: bool = False
    error: CloudError | None = None


class NicBookOperations(Protocol):
    """The part of ``NicBook`` that keeps each NIC's write in flight."""

    def begin_operation(self, nic_id: str, operation: NicOperation) -> None: ...

    def finish_operation(self, nic_id: str, error: CloudError | None) -> NicOperation | None: ...

    def clear_operation(self, nic_id: str) -> None: ...

    def operation(self, nic_id: str) -> NicOperation | None: ...

    def guard(self, nic_id: str) -> NicGuard: ...

    def set_guard(self, nic_id: str, guard: NicGuard) -> None: ...

    def note_refusal(self, nic_id: str, refusal: tuple[str, str] | None) -> None: ...

    def after_removal(
        self, nic_id: str, removed: Collection[str], on_nic: Collection[str], now: float
    ) -> None: ...


class NicWrites:
    """Starts NIC writes and records how they end (see the module docstring)."""

    def __init__(  # noqa: PLR0917 - one call site
        self,
        network: NetworkOperations,
        book: NicBookOperations,
        namespace: str,
        notify: Callable[[Request], None],
        new_name: Callable[[], str],
        prefix_length: int | None,
    ) -> None:
        self._network = network
        self._book = book
        self._namespace = namespace
        self._notify = notify
        self._new_name = new_name
        self._prefix_length = prefix_length

    def start(self, owner: str, nic_id: str, plan: AllocationPlan, subnet_id: str | None, now: float) -> bool:
        """Start the plan's one write: its additions (new names) if any, else its removals."""
        if plan.add_count:
            names = [self._new_name() for _ in range(plan.add_count)]
            started = self.add(owner, nic_id, names, subnet_id, self._prefix_length, now)
            if started:
                log.info("Started adding IPs", node=owner, added=len(names))
            return started
        started = self.remove(owner, nic_id, plan.release, plan.collected, now)
        if started:
            log.info(
                "Started releasing IPs", node=owner, released=len(plan.release), collected=len(plan.collected)
            )
        return started

    def add(  # noqa: PLR0917 - one call site, the write's parts
        self,
        owner: str,
        nic_id: str,
        names: Sequence[str],
        subnet_id: str | None,
        prefix_length: int | None,
        now: float,
    ) -> bool:
        """Start adding ``names``; True when a write is in flight (its end wakes ``owner``)."""
        operation = NicOperation(owner=owner, started_at=now, added=tuple(names))
        return self._start(
            nic_id,
            operation,
            lambda on_done: self._network.begin_add_secondary_ip_configurations(
                nic_id, names, subnet_id, prefix_length, on_done=on_done
            ),
        )

    def remove(  # one call site, the write's parts
        self, owner: str, nic_id: str, release: Sequence[str], collected: Sequence[str], now: float
    ) -> bool:
        """Start removing the released and collected names; True when a write is in flight."""
        names = (*release, *collected)
        operation = NicOperation(
            owner=owner, started_at=now, removed=names, released=len(release), collected=len(collected)
        )
        return self._start(
            nic_id,
            operation,
            lambda on_done: self._network.begin_remove_secondary_ip_configurations(
                nic_id, list(names), on_done=on_done
            ),
        )

    def in_flight(self, nic_id: str, now: float) -> bool:
        """Whether the NIC's write is still running. One older than ``STALE_OPERATION_SECONDS``
        (its end can no longer come: the tracker gives up long before) is forgotten."""
        operation = self._book.operation(nic_id)
        if operation is None or operation.done:
            return False
        if now - operation.started_at < STALE_OPERATION_SECONDS:
            return True
        log.info("Forgot a NIC operation that never ended", node=operation.owner, nic=nic_id)
        self._book.clear_operation(nic_id)
        return False

    def absorb(self, nic_id: str, ended: NicOperation, nic: NicInfo, now: float) -> None:
        """The pass after a successful write (``nic`` read afresh) takes it into the book: the
        write guard's success and the release bookkeeping (``ended_write_events`` says it). A
        failed write is the apply stage's to report."""
        if ended.error is not None:
            return
        self._book.set_guard(nic_id, self._book.guard(nic_id).after_success(added=len(ended.added)))
        self._book.note_refusal(nic_id, None)  # a write went through: a terminal refusal is over
        if ended.removed:
            on_nic = {c.name for c in nic.secondary_ip_configurations}
            self._book.after_removal(nic_id, ended.removed, on_nic, now)
        if ended.added:
            log.info("Added IPs", node=ended.owner, added=len(ended.added))
        if ended.removed:
            log.info("Released IPs", node=ended.owner, released=ended.released, collected=ended.collected)

    def _start(self, nic_id: str, operation: NicOperation, begin: Callable[[OnDone], bool]) -> bool:
        # Recorded before ARM sees the write: the operation may end before ``begin`` returns.
        self._book.begin_operation(nic_id, operation)
        try:
            started = begin(self._on_done(nic_id, operation.owner))
        except BaseException:
            self._book.clear_operation(nic_id)
            raise
        if not started:
            self._book.clear_operation(nic_id)
        return started

    def _on_done(self, nic_id: str, owner: str) -> OnDone:
        def done(outcome: OperationOutcome) -> None:
            if self._book.finish_operation(nic_id, outcome.error) is None:
                return  # forgotten meanwhile (the node went away)
            log.info(
                "Finished NIC operation",
                node=owner,
                nic=nic_id,
                succeeded=outcome.succeeded,
                seconds=round(outcome.finished - outcome.started, 2),
                polls=outcome.polls,
            )
            self._notify(Request(self._namespace, owner))

        return done


def ended_write_events(ended: NicOperation | None) -> list[tuple[str, str, str]]:
    """The Events (type, reason, message) a successful write that ended says. Pure."""
    if ended is None or ended.error is not None:
        return []
    said = []
    if ended.released:
        said.append(("Normal", "ReleasedIPs", f"Released {ended.released} IPs listed in ipsNotInUse"))
    if ended.collected:
        said.append(
            ("Normal", "CollectedLeakedIPs", f"Released {ended.collected} unaccounted IP configurations")
        )
    return said


def landed(operation: NicOperation | None) -> frozenset[str]:
    """The names a finished write added to the pool (none unless it succeeded)."""
    if operation is None or not operation.done or operation.error is not None:
        return frozenset()
    return frozenset(operation.added)


def with_add_count(plan: AllocationPlan, operation: NicOperation) -> AllocationPlan:
    """``plan`` as if it had asked for the failed write's additions (for the capacity path)."""
    return dataclasses.replace(plan, add_count=len(operation.added))


def removed_names(operation: NicOperation | None) -> Collection[str]:
    """The names a finished, successful write removed."""
    if operation is None or not operation.done or operation.error is not None:
        return ()
    return operation.removed
