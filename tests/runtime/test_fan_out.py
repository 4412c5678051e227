"""FanOut: every item runs, never more than the limit at once, on threads that outlive the batch;
the earliest failure is raised after all ran; batches started inside batches finish even when the
shared threads are all busy; the caller's context variables reach the helpers. Pure threading, no
cluster."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from nodewright.runtime.control.fan_out import FanOut

REQUEST = contextvars.ContextVar("request", default="")


class _Gauge:
    """How many calls run at once, at most."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.threads: set[int] = set()

    def call(self, seconds: float) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.get_ident())
        time.sleep(seconds)
        with self.lock:
            self.now -= 1


def test_every_item_runs_at_most_limit_at_a_time_on_reused_threads() -> None:
    fan_out, gauge, done = FanOut(), _Gauge(), []
    try:
        for batch in range(3):

            def call(i: int, batch: int = batch) -> None:
                gauge.call(0.02)
                done.append((batch, i))

            fan_out.each(range(12), call, limit=4)
            time.sleep(0.05)  # the helpers are back to idle before the next batch
    finally:
        fan_out.close()
    assert sorted(done) == [(b, i) for b in range(3) for i in range(12)]
    assert gauge.most == 4
    # the caller plus three helpers, the same three in every batch
    assert len(gauge.threads) == 4


def test_the_earliest_failing_item_is_raised_once_all_ran() -> None:
    fan_out, ran = FanOut(), []

    def call(i: int) -> None:
        time.sleep(0.01 * (10 - i))  # later items finish first
        ran.append(i)
        if i in (3, 7):
            raise ValueError(f"item {i}")

    try:
        with pytest.raises(ValueError, match="item 3"):
            fan_out.each(range(10), call, limit=5)
    finally:
        fan_out.close()
    assert sorted(ran) == list(range(10))


def test_batches_inside_batches_finish_when_every_shared_thread_is_busy() -> None:
    fan_out, leaves = FanOut(max_threads=2), []
    lock = threading.Lock()

    def outer(i: int) -> None:
        def leaf(j: int) -> None:
            time.sleep(0.01)
            with lock:
                leaves.append((i, j))

        fan_out.each(range(5), leaf, limit=5)

    finished = threading.Event()

    def run() -> None:
        fan_out.each(range(6), outer, limit=6)
        finished.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert finished.wait(10), "a nested batch waited for a thread that never came free"
    finally:
        fan_out.close()
    assert sorted(leaves) == [(i, j) for i in range(6) for j in range(5)]


def test_helpers_see_the_callers_context_variables() -> None:
    fan_out, seen = FanOut(), set()
    lock = threading.Lock()

    def call(_: int) -> None:
        time.sleep(0.01)
        with lock:
            seen.add((threading.get_ident(), REQUEST.get()))

    token = REQUEST.set("target-a")
    try:
        fan_out.each(range(8), call, limit=4)
    finally:
        REQUEST.reset(token)
        fan_out.close()
    assert {value for _, value in seen} == {"target-a"}
    assert len({ident for ident, _ in seen}) > 1


def test_a_limit_of_one_runs_in_order_in_the_callers_thread() -> None:
    fan_out, order = FanOut(), []
    try:
        fan_out.each(range(5), lambda i: order.append((i, threading.get_ident())), limit=1)
    finally:
        fan_out.close()
    assert order == [(i, threading.get_ident()) for i in range(5)]
