"""Controller: the reconcile contract, worker survival, metrics and one span per reconcile."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from nodewright.runtime import tracing
from nodewright.runtime.control.controller import Controller
from nodewright.runtime.control.ratelimit import ItemExponentialRateLimiter
from nodewright.runtime.control.reconcile import Request, Result, TerminalError
from nodewright.runtime.observe.logs import record_pairs
from nodewright.runtime.observe.metrics import Metrics
from tests.waiting import wait_for

REQUEST = Request("ns", "a")


def sample(metrics: Metrics, series_name: str, **labels: str) -> float:
    """The value of one scraped series (0 when absent)."""
    for family in text_string_to_metric_families(metrics.render().decode()):
        for series in family.samples:
            if series.name == series_name and all(series.labels.get(k) == v for k, v in labels.items()):
                return float(series.value)
    return 0.0


@pytest.fixture
def running() -> Iterator[Callable[..., Controller[Request]]]:
    controllers: list[Controller[Request]] = []

    def start(reconcile: Callable[[Request], Any], **options: Any) -> Controller[Request]:
        options.setdefault("rate_limiter", ItemExponentialRateLimiter(0.01, 1.0))
        controller = Controller("test", reconcile, metrics=Metrics(), **options)
        controller.start()
        controllers.append(controller)
        return controller

    yield start
    for controller in controllers:
        controller.stop(timeout=5)


def test_exception_is_counted_and_retried_with_backoff_while_worker_lives(
    running: Callable[..., Controller[Request]],
) -> None:
    """A raising reconcile is retried with growing delays by the same single worker, then succeeds."""
    calls: list[float] = []

    def reconcile(request: Request) -> Result:
        calls.append(time.monotonic())
        if len(calls) <= 4:
            raise RuntimeError("boom")
        return Result()

    controller = running(reconcile)
    controller.enqueue(REQUEST)
    wait_for(lambda: len(calls) == 5)
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    assert gaps[0] >= 0.009
    assert gaps[3] >= 0.079
    assert gaps[3] > gaps[0]
    metrics = controller.metrics
    wait_for(lambda: sample(metrics, "controller_runtime_reconcile_total", result="success") == 1)
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="test") == 4
    assert sample(metrics, "controller_runtime_reconcile_total", result="error") == 4
    assert sample(metrics, "workqueue_retries_total", name="test") == 4
    assert controller.queue.num_requeues(REQUEST) == 0  # success forgot the backoff
    assert all(worker.is_alive() for worker in controller._workers)


def test_terminal_error_is_not_retried(running: Callable[..., Controller[Request]]) -> None:
    """TerminalError is counted as terminal and never requeued."""
    calls: list[Request] = []

    def reconcile(request: Request) -> Result:
        calls.append(request)
        raise TerminalError("cannot fix")

    controller = running(reconcile)
    controller.enqueue(REQUEST)
    wait_for(lambda: sample(controller.metrics, "controller_runtime_terminal_reconcile_errors_total") == 1)
    time.sleep(0.2)
    assert calls == [REQUEST]
    assert sample(controller.metrics, "controller_runtime_reconcile_errors_total") == 1


def test_requeue_after_forgets_backoff_and_delays(running: Callable[..., Controller[Request]]) -> None:
    """Result(requeue_after=d) comes back after d with the backoff reset."""
    calls: list[float] = []

    def reconcile(request: Request) -> Result:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("first fails")
        return Result(requeue_after=0.2) if len(calls) == 2 else Result()

    controller = running(reconcile)
    controller.enqueue(REQUEST)
    wait_for(lambda: len(calls) == 3)
    assert calls[2] - calls[1] >= 0.19
    assert sample(controller.metrics, "controller_runtime_reconcile_total", result="requeue_after") == 1
    assert controller.queue.num_requeues(REQUEST) == 0


def test_an_error_that_says_when_to_retry_is_retried_then_not_sooner_nor_later(
    running: Callable[..., Controller[Request]],
) -> None:
    """An error with ``retry_after`` (a cloud target's backoff, a budget's hold) comes back after
    those seconds: not through the rate limiter, whose delay would grow with every failure and
    outlast the fault (seven fast failures would otherwise take it to 0.64 s and beyond)."""
    calls: list[float] = []

    class HeldError(Exception):
        retry_after = 0.15

    def reconcile(request: Request) -> Result:
        calls.append(time.monotonic())
        if len(calls) <= 8:
            raise HeldError("held")
        return Result()

    controller = running(reconcile)
    controller.enqueue(REQUEST)
    wait_for(lambda: len(calls) == 9, timeout=10)
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    assert min(gaps) >= 0.14, gaps
    # Not through the rate limiter (whose delay grows): no retry was counted there. How punctual
    # the retries are is a figure of ``python -m bench.retry_timing``.
    assert sample(controller.metrics, "workqueue_retries_total", name="test") == 0
    assert controller.queue.num_requeues(REQUEST) == 0


def test_a_wait_counted_from_the_failure_is_not_waited_again_after_a_slow_pass(
    running: Callable[..., Controller[Request]],
) -> None:
    """An error that carries its deadline (``retry_at``, as a 429's Retry-After does) comes back
    when that deadline passes, not ``retry_after`` seconds after the pass ended: a pass that spent
    0.3 s writing statuses after a 0.4-s hold began retries about 0.1 s after it ends."""
    calls: list[float] = []
    ended: list[float] = []

    class ThrottledWithDeadlineError(Exception):
        def __init__(self) -> None:
            super().__init__("throttled")
            self.retry_after = 0.4
            self.retry_at = time.monotonic() + 0.4

    def reconcile(request: Request) -> Result:
        calls.append(time.monotonic())
        if len(calls) == 1:
            error = ThrottledWithDeadlineError()
            time.sleep(0.3)  # the rest of the pass, after the failure
            ended.append(time.monotonic())
            raise error
        return Result()

    controller = running(reconcile)
    queued_delays: list[float] = []
    add_after = controller.queue.add_after

    def recording_add_after(item: Request, delay: float) -> None:  # the real queue, its delays noted
        queued_delays.append(delay)
        add_after(item, delay)

    controller.queue.add_after = recording_add_after  # type: ignore[method-assign]
    controller.enqueue(REQUEST)
    wait_for(lambda: len(calls) == 2, timeout=10)
    assert calls[1] - calls[0] >= 0.39, "not before the hold ends"
    # The hold is counted from the failure: the retry was queued for what was left of it when the
    # pass ended, not for the whole hold again (how late it ran is ``bench.retry_timing``'s figure).
    assert len(queued_delays) == 1, queued_delays
    assert queued_delays[0] <= 0.4 - 0.3 + 0.001, f"the whole hold queued again: {queued_delays}"
    assert sample(controller.metrics, "workqueue_retries_total", name="test") == 0


def test_requeue_goes_through_rate_limiter(running: Callable[..., Controller[Request]]) -> None:
    """Result(requeue=True) re-adds through the rate limiter and is counted as requeue."""
    calls: list[float] = []

    def reconcile(request: Request) -> Result:
        calls.append(time.monotonic())
        return Result(requeue=len(calls) < 3)

    controller = running(reconcile)
    controller.enqueue(REQUEST)
    wait_for(lambda: len(calls) == 3)
    assert sample(controller.metrics, "controller_runtime_reconcile_total", result="requeue") == 2
    assert calls[2] - calls[1] >= 0.019  # second retry waits 2 x 10 ms


def test_base_exceptions_and_bad_returns_are_panics_not_worker_deaths(
    running: Callable[..., Controller[Request]],
) -> None:
    """SystemExit and a non-Result return are counted as panics; the worker keeps serving."""
    calls: list[str] = []

    def reconcile(request: Request) -> Any:
        calls.append(request.name)
        if request.name == "exit" and calls.count("exit") == 1:
            raise SystemExit(3)
        if request.name == "none" and calls.count("none") == 1:
            return None
        return Result()

    controller = running(reconcile)
    controller.enqueue(Request("", "exit"))
    controller.enqueue(Request("", "none"))
    wait_for(lambda: calls.count("exit") == 2 and calls.count("none") == 2)
    assert sample(controller.metrics, "controller_runtime_reconcile_panics_total") == 2
    controller.enqueue(Request("", "after"))
    wait_for(lambda: "after" in calls)


def test_workers_never_share_a_key_and_run_in_parallel(running: Callable[..., Controller[Request]]) -> None:
    """With 4 workers, distinct keys run concurrently but one key never does."""
    lock = threading.Lock()
    active: set[str] = set()
    overlap: list[str] = []
    peak = [0]

    def reconcile(request: Request) -> Result:
        with lock:
            if request.name in active:
                overlap.append(request.name)
            active.add(request.name)
            peak[0] = max(peak[0], len(active))
        time.sleep(0.05)
        with lock:
            active.discard(request.name)
        return Result()

    controller = running(reconcile, max_concurrent_reconciles=4)
    for _ in range(5):
        for name in "abcd":
            controller.enqueue(Request("", name))
        time.sleep(0.02)
    wait_for(lambda: len(controller.queue) == 0 and controller.queue.processing() == 0)
    assert overlap == []
    assert peak[0] == 4
    assert sample(controller.metrics, "controller_runtime_max_concurrent_reconciles") == 4


def test_one_span_and_a_reconcile_id_per_reconcile(running: Callable[..., Controller[Request]]) -> None:
    """Each reconcile opens one span and logs with its own reconcile ID in context."""
    exporter = InMemorySpanExporter()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[dict[str, Any]] = []

    def reconcile(request: Request) -> Result:
        record = logging.LogRecord("t", logging.INFO, "", 0, "m", None, None)
        seen.append(record_pairs(record))
        return Result()

    controller = running(reconcile)
    controller.enqueue(Request("ns", "one"))
    wait_for(lambda: len(seen) == 1)
    controller.enqueue(Request("ns", "two"))
    wait_for(lambda: len(seen) == 2)
    wait_for(lambda: len([s for s in exporter.get_finished_spans() if s.name == "reconcile test"]) == 2)
    spans = [s for s in exporter.get_finished_spans() if s.name == "reconcile test"]
    assert [s.attributes["name"] for s in spans if s.attributes] == ["one", "two"]
    assert seen[0]["reconcile_id"] != seen[1]["reconcile_id"]
    assert seen[0]["controller"] == "test"
    assert seen[0]["name"] == "one"
    assert {s.attributes["reconcile_id"] for s in spans if s.attributes} == {p["reconcile_id"] for p in seen}


def test_stop_drains_in_flight_reconcile(running: Callable[..., Controller[Request]]) -> None:
    """stop() lets the running reconcile finish but starts no queued one."""
    started = threading.Event()
    finished: list[str] = []

    def reconcile(request: Request) -> Result:
        started.set()
        time.sleep(0.3)
        finished.append(request.name)
        return Result()

    controller = running(reconcile)
    controller.enqueue(Request("", "first"))
    started.wait(2)
    controller.enqueue(Request("", "second"))
    assert controller.stop(timeout=5) is True
    assert finished == ["first"]
