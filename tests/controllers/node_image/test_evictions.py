"""``evictions.evict_all``: a donor's pods are evicted side by side, a checkpoint that stops the
pass leaves exactly the evictions started before it, a disruption budget's refusal blocks only
its pod, and a pod already gone counts as evicted. The evict callable stands in for the client's
(the rollout tests drive the real one against a real API server)."""

from __future__ import annotations

import threading
import time

import pytest

from nodewright.controllers.node_image.draining import PodKey
from nodewright.controllers.node_image.evictions import BUDGET_REFUSED, EVICTION_CONCURRENCY, evict_all
from nodewright.runtime import errors

KEYS = [PodKey("ns", f"pod-{i}") for i in range(10)]


class _Server:
    """Answers evictions after ``delay`` seconds; counts how many were in flight at once."""

    def __init__(self, delay: float = 0.0, answers: dict[str, Exception] | None = None) -> None:
        self.delay = delay
        self.answers = answers or {}
        self.evicted: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def evict(self, name: str, namespace: str) -> None:
        assert namespace == "ns"
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.delay)
        with self._lock:
            self.in_flight -= 1
            if name in self.answers:
                raise self.answers[name]
            self.evicted.append(name)


def test_a_nodes_pods_are_evicted_side_by_side() -> None:
    server = _Server(delay=0.2)
    started = time.monotonic()
    blocked = evict_all(server.evict, "donor", KEYS, lambda _step: None)
    elapsed = time.monotonic() - started
    assert blocked == {}
    assert sorted(server.evicted) == sorted(k.name for k in KEYS)
    assert server.most_in_flight == EVICTION_CONCURRENCY
    assert elapsed < 0.2 * len(KEYS) / 2  # one after another would take 2 s


def test_a_stop_at_a_checkpoint_leaves_exactly_the_evictions_started_before_it() -> None:
    server = _Server(delay=0.1)
    steps: list[str] = []

    def checkpoint(step: str) -> None:
        steps.append(step)
        if len(steps) == 4:
            raise RuntimeError("stopped at the fourth eviction")

    with pytest.raises(RuntimeError):
        evict_all(server.evict, "donor", KEYS, checkpoint)
    assert sorted(server.evicted) == ["pod-0", "pod-1", "pod-2"]  # all three ended before the raise
    assert server.in_flight == 0
    assert steps == ["evict"] * 4


def test_a_budgets_refusal_blocks_its_pod_only_and_a_gone_pod_counts_as_evicted() -> None:
    server = _Server(
        answers={
            "pod-3": errors.TooManyRequests("budget", code=429),
            "pod-5": errors.NotFound("gone", code=404),
        }
    )
    blocked = evict_all(server.evict, "donor", KEYS, lambda _step: None)
    assert blocked == {PodKey("ns", "pod-3"): BUDGET_REFUSED}
    assert len(server.evicted) == 8


def test_any_other_error_is_raised_once_every_eviction_ended() -> None:
    server = _Server(delay=0.05, answers={"pod-0": errors.ApiError("boom", code=500)})
    with pytest.raises(errors.ApiError, match="boom"):
        evict_all(server.evict, "donor", KEYS, lambda _step: None)
    assert len(server.evicted) == 9
    assert server.in_flight == 0
