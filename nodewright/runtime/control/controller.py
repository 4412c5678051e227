"""The controller: watch sources feed a work queue that N worker threads drain through a reconciler.

Owns ``Controller``. Each watch pairs an informer with predicates (``predicates.py``) and a handler
(``handlers.py``); events that pass become requests (``Request``s or declared keys) in the
controller's ``WorkQueue``. Sources that are not informers (``sources.py``: a poller of a cloud
API) are started and stopped with the controller and add to the same queue. Workers enforce the
reconcile contract of ``reconcile.py``:

- an exception -> counted as an error, re-added through the rate limiter (backoff), or after its
  ``retry_after`` seconds when it carries one (a cloud target's backoff, a budget's hold, a
  server's Retry-After), so the queue does not add a second, growing backoff to the first;
- ``Result(requeue_after=d)`` -> backoff forgotten, re-added after ``d`` seconds;
- ``Result(requeue=True)`` -> re-added through the rate limiter;
- success -> backoff forgotten;
- ``TerminalError`` -> logged and counted, never re-added.

Nothing a reconciler raises ends a worker: ``BaseException``s that are not ``Exception``s (and
non-``Result`` return values) are counted as panics and retried like errors. A write refused by
the fence (``FencedWriteError``) is retried like an error but logged without a traceback (the
fence logged the refusal). ``cancel()`` (leadership lost) stops intake at once and discards
whatever the reconciles still running return: no requeue, no metrics, no further writes pass. Every reconcile
runs inside one OpenTelemetry span and a log context carrying a fresh reconcile ID.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic

from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode

from nodewright.runtime.control.handlers import Handler
from nodewright.runtime.control.predicates import Predicate
from nodewright.runtime.control.ratelimit import RateLimiter
from nodewright.runtime.control.reconcile import (
    K,
    Reconciler,
    ReconcilerFunc,
    Result,
    TerminalError,
    key_fields,
)
from nodewright.runtime.control.sources import Source
from nodewright.runtime.control.workqueue import BatchWindow, WorkQueue
from nodewright.runtime.informers.informer import Informer
from nodewright.runtime.kube import errors
from nodewright.runtime.kube.fence import FencedWriteError
from nodewright.runtime.observe.logs import get_logger, log_context
from nodewright.runtime.observe.metrics import RESULTS, Metrics
from nodewright.runtime.observe.tracing import recording as tracing_recording
from nodewright.runtime.observe.tracing import tracer

__all__ = ["Controller", "Watch"]

log = get_logger(__name__)

Object = dict[str, Any]

MIN_RETRY_HINT = 0.01
"""Seconds: the soonest a retry comes back when the wait an error named has already passed."""


class Watch(Generic[K]):
    """One source of requests: an informer's events, filtered by predicates, mapped by a handler.

    Implements the informer's ``EventHandler`` protocol; it enqueues into the controller's queue.
    """

    def __init__(
        self, informer: Informer, handler: Handler[K], predicates: Sequence[Predicate], queue: WorkQueue[K]
    ) -> None:
        self.informer = informer
        self.handler = handler
        self.predicates = tuple(predicates)
        self.queue = queue

    def _enqueue(self, requests: Iterable[K]) -> None:
        for request in requests:
            self.queue.add(request)

    def on_add(self, obj: Object) -> None:
        if all(p.create(obj) for p in self.predicates):
            self._enqueue(self.handler.create(obj))

    def on_update(self, old: Object, new: Object) -> None:
        if all(p.update(old, new) for p in self.predicates):
            self._enqueue(self.handler.update(old, new))

    def on_delete(self, obj: Object) -> None:
        if all(p.delete(obj) for p in self.predicates):
            self._enqueue(self.handler.delete(obj))


class Controller(Generic[K]):
    """Runs one reconciler with ``max_concurrent_reconciles`` worker threads; ``K`` is its request
    key type (``Request`` unless declared)."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler[K] | ReconcilerFunc[K],
        *,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter | None = None,
        batch_window: BatchWindow | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")
        self.name = name
        self.reconciler = reconciler
        self._reconcile: ReconcilerFunc[K] = (
            reconciler.reconcile if isinstance(reconciler, Reconciler) else reconciler
        )
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.metrics = metrics if metrics is not None else Metrics()
        self.queue: WorkQueue[K] = WorkQueue(
            name,
            rate_limiter=rate_limiter,
            metrics=self.metrics.queue_metrics(name),
            batch_window=batch_window,
        )
        self.metrics.watch_queue(self.queue)
        self.metrics.controller_registered(name, max_concurrent_reconciles)
        self._watches: list[Watch[K]] = []
        self._sources: list[Source[K]] = []
        self._workers: list[threading.Thread] = []
        self._started = False
        self._cancelled = threading.Event()
        self._attributes = {"controller": name}
        self._active_workers = self.metrics.active_workers.bind(self._attributes)
        self._reconcile_time = self.metrics.reconcile_time.bind(self._attributes)
        self._reconcile_total = {
            result: self.metrics.reconcile_total.bind({**self._attributes, "result": result})
            for result in RESULTS
        }

    def watch(self, informer: Informer, handler: Handler[K], predicates: Sequence[Predicate] = ()) -> None:
        """Feed the informer's events, filtered and mapped, into this controller's queue.

        Handlers are attached at ``start``, so a controller that never starts (not leading)
        queues nothing; attaching replays the informer's current objects as adds.
        """
        watch = Watch(informer, handler, predicates, self.queue)
        self._watches.append(watch)
        if self._started:
            informer.add_event_handler(watch)

    def add_source(self, source: Source[K]) -> None:
        """Feed a non-informer source into this controller's queue while the controller runs."""
        self._sources.append(source)
        if self._started:
            source.start(self.queue.add)

    def start(self) -> None:
        """Attach the watches, start the sources and the workers (idempotent)."""
        if self._started:
            return
        self._started = True
        for watch in self._watches:
            watch.informer.add_event_handler(watch)
        for source in self._sources:
            source.start(self.queue.add)
        for index in range(self.max_concurrent_reconciles):
            worker = threading.Thread(target=self._work, name=f"{self.name}-worker-{index}", daemon=True)
            self._workers.append(worker)
            worker.start()
        log.info("Started workers", controller=self.name, count=self.max_concurrent_reconciles)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop intake and wait up to ``timeout`` for in-flight reconciles; True if all finished."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for source in self._sources:
            source.stop()
        drained = self.queue.shut_down_with_drain(timeout)
        for worker in self._workers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            worker.join(remaining)
        if drained:
            log.info("Stopped workers", controller=self.name)
        else:
            log.warning("Stopped with reconciles still running", controller=self.name)
        return drained

    def cancel(self) -> None:
        """Stop at once, without drain: no new reconcile starts and the running ones' results
        are discarded (their writes are refused by the fence, which is revoked first)."""
        self._cancelled.set()
        for source in self._sources:
            source.stop()
        self.queue.shut_down()
        log.info("Cancelled reconciles without drain", controller=self.name)

    def enqueue(self, request: K) -> None:
        """Ask for a reconcile of ``request`` (for tests and generic triggers)."""
        self.queue.add(request)

    # -- workers -------------------------------------------------------------------------

    def _work(self) -> None:
        while (request := self.queue.get()) is not None:
            self._active_workers.add(1)
            try:
                self._process(request)
            except BaseException:  # a bug in the bookkeeping below must not end the worker either
                log.exception("Failed to process request", controller=self.name, request=str(request))
            finally:
                self._active_workers.add(-1)
                self.queue.done(request)

    def _process(self, request: K) -> None:
        # A log-correlation id, not a secret: no urandom system call per reconcile (as uuid4 makes).
        reconcile_id = f"{random.getrandbits(128):032x}"
        started = time.monotonic()
        fields = {"controller": self.name, **key_fields(request), "reconcile_id": reconcile_id}
        with log_context(**fields), self._span(fields) as span:
            try:
                result = self._reconcile(request)
                if not isinstance(result, Result):
                    raise _ContractViolationError(f"reconcile returned {type(result).__name__}, not Result")
            except BaseException as error:
                if self._cancelled.is_set():
                    return  # leadership was lost meanwhile: the outcome counts for nothing
                outcome = self._failed(request, error, span)
            else:
                if self._cancelled.is_set():
                    return
                outcome = self._succeeded(request, result)
                span.set_attribute("result", outcome)
            self._reconcile_total[outcome].add(1)
            self._reconcile_time.record(time.monotonic() - started)

    def _span(self, fields: dict[str, str]) -> AbstractContextManager[Span]:
        """The reconcile's span; a non-recording stand-in while no span processor is attached."""
        if not tracing_recording():
            return nullcontext(INVALID_SPAN)
        return tracer().start_as_current_span(
            f"reconcile {self.name}", attributes=fields, record_exception=False, set_status_on_exception=False
        )

    def _succeeded(self, request: K, result: Result) -> str:
        if result.requeue_after is not None and result.requeue_after > 0:
            self.queue.forget(request)
            self.queue.add_after(request, result.requeue_after)
            return "requeue_after"
        if result.requeue:
            self.queue.add_rate_limited(request)
            return "requeue"
        self.queue.forget(request)
        return "success"

    def _failed(self, request: K, error: BaseException, span: Span) -> str:
        self.metrics.reconcile_errors.add(1, self._attributes)
        span.set_status(Status(StatusCode.ERROR, str(error)))
        if isinstance(error, FencedWriteError):  # the fence logged the refusal: no traceback
            self.queue.add_rate_limited(request)
            log.debug("Reconcile stopped by the write fence", error=str(error))
            return "error"
        span.record_exception(error)
        if isinstance(error, TerminalError):
            self.queue.forget(request)
            self.metrics.terminal_reconcile_errors.add(1, self._attributes)
            log.error("Reconcile failed terminally, not retrying", error=str(error))
            return "error"
        panic = isinstance(error, _ContractViolationError) or not isinstance(error, Exception)
        hint = None if panic else _retry_hint(error)
        if hint is not None:  # the failure says when to come back (a backoff or hold): one retry layer
            self.queue.add_after(request, hint)
        else:
            self.queue.add_rate_limited(request)
        if panic:
            self.metrics.reconcile_panics.add(1, self._attributes)
        retries = self.queue.num_requeues(request)
        if panic or not (_log_transient_failure(error, retries) or _log_expected_failure(error, retries)):
            log.error(
                "Reconcile panicked" if panic else "Reconcile failed",
                exc_info=True,  # called from the except block: the traceback is current
                retries=retries,
            )
        return "error"


def _retry_hint(error: BaseException) -> float | None:
    """Seconds until a retry can succeed, when the error says (its ``retry_after``: a target's
    backoff, a budget's hold, a server's Retry-After; counted from when the error was made when
    it carries that deadline as ``retry_at``, so a pass that spent time after the failure does
    not wait the whole time again); the rate limiter's growing delay would only add to it, and
    keep growing after the fault is gone."""
    deadline = getattr(error, "retry_at", None)  # a time.monotonic() deadline: what is left of it
    if isinstance(deadline, float):
        return max(MIN_RETRY_HINT, deadline - time.monotonic())
    value = getattr(error, "retry_after", None)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


class _ContractViolationError(Exception):
    """A reconciler broke its contract (returned something other than a ``Result``)."""


def _log_transient_failure(error: BaseException, retries: int) -> bool:
    """Log a passing API failure (``errors.is_transient``: the connection lost while the API
    server restarts, 429, 5xx, Conflict) as one warning without a traceback; False if ``error``
    is not one. Its traceback would only show our client's call stack, the same every time."""
    if not errors.is_transient(error):
        return False
    log.warning("Reconcile failed", retries=retries, error=str(error))
    return True


def _log_expected_failure(error: BaseException, retries: int) -> bool:
    """Log an expected failure in one line, without a traceback; False if ``error`` is not one.

    An error is expected when it offers ``log_fields()`` (key/value pairs such as an error code
    and a target; the cloud layer's errors do). One with ``quiet = True`` (for example a call not
    sent because its target backs off) is logged at debug level only.
    """
    log_fields = getattr(error, "log_fields", None)
    if not callable(log_fields):
        return False
    fields = log_fields()
    if not isinstance(fields, dict):
        return False
    if getattr(error, "quiet", False):
        log.debug("Reconcile deferred", retries=retries, **fields)
    else:
        log.error("Reconcile failed", retries=retries, **fields)
    return True
