"""One ``make run`` per work directory.

Owns ``lock_work_dir``: an exclusive ``flock`` on ``<work dir>/run.lock`` held for the life of
the run, with the holder's pid written in the file. A second run on the same directory gets
``WorkDirBusyError`` (naming the first run's pid and the directory) before it touches any file there,
so it can never regenerate the first run's certificates or etcd data. The kernel drops the lock
when the holder exits, however it exits, so a crashed run never leaves a stale lock behind.
Side effects: creates the work directory and the lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LOCK_FILE", "WorkDirBusyError", "lock_work_dir"]

LOCK_FILE = "run.lock"


class WorkDirBusyError(RuntimeError):
    """Another live process holds the work directory."""

    def __init__(self, pid: str, work_dir: Path) -> None:
        super().__init__(f"already running (pid {pid}, work dir {work_dir})")
        self.pid = pid
        self.work_dir = work_dir


@contextlib.contextmanager
def lock_work_dir(work_dir: Path) -> Iterator[None]:
    """Hold ``work_dir`` for this process until the block ends; raise ``WorkDirBusyError`` at once
    if another process holds it."""
    work_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(work_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            raise WorkDirBusyError(holder, work_dir) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(descriptor)  # releases the lock
