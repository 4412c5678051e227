"""Long-running operations the ARM way: a mutating call answers at once with an
``Azure-AsyncOperation`` header (and ``Location``); the operation status URL reports
``InProgress`` until the operation's duration has passed, then ``Succeeded`` or ``Failed``.

While an operation runs, every answer about it carries ``Retry-After`` (whole seconds,
``state.operation_retry_after``, 10 by default; None turns it off): the write's own answer (200 or
201 with ``Azure-AsyncOperation`` for PUT and PATCH, 202 with ``Location`` too for POST and
DELETE), each status poll answering ``InProgress`` and each result poll answering 202. A finished
operation's answers carry none, and nor does the answer of an operation due at once (duration 0,
the default here): it is over before a poll can come. Sources:

- ARM's "Track asynchronous Azure operations" (learn.microsoft.com/azure/azure-resource-manager/
  management/async-operations): after a 201 or 202, look for ``Azure-AsyncOperation`` (else
  ``Location``) and ``Retry-After``, the seconds to wait before checking the status; use its
  value to schedule how often to check;
- ARM's resource provider contract (github.com/Azure/azure-resource-manager-rpc,
  v1.0/async-api-reference.md): ``Retry-After`` is an integer of seconds, at least 10 and at
  most 600; a poll of a running operation answers 202 again with an updated ``Retry-After``
  (its example: 60 on the write, then 10); a client without one waits 60 s;
- Azure's API guidelines (github.com/microsoft/api-guidelines, azure/Guidelines.md, long-running
  operations): include ``Retry-After`` in the answer to the initiating request and to requests
  of the operation's status;
- the Compute team (Azure/azure-sdk-for-net issue 21196): Compute sends "a pretty generous
  Retry-After" on long-running operations. Azure's published examples for the operations the
  emulator serves (../shared/reference/azure-rest-api-examples) show only ``Location`` on 202
  and no ``Retry-After``: example headers are partial, so they neither show nor rule it out.

10 s is the contract's smallest value and its in-progress example's; no source gives Compute's
or Network's exact figure.

Operations finish lazily: whoever holds the state lock calls :meth:`LongRunningOperations.settle`,
which runs the completion callbacks of every operation that is due. Callbacks run under the state
lock and mutate the state (mark a resource Succeeded, remove a deleted one, roll back a failed one).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LongRunningOperations", "Operation", "OperationError"]


@dataclass(frozen=True)
class OperationError:
    """Why an operation failed, as the status body's ``error``."""

    code: str
    message: str


@dataclass
class Operation:
    """One long-running operation and what to do when it finishes."""

    identifier: str
    subscription: str
    namespace: str
    location: str
    started: float
    due: float
    on_success: Callable[[], None]
    on_failure: Callable[[OperationError], None]
    error: OperationError | None = None
    status: str = "InProgress"
    finished: float | None = field(default=None)
    started_by: str = ""
    """The operation name of the request that started it (``"VirtualMachineScaleSets.update"``),
    so a request log's polls can be told apart by the write they follow."""

    @property
    def status_path(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/providers/{self.namespace}/locations/{self.location}"
            f"/operations/{self.identifier}"
        )

    @property
    def result_path(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/providers/{self.namespace}/locations/{self.location}"
            f"/operationResults/{self.identifier}"
        )

    def status_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.identifier,
            "status": self.status,
            "startTime": _iso(self.started),
        }
        if self.finished is not None:
            body["endTime"] = _iso(self.finished)
        if self.status == "Failed" and self.error is not None:
            body["error"] = {"code": self.error.code, "message": self.error.message}
        return body


def _iso(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp)) + f".{int(timestamp % 1 * 1e6):06d}Z"


class LongRunningOperations:
    """All operations of one emulator. Not locked itself: call it under the state lock."""

    def __init__(self) -> None:
        self._operations: dict[str, Operation] = {}

    def start(
        self,
        *,
        subscription: str,
        namespace: str,
        location: str,
        duration: float,
        on_success: Callable[[], None],
        on_failure: Callable[[OperationError], None],
        error: OperationError | None = None,
        started_by: str = "",
    ) -> Operation:
        """Register an operation that finishes after ``duration`` seconds (failing with ``error`` if set)."""
        now = time.time()
        operation = Operation(
            identifier=str(uuid.uuid4()),
            subscription=subscription,
            namespace=namespace,
            location=location.replace(" ", "").lower() or "eastus",
            started=now,
            due=now + max(0.0, duration),
            on_success=on_success,
            on_failure=on_failure,
            error=error,
            started_by=started_by,
        )
        self._operations[operation.identifier] = operation
        return operation

    def settle(self) -> None:
        """Finish every operation whose time has come (runs callbacks; call under the state lock)."""
        now = time.time()
        for operation in sorted(self._operations.values(), key=lambda item: item.due):
            if operation.status != "InProgress" or operation.due > now:
                continue
            operation.finished = now
            if operation.error is None:
                operation.status = "Succeeded"
                operation.on_success()
            else:
                operation.status = "Failed"
                operation.on_failure(operation.error)

    def get(self, identifier: str) -> Operation | None:
        return self._operations.get(identifier)

    def in_progress(self) -> list[Operation]:
        return [operation for operation in self._operations.values() if operation.status == "InProgress"]
