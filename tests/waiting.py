"""One way for tests to wait: poll a condition until it holds, or fail naming what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["wait_for"]


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
