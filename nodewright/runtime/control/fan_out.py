"""``FanOut``: run a function over a batch of items, at most ``limit`` at a time, on threads that
outlive the batch.

A reconcile pass that writes many objects (MIC's createDeleteBatch) used to start a thread pool per
batch: starting and joining ten threads cost about 2 ms of CPU, several times a pass. Here the
threads are shared by every batch of one owner and kept while idle. A batch is worked by the
calling thread plus up to ``limit - 1`` helpers that pull items from the batch's own queue, so one
batch never holds more than ``limit`` threads. A helper that has not started by the time the caller
ran out of items is cancelled rather than waited for: a batch never waits for a free thread, so
batches started from inside other batches cannot deadlock the shared threads.

Side effects: threads (named ``thread_name_prefix``), started on demand.
"""

from __future__ import annotations

import collections
import contextvars
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["FanOut"]

T = TypeVar("T")


class FanOut:
    """Shared threads for batches of independent calls (see the module docstring)."""

    def __init__(self, max_threads: int = 64, thread_name_prefix: str = "fan-out") -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix=thread_name_prefix)

    def each(self, items: Iterable[T], function: Callable[[T], object], limit: int) -> None:
        """Call ``function`` on every item, ``limit`` at a time; once all are done, raise the
        failure of the earliest item that failed (the others still ran)."""
        work = list(enumerate(items))
        if len(work) <= 1 or limit <= 1:
            for _, item in work:
                function(item)
            return
        pending = collections.deque(work)
        failures: list[tuple[int, Exception]] = []
        lock = threading.Lock()

        def drain() -> None:
            while True:
                try:
                    index, item = pending.popleft()
                except IndexError:
                    return
                try:
                    function(item)
                except Exception as error:  # every item runs; the earliest failure is raised
                    with lock:
                        failures.append((index, error))

        helpers: list[Future[None]] = [
            self._pool.submit(contextvars.copy_context().run, drain) for _ in range(min(limit, len(work)) - 1)
        ]
        drain()
        for helper in helpers:
            if not helper.cancel():
                helper.result()
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]

    def close(self) -> None:
        """Let the idle threads end (batches still running finish)."""
        self._pool.shutdown(wait=False)
