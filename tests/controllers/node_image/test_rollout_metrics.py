"""The rollout's metrics appear on their manager's /metrics under the issue's names."""

from __future__ import annotations

from nodewright.api.nodewright.v1alpha1 import RolloutState
from nodewright.controllers.node_image.rollout_metrics import RolloutMetrics
from nodewright.runtime.observe.metrics import Metrics


def test_rollout_metrics_names_labels_and_values() -> None:
    """Replacements by reason and scaling group with their duration, the state as a number per
    NodeImage, and rollbacks."""
    metrics = Metrics()
    rollout = RolloutMetrics(metrics)
    rollout.node_replaced("ImageOutdated", "pool-a", 42.0)
    rollout.node_replaced("Rollback", "pool-a", None)
    rollout.rollout_state("pool-a", RolloutState.SOAKING)
    rollout.rollout_state("pool-b", RolloutState.ROLLED_BACK)
    rollout.rolled_back("pool-b")
    text = metrics.render().decode()
    assert 'nodewright_nodes_replaced_total{reason="ImageOutdated",scaling_group="pool-a"} 1.0' in text
    assert 'nodewright_nodes_replaced_total{reason="Rollback",scaling_group="pool-a"} 1.0' in text
    assert "nodewright_node_replacement_duration_seconds_count 1.0" in text
    assert "nodewright_node_replacement_duration_seconds_sum 42.0" in text
    assert 'nodewright_rollout_state{node_image="pool-a"} 2.0' in text
    assert 'nodewright_rollout_state{node_image="pool-b"} 5.0' in text
    assert 'nodewright_rollbacks_total{node_image="pool-b"} 1.0' in text
