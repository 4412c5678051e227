"""The node image rollout's Prometheus metrics, on the manager's OpenTelemetry meter.

- ``nodewright_nodes_replaced_total{reason,scaling_group}``: nodes handed to a Leave after their
  drain (reason ``ImageOutdated``, ``Rollback`` or ``Obsolete``);
- ``nodewright_node_replacement_duration_seconds``: from the heir's registration to its donor's
  hand-over (histogram);
- ``nodewright_rollout_state{node_image}``: 0 Complete, 1 Canary, 2 Soaking, 3 Rolling,
  4 RollingBack, 5 RolledBack, 6 Failed, 7 Quarantined;
- ``nodewright_rollbacks_total{node_image}``: rollouts turned into rollbacks by a failed gate;
- ``nodewright_rollout_pass_cpu_seconds{node_image}``: the CPU time of one NodeImage pass, on its
  worker's thread (its own decision time: reads from the cache, decoding, the pure decisions and
  building the writes; not the time spent waiting for the API server or ARM) (histogram);
- ``nodewright_rollout_nodes_read{node_image}``: the Nodes the last pass decoded (its pools', plus
  VM nodes not placed yet; never the whole cluster's).

Side effect: records into the metrics of the manager it was built with. Neighbour: ``node_image``.
"""

from __future__ import annotations

from nodewright.api.nodewright.v1alpha1 import RolloutState
from nodewright.runtime import Metrics

__all__ = ["PASS_CPU_BUCKETS", "STATE_VALUES", "RolloutMetrics"]

STATE_VALUES: dict[RolloutState, int] = {
    RolloutState.COMPLETE: 0,
    RolloutState.CANARY: 1,
    RolloutState.SOAKING: 2,
    RolloutState.ROLLING: 3,
    RolloutState.ROLLING_BACK: 4,
    RolloutState.ROLLED_BACK: 5,
    RolloutState.FAILED: 6,
    RolloutState.QUARANTINED: 7,
}

PASS_CPU_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Seconds: the goal is a pass of at most 0.1 s of CPU whatever the cluster's size."""


class RolloutMetrics:
    """The instruments (see the module docstring)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._created = False

    def _instruments(self) -> None:
        """Create the instruments on first use, on the manager's metrics."""
        if self._created:
            return
        self._created = True
        meter = self._metrics.provider.get_meter("nodewright.node_image")
        self._replaced = meter.create_counter(
            "nodewright_nodes_replaced_total", description="Nodes replaced, by reason and scaling group"
        )
        self._duration = meter.create_histogram(
            "nodewright_node_replacement_duration_seconds",
            description="From a heir's registration to its donor's hand-over",
        )
        self._state = meter.create_gauge(
            "nodewright_rollout_state",
            description="0 Complete, 1 Canary, 2 Soaking, 3 Rolling, 4 RollingBack, 5 RolledBack, 6 Failed",
        )
        self._rollbacks = meter.create_counter(
            "nodewright_rollbacks_total", description="Rollouts rolled back after a failed health gate"
        )
        self._pass_cpu = meter.create_histogram(
            "nodewright_rollout_pass_cpu_seconds",
            description="CPU time of one NodeImage pass on its worker thread (I/O waits excluded)",
            explicit_bucket_boundaries_advisory=PASS_CPU_BUCKETS,
        )
        self._nodes_read = meter.create_gauge(
            "nodewright_rollout_nodes_read", description="Nodes the last NodeImage pass decoded"
        )

    def node_replaced(self, reason: str, scaling_group: str, seconds: float | None) -> None:
        self._instruments()
        self._replaced.add(1, {"reason": reason, "scaling_group": scaling_group})
        if seconds is not None and seconds >= 0:
            self._duration.record(seconds)

    def rollout_state(self, node_image: str, state: RolloutState | None) -> None:
        self._instruments()
        if state is not None:
            self._state.set(STATE_VALUES[state], {"node_image": node_image})

    def rolled_back(self, node_image: str) -> None:
        self._instruments()
        self._rollbacks.add(1, {"node_image": node_image})

    def pass_done(self, node_image: str, cpu_seconds: float) -> None:
        self._instruments()
        self._pass_cpu.record(max(cpu_seconds, 0.0), {"node_image": node_image})

    def nodes_read(self, node_image: str, count: int) -> None:
        self._instruments()
        self._nodes_read.set(count, {"node_image": node_image})
