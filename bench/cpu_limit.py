"""A CPU limit for one contender, enforced the way the kubelet enforces a pod's: CFS bandwidth.

Owns ``CpuLimit``: a cgroup of its own with a quota of ``cores`` x the 100 ms period
(cgroup v2 ``cpu.max`` where the unified hierarchy has the cpu controller, cgroup v1
``cpu.cfs_quota_us`` otherwise). ``wrap`` turns a command line into one that joins the cgroup
and then ``exec``s the command, so the limit holds from the first instruction and covers every
thread and child. ``throttling`` reads how often and for how long the kernel held it back.
The API server and the harness stay outside the cgroup. Where no cgroup can be made (not root,
no cpu controller), ``CpuLimit.make`` returns None and says why: the bench then reports the run
as unlimited rather than pretending.

Side effects: creates and removes a directory under ``/sys/fs/cgroup``.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuLimit"]

PERIOD_MICROSECONDS = 100_000
ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu"))


def _v2_root() -> Path | None:
    for root in ROOTS[:2]:
        with contextlib.suppress(OSError):
            if "cpu" in (root / "cgroup.subtree_control").read_text().split():
                return root
    return None


def _v1_root() -> Path | None:
    root = ROOTS[2]
    return root if (root / "cpu.cfs_quota_us").exists() else None


@dataclass
class CpuLimit:
    """One cgroup with a CPU quota; ``directory`` is removed by ``close``."""

    cores: float
    directory: Path
    version: int

    @classmethod
    def make(cls, name: str, cores: float) -> tuple[CpuLimit | None, str]:
        """A fresh cgroup limited to ``cores``, or None and the reason none could be made."""
        quota = int(cores * PERIOD_MICROSECONDS)
        try:
            if (root := _v2_root()) is not None:
                directory = root / f"nodewright-bench-{name}-{os.getpid()}"
                directory.mkdir()
                (directory / "cpu.max").write_text(f"{quota} {PERIOD_MICROSECONDS}\n")
                return cls(cores, directory, 2), ""
            if (root := _v1_root()) is not None:
                directory = root / f"nodewright-bench-{name}-{os.getpid()}"
                directory.mkdir()
                (directory / "cpu.cfs_period_us").write_text(f"{PERIOD_MICROSECONDS}\n")
                (directory / "cpu.cfs_quota_us").write_text(f"{quota}\n")
                return cls(cores, directory, 1), ""
        except OSError as error:
            return None, f"no cgroup for a CPU limit: {error}"
        return None, "no cgroup for a CPU limit: neither cgroup v2 nor v1 has the cpu controller here"

    def wrap(self, command: tuple[str, ...]) -> tuple[str, ...]:
        """``command`` joining this cgroup first (the shell writes its own pid, then execs)."""
        procs = self.directory / "cgroup.procs"
        return ("/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *command)

    def throttling(self) -> tuple[int, float]:
        """(periods throttled, seconds throttled) so far."""
        values: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for line in (self.directory / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                values[key] = int(value)
        if self.version == 2:
            return values.get("nr_throttled", 0), values.get("throttled_usec", 0) / 1e6
        return values.get("nr_throttled", 0), values.get("throttled_time", 0) / 1e9

    def close(self) -> None:
        """Remove the cgroup once its processes are gone (retried briefly while they exit)."""
        for _ in range(50):
            try:
                self.directory.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
