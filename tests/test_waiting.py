"""``tests.waiting.watched_window`` against a real ``Controller``: it returns once the controller
has reconciled N more times, and fails the test when the controller never ran in the window."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from nodewright.runtime.control.controller import Controller
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.observe.metrics import Metrics
from tests.waiting import reconcile_count, watched_window

REQUEST = Request("ns", "a")


class Periodic:
    """A reconciler that asks to come back every 20 ms until ``idle`` is set."""

    def __init__(self) -> None:
        self.idle = threading.Event()

    def __call__(self, _: Request) -> Result:
        return Result() if self.idle.is_set() else Result(requeue_after=0.02)


@pytest.fixture
def periodic() -> Periodic:
    return Periodic()


@pytest.fixture
def controller(periodic: Periodic) -> Iterator[Controller[Request]]:
    made = Controller("watched", periodic, metrics=Metrics())
    made.start()
    yield made
    made.stop(timeout=5)


def test_the_window_closes_after_the_counted_passes(controller: Controller[Request]) -> None:
    before = reconcile_count(controller, "watched")
    controller.enqueue(REQUEST)
    with watched_window(controller, "watched", passes=3, timeout=10):
        pass
    assert reconcile_count(controller, "watched") >= before + 3


def test_the_window_fails_when_the_controller_never_runs(
    controller: Controller[Request], periodic: Periodic
) -> None:
    periodic.idle.set()
    controller.enqueue(REQUEST)
    with watched_window(controller, "watched", passes=1, timeout=10):
        pass  # the one requested reconcile, which asks for no other
    idle = reconcile_count(controller, "watched")
    with (
        pytest.raises(AssertionError, match="2 reconciles of 'watched'"),
        watched_window(controller, "watched", passes=2, timeout=0.3),
    ):
        pass
    assert reconcile_count(controller, "watched") == idle


def test_counts_are_per_controller(controller: Controller[Request]) -> None:
    controller.enqueue(REQUEST)
    with watched_window(controller, "watched", passes=2, timeout=10):
        pass
    assert reconcile_count(controller, "watched") >= 2
    assert reconcile_count(controller, "another") == 0
    with pytest.raises(ValueError, match="at least 1"), watched_window(controller, "watched", passes=0):
        pass
