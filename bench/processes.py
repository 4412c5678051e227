"""Running one contender as a separate process and accounting what it costs.

Owns ``Contender`` (the command line of one program under test) and ``RunningProcess``:
starts the command with its output in log files, reads the CPU seconds (user + system) of the
process and its descendants from ``/proc/<pid>/stat`` at any moment, its peak RSS (``VmHWM``
from ``/proc/<pid>/status``), and on ``stop`` sends SIGTERM, reaps it with ``os.wait4`` (whose
rusage is the final word on CPU) and keeps the last JSON line it printed (the
contender's own counters). Also ``cpu_seconds_of`` for any pid (the API server's share).

Side effects: spawns and signals processes; writes log files.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Contender", "RunningProcess", "cpu_seconds_of", "status_bytes"]

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Contender:
    """A program under test: its name, what it is, and how to start it."""

    name: str
    family: str
    command: tuple[str, ...]
    workers: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    oneshot: bool = False
    """True for a program that exits by itself when done (the raw ceiling)."""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                found.extend(int(child) for child in text.split())
    return found


def cpu_seconds_of(pid: int, *, tree: bool = True) -> float:
    """User + system CPU seconds of ``pid`` (and its live descendants and reaped children)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    total = (utime + stime + cutime + cstime) / TICKS
    if tree:
        total += sum(cpu_seconds_of(child) for child in _children(pid))
    return total


def status_bytes(pid: int, key: str) -> int:
    """One ``kB`` field of ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``) in bytes; 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RunningProcess:
    """One started contender process."""

    def __init__(self, contender: Contender, log_dir: Path, env: dict[str, str]) -> None:
        self.contender = contender
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = log_dir / f"{contender.name}.stdout"
        self.stderr_path = log_dir / f"{contender.name}.stderr"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                contender.command,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env, **contender.env},
                start_new_session=True,
            )
        self.started = time.monotonic()
        self.exit_code: int | None = None
        self.user_seconds = 0.0
        self.system_seconds = 0.0
        self.max_rss_bytes = 0
        self.peak_rss_bytes = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        """Whether the process is still alive (reaps it, through ``os.wait4``, if not)."""
        return not self._reap(os.WNOHANG)

    def cpu_seconds(self) -> float:
        if self.exit_code is not None:
            return self.user_seconds + self.system_seconds
        return cpu_seconds_of(self.pid)

    def sample_peak_rss(self) -> int:
        """Read VmHWM now (the kernel's high-water mark of the process's RSS)."""
        self.peak_rss_bytes = max(self.peak_rss_bytes, status_bytes(self.pid, "VmHWM"))
        return self.peak_rss_bytes

    def wait(self, timeout: float) -> bool:
        """Wait for the process to exit by itself; True if it did (then reaped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._reap(os.WNOHANG):
                return True
            self.sample_peak_rss()
            time.sleep(0.05)
        return False

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM (SIGKILL after ``grace`` seconds), then reap with ``os.wait4``."""
        if self.exit_code is not None:
            return
        self.sample_peak_rss()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        if not self.wait(grace):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self._reap(0)

    def _reap(self, options: int) -> bool:
        if self.exit_code is not None:
            return True
        self.sample_peak_rss()
        pid, status, usage = os.wait4(self.pid, options)
        if pid == 0:
            return False
        self.exit_code = os.waitstatus_to_exitcode(status)
        self.process.returncode = self.exit_code
        self.user_seconds = usage.ru_utime
        self.system_seconds = usage.ru_stime
        # ru_maxrss is not used for the peak: on Linux it also counts the harness's own RSS,
        # which the child carried between fork and exec. VmHWM belongs to the exec'd image.
        self.max_rss_bytes = usage.ru_maxrss * 1024
        return True

    def report(self) -> dict[str, Any]:
        """The last JSON object the contender printed on stdout ({} if none)."""
        with contextlib.suppress(OSError):
            for raw_line in reversed(self.stdout_path.read_text(errors="replace").splitlines()):
                line = raw_line.strip()
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        value = json.loads(line)
                        if isinstance(value, dict):
                            return value
        return {}

    def stderr_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        return ""
