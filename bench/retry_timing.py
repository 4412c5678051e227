"""``python -m bench.retry_timing [--rounds N]``: how punctually a controller retries a failure
that says when to come back, on this machine. The wall-clock bounds that used to sit in
``tests/runtime/test_controller.py`` (where a loaded CI machine made them flaky) are measured
here instead; the tests keep the behaviour (the order, and that no retry went through the rate
limiter).

Two scenarios, each run ``N`` times on a real ``Controller`` (no cluster):

- ``retry-after``: a reconcile that fails eight times with ``retry_after`` 0.15 s, then succeeds.
  Figure: the largest gap between two attempts (reference bound 0.6 s: a retry through the rate
  limiter would grow past it).
- ``retry-at``: a reconcile that fails with a 0.4-s hold whose deadline (``retry_at``) is set at
  the failure, then spends 0.3 s more before returning. Figure: the seconds from the end of that
  pass to the retry (reference bound 0.3 s: waiting the whole hold again would take 0.4 s).

Printed as one JSON document per scenario (rounds, worst, median, bound, within bound). Side
effects: threads only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from nodewright.runtime.control.controller import Controller
from nodewright.runtime.control.ratelimit import ItemExponentialRateLimiter
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.observe.metrics import Metrics

__all__ = ["TimingRun", "retry_after_gap", "retry_at_lateness", "run"]

REQUEST = Request("bench", "retry")
RETRY_AFTER = 0.15
RETRY_AFTER_BOUND = 0.6
HOLD = 0.4
PASS_TAIL = 0.3
RETRY_AT_BOUND = 0.3


@dataclass
class TimingRun:
    """One scenario's figures over its rounds (seconds)."""

    scenario: str
    rounds: int
    worst: float
    median: float
    bound: float
    within_bound: bool


class _HeldError(Exception):
    retry_after = RETRY_AFTER


class _ThrottledWithDeadlineError(Exception):
    def __init__(self) -> None:
        super().__init__("throttled")
        self.retry_after = HOLD
        self.retry_at = time.monotonic() + HOLD


def _run_until(reconcile: Callable[[Request], Result], done: threading.Event, timeout: float = 30.0) -> None:
    controller = Controller(
        "bench-retry", reconcile, metrics=Metrics(), rate_limiter=ItemExponentialRateLimiter(0.01, 1.0)
    )
    controller.start()
    try:
        controller.enqueue(REQUEST)
        if not done.wait(timeout):
            raise RuntimeError("the controller did not finish the scenario")
    finally:
        controller.stop(timeout=5)


def retry_after_gap() -> float:
    """The largest gap between attempts of one ``retry-after`` round."""
    calls: list[float] = []
    done = threading.Event()

    def reconcile(_: Request) -> Result:
        calls.append(time.monotonic())
        if len(calls) <= 8:
            raise _HeldError("held")
        done.set()
        return Result()

    _run_until(reconcile, done)
    return max(later - earlier for earlier, later in itertools.pairwise(calls))


def retry_at_lateness() -> float:
    """Seconds from the end of the failing pass to the retry, in one ``retry-at`` round."""
    calls: list[float] = []
    ended: list[float] = []
    done = threading.Event()

    def reconcile(_: Request) -> Result:
        calls.append(time.monotonic())
        if len(calls) == 1:
            error = _ThrottledWithDeadlineError()
            time.sleep(PASS_TAIL)  # the rest of the pass, after the failure
            ended.append(time.monotonic())
            raise error
        done.set()
        return Result()

    _run_until(reconcile, done)
    return calls[1] - ended[0]


def _summary(scenario: str, figures: list[float], bound: float) -> TimingRun:
    worst = max(figures)
    return TimingRun(scenario, len(figures), worst, statistics.median(figures), bound, worst < bound)


def run(rounds: int) -> list[TimingRun]:
    """Both scenarios, ``rounds`` times each."""
    return [
        _summary("retry-after", [retry_after_gap() for _ in range(rounds)], RETRY_AFTER_BOUND),
        _summary("retry-at", [retry_at_lateness() for _ in range(rounds)], RETRY_AT_BOUND),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retry_timing", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each scenario (default 5)")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # every round logs its failures on purpose
    for result in run(args.rounds):
        print(json.dumps(asdict(result)))


if __name__ == "__main__":
    main()
