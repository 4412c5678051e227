"""The scale-outs this process has in flight, one per scale set, and the controller source their
end comes through.

Owns ``ScaleOutOperations`` (the record a ScalingGroup's ``SCALE_OUT_ANNOTATION`` holds,
``ScaleOutRecord``, is the api's: IPAM reads it too). A scale-out's capacity PATCH returns once
ARM accepted it; the cloud layer's operation tracker follows the operation and, when it ends, the
``on_done`` that ``begin`` gave records the outcome and enqueues the NodeImage (quick, on a
tracker thread). The pass that comes of it reads ``operation`` for the scale set: still running
(leave the record, count its machines as coming), ended (turn the new instances into Joins, report
a failure, clear the record), or unknown (a restart, or a PATCH never sent: the record alone
decides, level-based). A step whose machines ARM listed as soon as it accepted it is ``joined``:
its Joins are made and its record cleared at once, and it is kept apart only until its end, so
that a failure is still reported (``take_ended_joined``) while the next step may already run.
Nothing survives a restart. ``ScaleOutOperations`` is the ``Source`` of
the ``nodeimage`` controller: an end is dropped while the controller does not run (its
successor reads the record afresh). Thread-safe; no I/O.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from nodewright.api.nodewright.v1alpha1 import ScaleOutRecord
from nodewright.cloud.operations import OperationOutcome
from nodewright.runtime import ChannelSource, Request

__all__ = ["ScaleOutOperation", "ScaleOutOperations", "ScaleOutRecord"]


@dataclass(frozen=True)
class ScaleOutOperation:
    """One scale-out in flight: its NodeImage, its count, and once ended its outcome."""

    node_image: str
    count: int
    outcome: OperationOutcome | None = None
    serial: int = 0
    """Which ``begin`` it came from (a joined step and its successor share a scale set)."""

    @property
    def running(self) -> bool:
        return self.outcome is None


class ScaleOutOperations(ChannelSource[Request]):
    """The scale-outs in flight per scale set (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("scale-out-operations")
        self._lock = threading.Lock()
        self._operations: dict[str, ScaleOutOperation] = {}
        self._joined: dict[int, tuple[str, ScaleOutOperation]] = {}
        self._serials = itertools.count(1)

    def begin(self, scale_set: str, node_image: str, count: int) -> Callable[[OperationOutcome], None]:
        """Note a scale-out about to be sent; returns the ``on_done`` its operation ends with."""
        key = scale_set.lower()
        with self._lock:
            serial = next(self._serials)
            self._operations[key] = ScaleOutOperation(node_image, count, serial=serial)

        def ended(outcome: OperationOutcome) -> None:
            with self._lock:
                operation = self._operations.get(key)
                if operation is not None and operation.serial == serial:
                    self._operations[key] = replace(operation, outcome=outcome)
                elif serial in self._joined:
                    name, joined = self._joined[serial]
                    self._joined[serial] = (name, replace(joined, outcome=outcome))
            self.notify(Request("", node_image))

        return ended

    def operation(self, scale_set: str) -> ScaleOutOperation | None:
        """The scale set's scale-out as this process knows it (``None``: none, or not sent)."""
        with self._lock:
            return self._operations.get(scale_set.lower())

    def forget(self, scale_set: str) -> None:
        """Done with the scale set's scale-out (its record cleared, or its PATCH never sent)."""
        with self._lock:
            self._operations.pop(scale_set.lower(), None)

    def joined(self, scale_set: str) -> None:
        """The scale-out's machines are tracked by Joins already (its record cleared while it
        runs): the scale set is free for the next step, and this one is kept only for its end."""
        with self._lock:
            operation = self._operations.pop(scale_set.lower(), None)
            if operation is not None:
                self._joined[operation.serial] = (scale_set, operation)

    def take_ended_joined(self, node_image: str) -> list[tuple[str, ScaleOutOperation]]:
        """The NodeImage's joined scale-outs that ended since asked last (scale set, operation);
        forgotten once taken."""
        with self._lock:
            ended = [
                serial
                for serial, (_, operation) in self._joined.items()
                if operation.node_image == node_image and not operation.running
            ]
            return [self._joined.pop(serial) for serial in ended]
