"""Retrying writes that lose optimistic-concurrency races, with client-go's backoffs.

Owns ``Backoff`` (steps, duration, factor, jitter, as client-go's ``wait.Backoff``),
``DEFAULT_RETRY`` and ``DEFAULT_BACKOFF`` (client-go ``retry.DefaultRetry`` and
``retry.DefaultBackoff``) and ``retry_on_conflict``, built on tenacity. Only ``errors.Conflict``
is retried: an ``AlreadyExists`` (also a 409) or any other error is raised at once.

Side effects: sleeps between attempts.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity

from nodewright.runtime.kube import errors

__all__ = ["DEFAULT_BACKOFF", "DEFAULT_RETRY", "Backoff", "retry_on_conflict"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """``steps`` attempts in all; the n-th wait is ``duration * factor**n`` (seconds) stretched
    by up to ``jitter`` times itself."""

    steps: int
    duration: float
    factor: float
    jitter: float

    def delay(self, attempt: int) -> float:
        """The wait after the ``attempt``-th failure (1-based)."""
        base = self.duration * self.factor ** (attempt - 1)
        return base + base * self.jitter * random.random()  # noqa: S311 - jitter only


DEFAULT_RETRY = Backoff(steps=5, duration=0.010, factor=1.0, jitter=0.1)
"""client-go ``retry.DefaultRetry``: for writes racing other controllers."""
DEFAULT_BACKOFF = Backoff(steps=4, duration=0.010, factor=5.0, jitter=0.1)
"""client-go ``retry.DefaultBackoff``: for conflicts expected to last longer."""


def retry_on_conflict(fn: Callable[[], T], backoff: Backoff = DEFAULT_RETRY) -> T:
    """Call ``fn`` until it does not raise ``errors.Conflict``, at most ``backoff.steps`` times.

    ``fn`` must re-read the object it writes on every call (a stale resourceVersion would only
    conflict again). The last ``Conflict`` is raised when the attempts run out.
    """
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(errors.Conflict),
        stop=tenacity.stop_after_attempt(backoff.steps),
        wait=lambda state: backoff.delay(state.attempt_number),
        reraise=True,
    )
    return retrying(fn)
