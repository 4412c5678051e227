"""Evicting a drained node's pods side by side, as ``kubectl drain`` does.

Owns ``evict_all``: each pod's eviction is its own Eviction API call, and a rollout's pass used
to send them one after another (10 pods of a donor, 10 donors in a wave: 100 round trips, the
largest share of the NodeImage worker's wall time in ``bench.scale``, issue 32). They go through
a small thread pool now, at most ``EVICTION_CONCURRENCY`` at once. The checkpoint before each
eviction is still called in order on the caller's thread; one that raises (a restart test's
stop) lets the evictions already started finish first, so the world holds exactly those, as it
would had they been sent one by one. A disruption budget that refuses an eviction (429) blocks
that pod only; a pod already gone counts as evicted. Any other error is raised once every
eviction started has ended. Side effects: evictions, log lines, threads for the call's length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from nodewright.controllers.node_image.draining import PodKey
from nodewright.runtime import errors, get_logger

__all__ = ["BUDGET_REFUSED", "EVICTION_CONCURRENCY", "evict_all"]

log = get_logger(__name__)

EVICTION_CONCURRENCY = 8
"""Evictions in flight at once for one node (the API server settles disruption budgets itself:
two evictions racing for the last allowed disruption get one 429)."""

BUDGET_REFUSED = "the API server refused the eviction (disruption budget)"

Evict = Callable[[str, str], object]


def _evict(evict: Evict, node: str, key: PodKey) -> str | None:
    """One eviction: ``None`` when the pod is evicted (or gone), else why it is blocked."""
    try:
        evict(key.name, key.namespace)
    except errors.TooManyRequests:
        return BUDGET_REFUSED
    except errors.NotFound:
        return None
    log.info("Evicted pod", node=node, pod=str(key))
    return None


def evict_all(
    evict: Evict, node: str, keys: Sequence[PodKey], checkpoint: Callable[[str], None]
) -> dict[PodKey, str]:
    """Evict ``keys`` (``evict(name, namespace)``, the client's); returns the pods a disruption
    budget refused, with why."""
    if not keys:
        return {}
    started: dict[PodKey, Future[str | None]] = {}
    with ThreadPoolExecutor(
        max_workers=min(EVICTION_CONCURRENCY, len(keys)), thread_name_prefix="evict"
    ) as pool:
        for key in keys:
            checkpoint("evict")  # raising here waits for the started ones (the pool's exit)
            started[key] = pool.submit(_evict, evict, node, key)
    blocked: dict[PodKey, str] = {}
    for key, future in started.items():
        reason = future.result()  # any other error is raised here, every eviction having ended
        if reason is not None:
            blocked[key] = reason
    return blocked
