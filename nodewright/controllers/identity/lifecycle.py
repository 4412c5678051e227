"""Pure rules of the AzureAssignedIdentity lifecycle for pods whose node does not exist: how long
such a pod keeps its object (condition NodeNotFound, retried on a capped exponential backoff) and
when the object is collected. A pod created before its node registers gets its identity as soon
as the node appears; a pod left on a node that was deleted stops holding an object after
``missing_node_attempts`` attempts. No I/O; ``unresolved`` keeps one ``NodeWait`` per such pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodewright.controllers.identity.targets import retry_delay

__all__ = ["NodeWait", "next_wait_in", "node_wait_step"]


@dataclass(frozen=True)
class NodeWait:
    """A pod waiting for its node: since when, how many attempts so far, and the next one."""

    since: datetime
    attempts: int
    next_at: datetime

    def exhausted(self, max_attempts: int) -> bool:
        """Whether the pod has waited through all its attempts (its object is then collected)."""
        return self.attempts > max_attempts


def node_wait_step(previous: NodeWait | None, now: datetime, first: timedelta, cap: timedelta) -> NodeWait:
    """The wait after a pass at ``now``: a new wait starts at attempt 1; a pass before the next
    attempt is due (another event woke it) counts nothing; a pass at or after it counts one more
    attempt and schedules the next, ``first`` x 2^(n-1) later, at most ``cap``."""
    if previous is None:
        return NodeWait(now, 1, now + retry_delay(1, first, cap))
    if now < previous.next_at:
        return previous
    attempts = previous.attempts + 1
    return NodeWait(previous.since, attempts, now + retry_delay(attempts, first, cap))


def next_wait_in(waits: Iterable[NodeWait], now: datetime, max_attempts: int) -> float | None:
    """Seconds until the next attempt of any pod still waiting (None when none waits)."""
    times = [wait.next_at for wait in waits if not wait.exhausted(max_attempts)]
    if not times:
        return None
    return max(0.0, (min(times) - now).total_seconds())
