"""Smoke test of the benchmark harness: the raw-ceiling contender on 20 Widgets converges, and
the harness measures it (the figures themselves are printed by ``make bench``, never asserted).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.kube import Api, install_crd
from bench.processes import Contender
from bench.widgets import percentile, run_widget_contender
from bench.workload import is_converged, widget_crd
from tests.conftest import Cluster

pytestmark = pytest.mark.slow


def test_raw_ceiling_converges_every_widget(cluster: Cluster, tmp_path: Path) -> None:
    """The harness creates 20 Widgets, runs the raw ceiling, and sees every one converged."""
    api = Api(cluster.kubeconfig)
    install_crd(api, widget_crd())
    contender = Contender(
        "raw-ceiling-4",
        "raw",
        (
            sys.executable,
            "-m",
            "bench.contenders.raw_ceiling",
            "--kubeconfig",
            "{kubeconfig}",
            "--namespace",
            "{namespace}",
            "--workers",
            "4",
            "--names",
            "{names}",
        ),
        workers=4,
        oneshot=True,
    )

    run = run_widget_contender(api, contender, 20, tmp_path)

    assert run.converged, run.error
    assert run.exit_code == 0
    assert run.patches == 20
    assert run.converge_seconds is not None
    assert run.cpu_seconds is not None
    assert run.cpu_seconds > 0
    assert run.peak_rss_bytes is not None
    assert run.peak_rss_bytes > 0


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param({"metadata": {"generation": 1}}, False, id="no-status"),
        pytest.param(
            {
                "metadata": {"generation": 2},
                "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]},
            },
            False,
            id="stale-generation",
        ),
        pytest.param(
            {
                "metadata": {"generation": 2},
                "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False"}]},
            },
            False,
            id="not-ready",
        ),
        pytest.param(
            {
                "metadata": {"generation": 2},
                "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]},
            },
            True,
            id="converged",
        ),
    ],
)
def test_is_converged(obj: dict[str, object], expected: bool) -> None:
    """A Widget counts as converged only with the current generation observed and Ready=True."""
    assert is_converged(obj) is expected


def test_percentile_is_nearest_rank() -> None:
    """p50 and p99 use the nearest-rank definition."""
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.50) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0
