"""A background thread that runs one step again and again, with a pause between runs.

The node simulator and the CNS NodeSubnet consumer both poll this way. Side effects: starts and
joins one daemon thread; whatever the step does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["PeriodicThread"]


class PeriodicThread:
    """Runs ``step`` on a daemon thread named ``name`` until stopped, waiting ``interval()``
    seconds after each run (read each time, so a caller may change it while running). An
    exception from ``step`` goes to ``on_error`` and the loop goes on."""

    def __init__(
        self,
        name: str,
        step: Callable[[], object],
        interval: Callable[[], float],
        on_error: Callable[[Exception], None],
    ) -> None:
        self._name = name
        self._step = step
        self._interval = interval
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end and wait (at most 10 s) for the step under way to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as error:  # the loop outlives a failed step; on_error reports it
                self._on_error(error)
            self._stop.wait(self._interval())
