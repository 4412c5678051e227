"""One way for tests to wait: poll a condition until it holds, or fail naming what was awaited.

``wait_for`` is the general loop. ``eventually`` is the same loop with the reconciler tests'
defaults: a reconcile through a real API server and the ARM emulator, on a shared machine, gets
30 s unless the call site says otherwise, polled every 0.1 s.

``watched_window`` is the way to wait when a test asserts that nothing happens: instead of a
fixed sleep, it waits until the controller's reconcile count (the runtime's
``controller_runtime_reconcile_total``) has risen by N, and fails if the reconciler never ran."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = [
    "RECONCILE_TIMEOUT",
    "eventually",
    "reconcile_count",
    "requested_passes",
    "wait_for",
    "watched_window",
]

RECONCILE_TIMEOUT = 30.0
"""The default deadline of ``eventually``, in seconds."""


def wait_for(
    condition: Callable[[], Any], timeout: float = 10.0, message: str = "condition", interval: float = 0.05
) -> Any:
    """Poll ``condition`` until it returns something truthy and return that value; raise
    ``AssertionError`` naming ``message`` once ``timeout`` seconds have passed without it."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not met within {timeout} s")
        time.sleep(interval)


def eventually(
    condition: Callable[[], Any], timeout: float = RECONCILE_TIMEOUT, message: str = "condition"
) -> Any:
    """``wait_for`` polled every 0.1 s with a 30 s default deadline: what the reconciler tests
    (identity, federation, node image, node network config) wait with."""
    return wait_for(condition, timeout, message, interval=0.1)


def reconcile_count(source: Any, controller: str) -> int:
    """How many reconciles of ``controller`` have finished, whatever their result: the
    ``controller_runtime_reconcile_total`` series the runtime keeps. ``source`` is a ``Manager``, a
    ``Controller`` (anything with ``.metrics``) or a ``Metrics``."""
    metrics = getattr(source, "metrics", source)
    family = metrics.reconcile_total.collect()
    return int(
        sum(sample.value for sample in family.samples if sample.labels.get("controller") == controller)
    )


@contextlib.contextmanager
def watched_window(
    source: Any, controller: str, passes: int = 2, timeout: float = RECONCILE_TIMEOUT
) -> Iterator[None]:
    """A window in which ``controller`` is seen to reconcile: on exit, wait until its reconcile
    count has risen by ``passes`` since entry, and fail (``AssertionError``) when it has not within
    ``timeout`` seconds, so a test that asserts "nothing changed" afterwards cannot pass while the
    reconciler never ran. Take the baseline inside the block::

        with watched_window(manager, "identity-assignment", passes=4):
            settled = update_count()
        assert update_count() == settled

    The first counted pass may have started before the window; with ``passes`` of 2 or more at
    least one whole pass ran inside it."""
    if passes < 1:
        raise ValueError("passes must be at least 1")
    start = reconcile_count(source, controller)
    yield
    wait_for(
        lambda: reconcile_count(source, controller) >= start + passes,
        timeout,
        f"{passes} reconciles of {controller!r} (from {start})",
        interval=0.05,
    )


def requested_passes(
    manager: Any,
    controller: str,
    requests: Sequence[Any],
    rounds: int = 2,
    timeout: float = RECONCILE_TIMEOUT,
) -> None:
    """Ask ``controller`` of ``manager`` for ``rounds`` rounds of reconciles of ``requests`` (as
    their events would), each round once the last one's reconciles were counted: for windows in
    which nothing would run the reconciler on its own (no resync due). Fails (``AssertionError``)
    when a round is not reconciled within ``timeout`` seconds."""
    (found,) = [c for c in manager.controllers if c.name == controller]

    def counted(target: int) -> Callable[[], bool]:
        return lambda: reconcile_count(manager, controller) >= target

    for _ in range(rounds):
        start = reconcile_count(manager, controller)
        for request in requests:
            found.enqueue(request)
        wait_for(
            counted(start + len(requests)),
            timeout,
            f"{len(requests)} requested reconciles of {controller!r} (from {start})",
            interval=0.05,
        )
