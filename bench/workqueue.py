"""The work-queue micro-benchmark: add/get/done operations per second through nodewright's
``WorkQueue`` with 8 worker threads, and the same through client-go's rate-limiting queue (the
Go peer's ``-workqueue-ops`` mode) for scale.

One producer thread adds ``operations`` keys drawn round-robin from ``distinct`` names (so some
adds hit a queued or in-flight key, as events do in a busy controller); 8 workers ``get`` and
``done`` until the producer is finished and the queue is empty. ``run_workqueue_process`` runs it
in a fresh Python process of its own (``python -m bench.workqueue``), as the Go peer runs in
its own: the figure is the queue's overhead, not the harness's threads and heap. Side effects:
starts threads and processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["QueueRun", "run_go_workqueue", "run_workqueue", "run_workqueue_process"]

OPERATIONS = 200_000
DISTINCT = 10_000
WORKERS = 8


@dataclass
class QueueRun:
    """Counts and rates of one run."""

    implementation: str
    workers: int
    adds: int
    gets: int
    seconds: float
    operations_per_second: float
    adds_per_second: float
    gets_per_second: float
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rates(implementation: str, workers: int, adds: int, gets: int, seconds: float) -> QueueRun:
    return QueueRun(
        implementation=implementation,
        workers=workers,
        adds=adds,
        gets=gets,
        seconds=seconds,
        operations_per_second=(adds + 2 * gets) / seconds,
        adds_per_second=adds / seconds,
        gets_per_second=gets / seconds,
    )


def run_go_workqueue(
    binary: str, operations: int = OPERATIONS, distinct: int = DISTINCT, workers: int = WORKERS
) -> QueueRun:
    """The same benchmark on client-go's work queue, in the Go peer's process."""
    completed = subprocess.run(
        [
            binary,
            f"-workqueue-ops={operations}",
            f"-workqueue-keys={distinct}",
            f"-workqueue-workers={workers}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    return _rates(
        "client-go",
        int(report["workers"]),
        int(report["adds"]),
        int(report["gets"]),
        float(report["seconds"]),
    )


def run_workqueue(operations: int = OPERATIONS, distinct: int = DISTINCT, workers: int = WORKERS) -> QueueRun:
    """Drive the queue as described in the module docstring and time it."""
    from nodewright.runtime.control.workqueue import WorkQueue  # noqa: PLC0415  # the runtime may be absent

    queue: WorkQueue[str] = WorkQueue("bench")
    keys = [f"bench/widget-{i:06d}" for i in range(distinct)]
    gets = [0] * workers
    producing = threading.Event()
    producing.set()

    def work(index: int) -> None:
        count = 0
        while True:
            item = queue.get(timeout=0.05)
            if item is None:
                if not producing.is_set() and len(queue) == 0:
                    break
                continue
            queue.done(item)
            count += 1
        gets[index] = count

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for i in range(operations):
        queue.add(keys[i % distinct])
    producing.clear()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    queue.shut_down()
    return _rates("nodewright", workers, operations, sum(gets), seconds)


def run_workqueue_process() -> QueueRun:
    """``run_workqueue`` in a fresh interpreter (this one's executable, from the project root)."""
    completed = subprocess.run(
        [sys.executable, "-m", "bench.workqueue"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    return QueueRun(**report)


if __name__ == "__main__":
    print(json.dumps(run_workqueue().as_dict()), flush=True)
