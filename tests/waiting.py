"""One way for tests to wait: poll a condition until it holds, or fail naming what was awaited.

``wait_for`` is the general loop. ``eventually`` is the same loop with the reconciler tests'
defaults: a reconcile through a real API server and the ARM emulator, on a shared machine, gets
30 s unless the call site says otherwise, polled every 0.1 s."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["RECONCILE_TIMEOUT", "eventually", "wait_for"]

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
