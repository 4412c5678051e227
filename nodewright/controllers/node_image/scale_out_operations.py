"""The scale-outs this process has in flight, one per scale set, and the controller source their
end comes through.

Owns ``ScaleOutOperations`` (the record a ScalingGroup's ``SCALE_OUT_ANNOTATION`` holds,
``ScaleOutRecord``, is the api's: IPAM reads it too). A scale-out's capacity PATCH returns once
ARM accepted it; the cloud layer's operation tracker follows the operation and, when it ends, the
``on_done`` that ``begin`` gave records the outcome and enqueues the NodeImage (quick, on a
tracker thread). The pass that comes of it reads ``operation`` for the scale set: still running
(leave the record, count its machines as coming), ended (turn the new instances into Joins, report
a failure, clear the record), or unknown (a restart, or a PATCH never sent: the record alone
decides, level-based). Nothing survives a restart. ``ScaleOutOperations`` is the ``Source`` of
the ``nodeimage`` controller: an end is dropped while the controller does not run (its
successor reads the record afresh). Thread-safe; no I/O.
"""

from __future__ import annotations

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

    @property
    def running(self) -> bool:
        return self.outcome is None


class ScaleOutOperations(ChannelSource[Request]):
    """The scale-outs in flight per scale set (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__("scale-out-operations")
        self._lock = threading.Lock()
        self._operations: dict[str, ScaleOutOperation] = {}

    def begin(self, scale_set: str, node_image: str, count: int) -> Callable[[OperationOutcome], None]:
        """Note a scale-out about to be sent; returns the ``on_done`` its operation ends with."""
        key = scale_set.lower()
        with self._lock:
            self._operations[key] = ScaleOutOperation(node_image, count)

        def ended(outcome: OperationOutcome) -> None:
            with self._lock:
                operation = self._operations.get(key)
                if operation is not None:
                    self._operations[key] = replace(operation, outcome=outcome)
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
