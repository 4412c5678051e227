"""Sources of requests that are not informers, for what Kubernetes does not watch (a cloud API
polled in the background): controller-runtime's ``source.Channel`` and ``source.Func``.

Owns ``Source`` (the protocol a controller starts and stops with itself: ``start(enqueue)``,
``stop()``), ``ChannelSource``, which any thread ``notify``s (a request sent while the controller
does not run is dropped: its successor reads the world afresh), and ``PollingSource``, one daemon
thread that calls ``poll(enqueue)`` again after the seconds each call returns. A controller
starts its sources only while it runs (so only while leading) and stops them with itself. A
``poll`` that raises is logged once per run of failures and called again after ``error_delay``
seconds; the thread never dies of it. Side effects: a thread (``PollingSource``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from nodewright.runtime.observe.logs import get_logger

__all__ = ["ChannelSource", "Enqueue", "PollingSource", "Source"]

log = get_logger(__name__)

K = TypeVar("K")
K_co = TypeVar("K_co", covariant=True)

Enqueue = Callable[[K], None]
"""Adds one request to the controller's queue."""


class Source(Protocol[K_co]):
    """Feeds requests into a controller's queue between ``start`` and ``stop``."""

    def start(self, enqueue: Callable[[K_co], None]) -> None: ...

    def stop(self) -> None: ...


class ChannelSource(Generic[K]):
    """A source other threads feed (an operation tracker's ``on_done``): ``notify(request)``
    enqueues while the controller runs and is dropped otherwise. Thread-safe."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._enqueue: Callable[[K], None] | None = None

    def start(self, enqueue: Callable[[K], None]) -> None:
        with self._lock:
            self._enqueue = enqueue

    def stop(self) -> None:
        with self._lock:
            self._enqueue = None

    def notify(self, request: K) -> None:
        """Enqueue ``request`` if the controller runs (outside the lock: enqueue may block)."""
        with self._lock:
            enqueue = self._enqueue
        if enqueue is not None:
            enqueue(request)


class PollingSource(Generic[K]):
    """Calls ``poll(enqueue)`` on its own thread; each call returns the seconds to wait before the
    next one (see the module docstring)."""

    def __init__(
        self,
        name: str,
        poll: Callable[[Callable[[K], None]], float],
        *,
        error_delay: float = 5.0,
    ) -> None:
        self.name = name
        self._poll = poll
        self._error_delay = error_delay
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, enqueue: Callable[[K], None]) -> None:
        """Start the thread (idempotent); the first poll runs at once."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, args=(enqueue,), name=f"source-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop at the next wait; a poll in progress finishes first (not waited for)."""
        self._stopping.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self, enqueue: Callable[[K], None]) -> None:
        failing = False
        while not self._stopping.is_set():
            try:
                delay = self._poll(enqueue)
                failing = False
            except Exception as error:  # a failed poll is retried, never ends the thread
                if not failing:
                    log.warning("Polling failed", source=self.name, error=str(error))
                failing = True
                delay = self._error_delay
            self._stopping.wait(max(0.0, delay))
