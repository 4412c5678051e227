"""The request log: every ARM call the emulator answered, with its operation name and timestamps.

Tests read it to assert how many calls of an operation arrived and when (for example, that no
request reached the emulator before a Retry-After deadline). Admin calls (``/_emulator/...``) are
not recorded. Thread-safe; the server appends, tests read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["RecordedRequest", "RequestLog"]


@dataclass(frozen=True)
class RecordedRequest:
    """One answered request.

    ``operation`` is the SDK-style name of the route (``"VirtualMachineScaleSets.update"``);
    ``route`` is the method and the path template (``"PATCH /subscriptions/{subscriptionId}/..."``).
    ``monotonic`` is ``time.monotonic()`` when the request arrived (compare with deadlines taken
    in the same process) and ``answered`` when its answer was ready to send, after any added
    latency (0.0 when not known); ``timestamp`` is wall-clock seconds since the epoch; ``body`` is the
    parsed JSON request body (None when empty or not JSON); ``if_match`` the If-Match header;
    ``bearer_token`` the token the caller presented (the emulator accepts any, so tests give each
    caller its own to attribute requests to it).
    """

    method: str
    path: str
    query: str
    operation: str
    route: str
    status: int
    monotonic: float
    timestamp: float
    fault: str | None = None
    body: Any = None
    if_match: str | None = None
    bearer_token: str | None = None
    answered: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RequestLog:
    """An append-only, thread-safe list of :class:`RecordedRequest`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[RecordedRequest] = []

    def append(self, entry: RecordedRequest) -> None:
        with self._lock:
            self._entries.append(entry)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def entries(
        self,
        operation: str | None = None,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        since: float | None = None,
    ) -> list[RecordedRequest]:
        """Recorded requests, oldest first, optionally filtered.

        ``operation`` matches the route name exactly (case-insensitive); ``path_contains`` is a
        case-insensitive substring of the path; ``since`` is a ``time.monotonic()`` value.
        """
        checks: list[Callable[[RecordedRequest], bool]] = []
        if operation is not None:
            checks.append(lambda entry: entry.operation.lower() == operation.lower())
        if method is not None:
            checks.append(lambda entry: entry.method.upper() == method.upper())
        if path_contains is not None:
            checks.append(lambda entry: path_contains.lower() in entry.path.lower())
        if since is not None:
            checks.append(lambda entry: entry.monotonic >= since)
        with self._lock:
            snapshot = list(self._entries)
        return [entry for entry in snapshot if all(check(entry) for check in checks)]

    def count(self, operation: str | None = None, **filters: Any) -> int:
        """How many recorded requests match (same filters as :meth:`entries`)."""
        return len(self.entries(operation, **filters))

    def counts_by_operation(self) -> dict[str, int]:
        """Number of requests per operation name."""
        counts: dict[str, int] = {}
        for entry in self.entries():
            counts[entry.operation] = counts.get(entry.operation, 0) + 1
        return counts

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @staticmethod
    def now() -> tuple[float, float]:
        """``(monotonic, wall clock)`` now, as the log stamps entries."""
        return time.monotonic(), time.time()
