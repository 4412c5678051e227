"""Kubernetes Events about the objects controllers act on, without flooding the server.

Owns ``EventRecorder``: ``event(obj, "Normal"|"Warning", reason, message)`` queues an Event and
returns at once; a background thread writes core/v1 Events. A repeat of the same object,
type, reason and message within ``aggregation_window`` seconds patches the existing Event's
``count`` and ``lastTimestamp`` instead of creating another (as client-go's EventCorrelator).
The queue is bounded: when it is full, events are dropped and counted in ``dropped``. Nothing
here raises into the caller; write failures are logged.

Side effects: a daemon thread; writes to the API server through the ``Client``.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from nodewright.runtime.kube import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.fence import FencedWriteError
from nodewright.runtime.kube.kinds import EVENT
from nodewright.runtime.kube.times import now_text
from nodewright.runtime.observe.logs import get_logger

__all__ = ["EventRecorder"]

log = get_logger(__name__)

EventType = Literal["Normal", "Warning"]
MESSAGE_LIMIT = 1024


@dataclass(slots=True)
class _Recorded:
    name: str
    namespace: str
    count: int
    last_seen: float


@dataclass(frozen=True, slots=True)
class _Pending:
    involved: tuple[tuple[str, Any], ...]
    namespace: str
    type: str
    reason: str
    message: str
    timestamp: str


class EventRecorder:
    """Records Events for objects as ``component`` (the Event ``source``).

    ``event()`` never blocks and never raises. Call ``stop()`` (or ``flush()``) to write what
    is queued.
    """

    def __init__(
        self,
        client: Client,
        component: str,
        host: str | None = None,
        *,
        queue_size: int = 1000,
        aggregation_window: float = 600.0,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self.aggregation_window = aggregation_window
        self.dropped = 0
        self.written = 0
        self.failed = 0
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=queue_size)
        self._recorded: dict[tuple[Any, ...], _Recorded] = {}
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()

    def event(self, obj: dict[str, Any], type: EventType, reason: str, message: str) -> None:
        """Queue an Event about ``obj``. Returns at once; drops (and counts) when the queue is
        full."""
        try:
            metadata = obj.get("metadata") or {}
            involved = {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": metadata.get("name", ""),
                "namespace": metadata.get("namespace", ""),
                "uid": metadata.get("uid", ""),
                "resourceVersion": metadata.get("resourceVersion", ""),
            }
            pending = _Pending(
                involved=tuple(involved.items()),
                namespace=metadata.get("namespace") or "default",
                type=type,
                reason=reason,
                message=message[:MESSAGE_LIMIT],
                timestamp=now_text(),
            )
            self._queue.put_nowait(pending)
        except queue.Full:
            self.dropped += 1
        except Exception:
            log.exception("Dropped malformed event", reason=reason)
            self.dropped += 1

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event has been written (or failed); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the background thread."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)

    # ---- the writer thread ----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            pending = self._queue.get()
            try:
                if pending is None:
                    return
                self._write(pending)
            except FencedWriteError:
                self.failed += 1  # the fence logged the refusal already: one line per write
            except Exception as error:
                self.failed += 1
                log.warning(
                    "Failed to write event",
                    reason=pending.reason if pending else "",
                    error=str(error),
                )
            finally:
                self._queue.task_done()

    def _write(self, pending: _Pending) -> None:
        involved = dict(pending.involved)
        key = (
            involved["uid"] or (involved["kind"], involved["namespace"], involved["name"]),
            pending.type,
            pending.reason,
            pending.message,
        )
        now = time.monotonic()
        self._expire(now)
        recorded = self._recorded.get(key)
        if recorded is not None:
            try:
                self.client.patch(
                    EVENT,
                    recorded.name,
                    {"count": recorded.count + 1, "lastTimestamp": pending.timestamp},
                    recorded.namespace,
                )
                recorded.count += 1
                recorded.last_seen = now
                self.written += 1
                return
            except errors.NotFound:
                del self._recorded[key]  # expired on the server: start a new one
        name = f"{involved['name'] or 'event'}.{uuid.uuid4().hex[:16]}"
        involved_object = {field: value for field, value in involved.items() if value}
        self.client.create(
            EVENT,
            {
                "metadata": {"name": name, "namespace": pending.namespace},
                "involvedObject": involved_object,
                "type": pending.type,
                "reason": pending.reason,
                "message": pending.message,
                "count": 1,
                "firstTimestamp": pending.timestamp,
                "lastTimestamp": pending.timestamp,
                "source": {"component": self.component, "host": self.host},
                "reportingComponent": self.component,
                "reportingInstance": self.host,
            },
            pending.namespace,
        )
        self._recorded[key] = _Recorded(name, pending.namespace, 1, now)
        self.written += 1

    def _expire(self, now: float) -> None:
        """Forget aggregation keys unseen for a window, and everything past 4096 keys."""
        stale = [
            key
            for key, recorded in self._recorded.items()
            if now - recorded.last_seen > self.aggregation_window
        ]
        for key in stale:
            del self._recorded[key]
        if len(self._recorded) > 4096:
            self._recorded.clear()
