"""PollingSource with a Controller: polls feed the queue while the controller runs, stop with it,
and a poll that raises is logged once per run of failures without ending the thread.
ChannelSource: another thread's notifications reach the controller only while it runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from nodewright.runtime.control.controller import Controller
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.control.sources import ChannelSource, PollingSource
from nodewright.runtime.observe.metrics import Metrics
from tests.waiting import wait_for


def test_polls_feed_the_controller_only_while_it_runs() -> None:
    """Nothing is polled before start; each poll's requests are reconciled; none after stop."""
    polls: list[int] = []
    seen: list[Request] = []

    def poll(enqueue: Callable[[Request], None]) -> float:
        polls.append(len(polls))
        enqueue(Request("ns", f"node-{len(polls)}"))
        return 0.01

    def reconcile(request: Request) -> Result:
        seen.append(request)
        return Result()

    controller: Controller[Request] = Controller("sourced", reconcile, metrics=Metrics())
    source = PollingSource("test", poll)
    controller.add_source(source)
    assert polls == []
    controller.start()
    wait_for(lambda: len(seen) >= 3)
    controller.stop(timeout=5)
    wait_for(lambda: not source.running)
    stopped_at = len(polls)
    assert Request("ns", "node-1") in seen
    threading.Event().wait(0.05)
    assert len(polls) == stopped_at


def test_failing_poll_logs_once_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """Three failures in a row: one warning; the thread lives on and polls again."""
    calls: list[int] = []

    def poll(enqueue: Callable[[Request], None]) -> float:
        calls.append(1)
        if len(calls) <= 3:
            raise RuntimeError("cloud unreachable")
        return 10.0

    caplog.set_level(logging.WARNING, logger="nodewright.runtime.control.sources")
    source: PollingSource[Request] = PollingSource("failing", poll, error_delay=0.01)
    source.start(lambda _request: None)
    wait_for(lambda: len(calls) >= 4)
    source.stop()
    assert [r.getMessage() for r in caplog.records].count("Polling failed") == 1


def test_a_channel_feeds_the_controller_only_while_it_runs() -> None:
    """A notification before start and after stop is dropped; one from another thread while the
    controller runs is reconciled."""
    seen: list[Request] = []

    def reconcile(request: Request) -> Result:
        seen.append(request)
        return Result()

    controller: Controller[Request] = Controller("channel", reconcile, metrics=Metrics())
    channel: ChannelSource[Request] = ChannelSource("test-channel")
    controller.add_source(channel)
    channel.notify(Request("ns", "before"))
    controller.start()
    sender = threading.Thread(target=channel.notify, args=(Request("ns", "during"),))
    sender.start()
    sender.join()
    wait_for(lambda: Request("ns", "during") in seen)
    controller.stop(timeout=5)
    assert seen == [Request("ns", "during")]


def test_a_stopped_channel_drops_what_it_is_sent() -> None:
    """After ``stop`` nothing reaches the enqueue the channel was started with."""
    enqueued: list[Request] = []
    channel: ChannelSource[Request] = ChannelSource("test-channel")
    channel.start(enqueued.append)
    channel.notify(Request("ns", "running"))
    channel.stop()
    channel.notify(Request("ns", "stopped"))
    assert enqueued == [Request("ns", "running")]
