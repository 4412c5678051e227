"""The benchmark's CPU limit holds: a busy process wrapped by ``CpuLimit`` gets about the quota
it was given (a pod's CFS limit), the kernel reports the throttling, and the cgroup goes away."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.cpu_limit import CpuLimit

BUSY = "import time\nend = time.monotonic() + 2.0\nwhile time.monotonic() < end: pass\n"


def test_a_busy_process_gets_no_more_than_its_quota() -> None:
    limit, why = CpuLimit.make("test", 0.25)
    assert limit is not None, why  # CI runs as root with the cpu controller (cgroup v1 or v2)
    try:
        started = time.monotonic()
        process = subprocess.Popen(limit.wrap((sys.executable, "-c", BUSY)))
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        cpu = usage.ru_utime + usage.ru_stime
        periods, throttled = limit.throttling()
    finally:
        limit.close()
    assert process.returncode == 0
    assert cpu <= 0.25 * wall + 0.15, (cpu, wall)  # unlimited, it would have used the whole 2 s
    assert periods > 0
    assert throttled > 0  # how long depends on what else the machine runs; that it was is the point
    assert not limit.directory.exists()
