"""The ``nodewright.io/incoming-pods`` Node annotation: how many pod IPs a heir is about to need.

The NodeImage reconciler writes it on a heir while its donor still holds pods that a drain will
move there (the donor's name, the count, and when the expectation lapses); it updates the count
as the donor drains and removes it once nothing is left to move or the pair is released. The
node-network-config reconciler reads it and sizes the heir's pool for its own pods plus these
(``nodewright.ipam.demand_with_incoming``) before any of them arrive, so the heir-network gate
never waits for a pool that is sized only for the pods already on the heir. An expectation past
``expires`` counts for nothing: a crashed or abandoned rollout cannot hold a pool large for ever.
Pure; imports nothing internal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["INCOMING_PODS_ANNOTATION", "IncomingPods"]

INCOMING_PODS_ANNOTATION = "nodewright.io/incoming-pods"
"""On a heir Node: the pods its donor's drain will move there (JSON, see ``IncomingPods``)."""

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class IncomingPods:
    """``pods`` pod IPs expected from ``donor`` until ``expires``."""

    donor: str
    pods: int
    expires: datetime

    def format(self) -> str:
        """The annotation's value: ``{"donor": ..., "pods": N, "expires": "<RFC 3339>"}``."""
        expires = self.expires.astimezone(UTC).strftime(_TIME_FORMAT)
        return json.dumps({"donor": self.donor, "pods": self.pods, "expires": expires}, sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> IncomingPods | None:
        """The expectation in an annotation; ``None`` when there is none or it does not parse
        (a negative count, a time without a timezone)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            pods = data["pods"]
            expires = datetime.fromisoformat(str(data["expires"]))
            donor = str(data.get("donor") or "")
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        if isinstance(pods, bool) or not isinstance(pods, int) or pods < 0 or expires.tzinfo is None:
            return None
        return cls(donor=donor, pods=pods, expires=expires.astimezone(UTC))

    def count_at(self, now: datetime) -> int:
        """The pods still expected at ``now``: none once the expectation has lapsed."""
        return self.pods if now < self.expires else 0
