"""cProfile of the NodeImage reconciler's passes in a bench process: ``profiled_passes(path)``
wraps ``NodeImageReconciler.reconcile`` so every pass, on whichever worker thread runs it, is
profiled into one ``cProfile.Profile``; on exit the stats are written to ``path`` (pstats format)
and the top functions by cumulative time to ``path`` + ``.txt``. Only the passes are profiled,
not the informers, the emulator or the node simulator sharing the process.

Neighbour: ``bench.nodeimage --profile PATH``. Side effects: replaces a class attribute for the
duration of the ``with`` block; files.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import pstats
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nodewright.controllers.node_image.node_image import NodeImageReconciler
from nodewright.runtime.control.reconcile import Request, Result

__all__ = ["profiled_passes"]


@contextlib.contextmanager
def profiled_passes(path: str | None) -> Iterator[None]:
    """Profile every NodeImage pass inside the block (``path`` None: do nothing)."""
    if path is None:
        yield
        return
    profile = cProfile.Profile()
    lock = threading.Lock()
    real = NodeImageReconciler.reconcile

    def reconcile(self: NodeImageReconciler, request: Request) -> Result:
        with lock:  # one profiler; passes of one controller never overlap at its default 1 worker
            profile.enable()
            try:
                return real(self, request)
            finally:
                profile.disable()

    setattr(NodeImageReconciler, "reconcile", reconcile)  # noqa: B010 - restored below
    try:
        yield
    finally:
        setattr(NodeImageReconciler, "reconcile", real)  # noqa: B010
        _write(profile, Path(path))


def _write(profile: Any, path: Path) -> None:
    profile.dump_stats(str(path))
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)
    path.with_suffix(path.suffix + ".txt").write_text(text.getvalue())
