"""``bench.pass_metrics``: the nodeimage controller's passes and pass CPU from a Prometheus text
scrape, summed over NodeImages, and the figures of a window between two scrapes."""

from __future__ import annotations

import math

from bench.pass_metrics import pass_counts

HEADER = """# HELP controller_runtime_reconcile_total Total reconciliations per controller
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{{controller="nodeimage",result="success"}} {passes}
controller_runtime_reconcile_total{{controller="nodenetworkconfig",result="success"}} 999
# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_count{{controller="nodeimage"}} {passes}
controller_runtime_reconcile_time_seconds_sum{{controller="nodeimage"}} {wall}
controller_runtime_reconcile_time_seconds_count{{controller="nodenetworkconfig"}} 999
controller_runtime_reconcile_time_seconds_sum{{controller="nodenetworkconfig"}} 999.0
# HELP nodewright_rollout_pass_cpu_seconds The CPU time of one NodeImage pass
# TYPE nodewright_rollout_pass_cpu_seconds histogram
"""


def _scrape(passes: int, per_image: dict[str, tuple[list[int], float]], wall: float = 0.0) -> str:
    """``per_image``: NodeImage -> (cumulative counts at 5 ms, 25 ms, 100 ms, +Inf; CPU sum);
    ``wall``: the nodeimage passes' wall time in all."""
    lines = [HEADER.format(passes=passes, wall=wall)]
    for name, (counts, total) in per_image.items():
        for bound, count in zip(("0.005", "0.025", "0.1", "+Inf"), counts, strict=True):
            lines.append(
                f'nodewright_rollout_pass_cpu_seconds_bucket{{le="{bound}",node_image="{name}"}} {count}\n'
            )
        lines.append(f'nodewright_rollout_pass_cpu_seconds_count{{node_image="{name}"}} {counts[-1]}\n')
        lines.append(f'nodewright_rollout_pass_cpu_seconds_sum{{node_image="{name}"}} {total}\n')
    return "".join(lines)


def test_counts_sum_node_images_and_ignore_other_controllers() -> None:
    counts = pass_counts(_scrape(7, {"a": ([2, 4, 4, 4], 0.04), "b": ([0, 1, 3, 3], 0.15)}, wall=3.5))
    assert counts.passes == 7
    assert counts.mean_wall_ms == 500.0  # nodenetworkconfig's 999 s are not the rollout's
    assert counts.cpu_count == 7
    assert counts.buckets == {0.005: 2, 0.025: 5, 0.1: 7, math.inf: 7}
    assert round(counts.mean_ms, 3) == round(1000 * 0.19 / 7, 3)
    assert counts.p99_ms == 100.0


def test_window_between_two_scrapes() -> None:
    before = pass_counts(_scrape(10, {"a": ([10, 10, 10, 10], 0.01)}))
    after = pass_counts(_scrape(110, {"a": ([10, 10, 109, 110], 5.01)}, wall=20.0))
    window = after.since(before)
    assert window.passes == 100
    assert window.mean_wall_ms == 200.0
    assert window.cpu_count == 100
    assert round(window.mean_ms, 6) == 50.0
    assert window.p99_ms == 100.0  # 99 of the window's 100 passes took at most 100 ms
    slow = pass_counts(_scrape(120, {"a": ([10, 10, 100, 120], 9.0)})).since(before)
    assert slow.p99_ms == math.inf  # more than 1 % above the last finite bound
