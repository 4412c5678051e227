"""A rollout's pace is set by events, not by periods (issue 32: the rollout's bound): each pass
starts from the status the previous one wrote (the rollout state never falls back), and with every
period of the reconcilers (resync, drain poll, PendingNode poll) set far beyond the test's length,
a surge slot freed by a donor's removal is used in the very pass that sees it gone, and the
whole rollout finishes well inside one period. Real API server, kwok, the ARM emulator and the
node simulator."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodewright.controllers.node_image.grouping import RolloutTimeouts
from nodewright.controllers.node_image.node_image import NodeImageReconciler
from nodewright.controllers.node_image.resources import NODE_IMAGE
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.process.manager import Manager
from tests.controllers.node_image.histories import History
from tests.controllers.node_image.support import RolloutBench

pytestmark = pytest.mark.slow

PERIOD = 120.0
"""Every period of the reconcilers, in seconds: far beyond what the rollout may take."""
NODES = 3


class PassRecorder:
    """The checkpoint hook: which nodeimage pass (its number, counted by the manager's reconcile
    metric: the passes finished before it) each write step ran in."""

    def __init__(self) -> None:
        self.manager: Manager | None = None
        self.steps: list[tuple[str, int, float]] = []
        self._lock = threading.Lock()

    def __call__(self, step: str) -> None:
        passes = _passes(self.manager) if self.manager is not None else -1
        with self._lock:
            self.steps.append((step, passes, time.monotonic()))


def _passes(manager: Manager) -> int:
    total = 0.0
    for family in text_string_to_metric_families(manager.metrics.render().decode()):
        for sample in family.samples:
            if sample.name == "controller_runtime_reconcile_total" and sample.labels.get("controller") == (
                "nodeimage"
            ):
                total += sample.value
    return int(total)


def test_a_freed_slot_is_used_in_the_pass_that_frees_it(bench: RolloutBench) -> None:
    """maxSurge 1 over three nodes: each heir after the canary's batch is requested (its
    scale-out) in the pass that releases the previous heir (its donor gone), not a pass later; the
    rollout ends within a fraction of one period although no period ever elapses."""
    scale_set = bench.add_scale_set("pace", NODES)
    bench.start_simulator()
    recorder = PassRecorder()
    bench.switch = recorder  # type: ignore[assignment]  # the checkpoint hook: any callable
    bench.create_node_image(max_surge=1)
    bench.create_scaling_group(scale_set)
    settings = bench.settings(
        timeouts=RolloutTimeouts(poll=timedelta(seconds=PERIOD)),
        resync_seconds=PERIOD,
        drain_poll_seconds=PERIOD,
    )
    statuses = History(bench, NODE_IMAGE)
    statuses.start()
    started = time.monotonic()
    bench.start(settings)
    assert bench.running is not None
    recorder.manager = bench.running.manager
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), PERIOD / 2, "rollout finished")
    seconds = time.monotonic() - started
    statuses.stop()

    # The status is the rollout's memory: once Rolling, it never went back to its canary.
    states = [(obj.get("status") or {}).get("rolloutState", "") for _, obj in statuses.versions]
    rolling = states.index("Rolling") if "Rolling" in states else len(states)
    assert "Canary" not in states[rolling:], states

    steps = list(recorder.steps)
    scale_outs = [(passes, at) for step, passes, at in steps if step == "scale-out"]
    releases = [(passes, at) for step, passes, at in steps if step == "release-heir"]
    assert len(scale_outs) == NODES, steps
    assert len(releases) >= NODES - 1, steps
    # The canary's batch ends only once its Leave record is gone too (its own event, not a
    # period: the time bound below covers it). Every later slot is used in the pass that frees it.
    for passes, at in releases[1 : NODES - 1]:
        following = [p for p, when in scale_outs if when > at]
        assert following, f"no scale-out after the release in pass {passes}: {steps}"
        assert following[0] == passes, f"the slot waited for pass {following[0]}, not {passes}: {steps}"
    assert seconds < PERIOD / 2


def test_a_pass_ends_once_the_cache_shows_its_status(
    bench: RolloutBench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every nodeimage pass the cached NodeImage is the one the API server holds: the next
    pass reads the rollout state, canary and batch marks its predecessor wrote, never an older
    status (which it would write back over the newer one)."""
    scale_set = bench.add_scale_set("memory", 2)
    bench.start_simulator()
    stale: list[tuple[str, str]] = []
    real = NodeImageReconciler.reconcile

    def checked(self: NodeImageReconciler, request: Request) -> Result:
        result = real(self, request)
        cached = self._stores.node_images.get(request.name)
        served = bench.client.get(NODE_IMAGE, request.name)
        if cached is not None and _version(cached) != _version(served):
            stale.append((_version(cached), _version(served)))
        return result

    monkeypatch.setattr(NodeImageReconciler, "reconcile", checked)
    bench.create_node_image(max_surge=1)
    bench.create_scaling_group(scale_set)
    bench.start()
    bench.wait_for(lambda: bench.condition() == ("True", "AllNodesUpToDate"), 60, "rollout finished")
    assert not stale, f"passes ended before the cache showed their status (cached, served): {stale}"


def _version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))
