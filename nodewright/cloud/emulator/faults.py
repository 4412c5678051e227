"""Fault injection: throttling (429 + Retry-After, or the Compute provider's 429 without it),
server errors, failed long-running operations
and added latency, for the next N calls of an operation.

A fault matches a request by operation name (``"VirtualMachineScaleSets.update"``, the names in
the request log) or by HTTP method plus a shell-style pattern over the path (``*`` crosses ``/``,
case-insensitive). Tests configure faults through :class:`FaultInjector` directly; the server's
admin endpoint ``POST /_emulator/faults`` accepts the same fields as JSON. Thread-safe.
"""

from __future__ import annotations

import enum
import fnmatch
import itertools
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict, Unpack

__all__ = ["Fault", "FaultInjector", "FaultKind", "FaultTarget"]


class FaultKind(enum.StrEnum):
    """What a fault does to a matching request."""

    THROTTLE = "throttle"  # answer 429 TooManyRequests with Retry-After, do nothing
    COMPUTE_THROTTLE = "compute_throttle"  # answer 429 OperationNotAllowed naming policy ``code``
    SERVER_ERROR = "server_error"  # answer 5xx, do nothing
    OPERATION_FAILURE = "operation_failure"  # accept a mutating call, then fail its long-running operation
    LATENCY = "latency"  # delay the answer by ``seconds``, then handle normally
    OPERATION_DURATION = "operation_duration"  # the long-running operation takes ``seconds``


_ONE_SHOT_KINDS = {
    FaultKind.THROTTLE,
    FaultKind.COMPUTE_THROTTLE,
    FaultKind.SERVER_ERROR,
    FaultKind.OPERATION_FAILURE,
}


@dataclass
class Fault:
    """One injected fault. ``times=None`` means every matching call until removed."""

    kind: FaultKind
    operation: str | None = None
    method: str | None = None
    path: str | None = None
    times: int | None = 1
    retry_after: float = 1.0
    status: int = 500
    seconds: float = 0.0
    code: str | None = None
    message: str | None = None
    identifier: int = 0
    fired: int = field(default=0)

    def matches(self, operation: str, method: str, path: str) -> bool:
        if self.operation is not None and self.operation.lower() != operation.lower():
            return False
        if self.method is not None and self.method.upper() not in ("*", method.upper()):
            return False
        return self.path is None or fnmatch.fnmatchcase(path.lower(), self.path.lower())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = str(self.kind)
        return data


class FaultTarget(TypedDict, total=False):
    """The keyword arguments every ``FaultInjector`` shortcut takes besides ``operation``: an HTTP
    ``method`` and a shell-style ``path`` pattern to match calls by, and how many ``times`` the
    fault fires (``None``: until removed; the default is once, or every time for latency and
    slow operations)."""

    method: str | None
    path: str | None
    times: int | None


class FaultInjector:
    """The set of active faults; the server consults it for every ARM request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._identifiers = itertools.count(1)
        self.global_latency: float = 0.0

    def add(self, fault: Fault) -> Fault:
        """Activate ``fault``; returns it with its identifier set."""
        if fault.operation is None and fault.path is None and fault.kind in _ONE_SHOT_KINDS:
            fault.path = "*"  # neither operation nor path: every call matches
        with self._lock:
            fault.identifier = next(self._identifiers)
            self._faults.append(fault)
        return fault

    def throttle(
        self, operation: str | None = None, *, retry_after: float = 1.0, **target: Unpack[FaultTarget]
    ) -> Fault:
        """Answer the next ``times`` matching calls with 429 TooManyRequests and ``Retry-After``."""
        return self.add(Fault(FaultKind.THROTTLE, operation, retry_after=retry_after, **target))

    def compute_throttle(
        self,
        operation: str | None = None,
        *,
        policy: str = "PutVMScaleSetVM3Min",
        retry_after: float = 0.0,
        **target: Unpack[FaultTarget],
    ) -> Fault:
        """Answer the next ``times`` matching calls as the Compute resource provider throttles:
        429 ``OperationNotAllowed`` naming ``policy`` in details, and no ``Retry-After`` unless
        ``retry_after`` is above zero."""
        return self.add(
            Fault(FaultKind.COMPUTE_THROTTLE, operation, retry_after=retry_after, code=policy, **target)
        )

    def server_error(
        self, operation: str | None = None, *, status: int = 500, **target: Unpack[FaultTarget]
    ) -> Fault:
        """Answer the next ``times`` matching calls with ``status`` (5xx) and an ARM error body."""
        return self.add(Fault(FaultKind.SERVER_ERROR, operation, status=status, **target))

    def fail_operation(
        self,
        operation: str | None = None,
        *,
        code: str = "InternalExecutionError",
        message: str = "An internal execution error occurred. Please retry later.",
        **target: Unpack[FaultTarget],
    ) -> Fault:
        """Accept the next ``times`` matching mutating calls, then report their operation Failed."""
        return self.add(Fault(FaultKind.OPERATION_FAILURE, operation, code=code, message=message, **target))

    def add_latency(
        self, seconds: float, operation: str | None = None, **target: Unpack[FaultTarget]
    ) -> Fault | None:
        """Delay answers by ``seconds``: every call when no operation/path is given, else matching
        ones (every time unless ``times`` is given)."""
        method, path = target.get("method"), target.get("path")
        if operation is None and path is None and method is None:
            self.global_latency = seconds
            return None
        times = target.get("times")
        return self.add(Fault(FaultKind.LATENCY, operation, method, path, times=times, seconds=seconds))

    def slow_operations(
        self, seconds: float, operation: str | None = None, **target: Unpack[FaultTarget]
    ) -> Fault:
        """Make matching long-running operations take ``seconds`` before they finish (every
        time unless ``times`` is given)."""
        method, path = target.get("method"), target.get("path")
        return self.add(
            Fault(
                FaultKind.OPERATION_DURATION,
                operation,
                method,
                path if (path or operation) else "*",
                times=target.get("times"),
                seconds=seconds,
            )
        )

    def remove(self, identifier: int) -> None:
        with self._lock:
            self._faults = [fault for fault in self._faults if fault.identifier != identifier]

    def clear(self) -> None:
        """Remove every fault and the global latency."""
        with self._lock:
            self._faults.clear()
            self.global_latency = 0.0

    def active(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def take(self, kind: FaultKind, operation: str, method: str, path: str) -> Fault | None:
        """The first active fault of ``kind`` matching the request, consuming one of its uses."""
        with self._lock:
            for fault in self._faults:
                if fault.kind is kind and fault.matches(operation, method, path):
                    fault.fired += 1
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def latency(self, operation: str, method: str, path: str) -> float:
        """Added delay for one request: the global latency plus the first matching latency fault."""
        fault = self.take(FaultKind.LATENCY, operation, method, path)
        return self.global_latency + (fault.seconds if fault is not None else 0.0)
