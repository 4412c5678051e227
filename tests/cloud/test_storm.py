"""No storm under persistent failure (cloud layer): 45 s of each fault kind while pods churn at
20 events/s on 7 nodes. Each target gets at most 6 ARM writes a minute, nothing logs a traceback,
log lines stay within 3x the idle rate, and everything converges within 60 s of the faults
clearing. ``python -m bench.storm`` runs the same for 5 minutes per fault kind."""

from __future__ import annotations

import pytest

from bench.storm import run_storm
from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.helpers import cloud_for


@pytest.mark.timeout(900)
def test_no_storm_under_each_fault_kind(arm_emulator: ArmEmulator) -> None:
    """Per-target backoff (5 s doubling to 60 s) and the class hold after a 429 keep writes,
    log lines and tracebacks down; the targets recover once the faults clear."""
    cloud = cloud_for(arm_emulator, backoff_initial_seconds=5.0, retry_after_max_wait_seconds=2.0)
    try:
        idle, *faulted = run_storm(arm_emulator, cloud, phase_seconds=45.0, idle_seconds=20.0)
    finally:
        cloud.close()
    assert idle.converged_after_seconds is not None
    report = "\n".join(str(phase) for phase in (idle, *faulted))
    for phase in faulted:
        assert phase.writes_per_target_per_minute <= 6, report
        assert phase.tracebacks == 0, report
        assert phase.log_lines_per_minute <= 3 * idle.log_lines_per_minute, report
        assert phase.converged_after_seconds is not None, report
        assert phase.converged_after_seconds <= 60, report
