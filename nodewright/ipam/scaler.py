"""How big a node's pool of secondary IPs should be: the scaler and the pool target.

Owns ``PoolScaler`` (batch size, request threshold, maximum, normalised the way Azure CNS reads
``status.scaler`` of a NodeNetworkConfig), its exhaustion mode (batch 1, one spare IP) and
``pool_target``, CNS's idempotent v2 scaling function::

    target = min(max, batch * ceil(buffer + demand / batch)),  buffer = requestThresholdPercent / 100

computed in exact integer arithmetic (no float rounding at batch boundaries). Pure; imports
nothing internal. Neighbours: ``request`` turns a target into spec.requestedIPCount and
ipsNotInUse; the reconciler reads the scaler from its configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_IP_COUNT",
    "DEFAULT_RELEASE_THRESHOLD_PERCENT",
    "DEFAULT_REQUEST_THRESHOLD_PERCENT",
    "MAX_IP_CONFIGURATIONS_PER_NIC",
    "MAX_SECONDARY_IPS_PER_NIC",
    "PoolScaler",
    "pool_target",
]

MAX_IP_CONFIGURATIONS_PER_NIC = 256
"""Azure's limit of IP configurations on one NIC, the primary one included."""
MAX_SECONDARY_IPS_PER_NIC = MAX_IP_CONFIGURATIONS_PER_NIC - 1
"""What is left for pods once the NIC's primary IP configuration (the node's address) is counted."""

DEFAULT_MAX_IP_COUNT = 250
"""CNS's default maximum of IPs per node (and the value it clamps larger maxima to)."""
DEFAULT_BATCH_SIZE = 16
DEFAULT_REQUEST_THRESHOLD_PERCENT = 50
DEFAULT_RELEASE_THRESHOLD_PERCENT = 150


@dataclass(frozen=True)
class PoolScaler:
    """A node's pool sizing rules, already normalised (use ``normalized`` on raw wire values).

    ``release_threshold_percent`` is carried for CNS's v1 pool monitor, which reads it from
    ``status.scaler``; the v2 target here does not use it."""

    batch_size: int = DEFAULT_BATCH_SIZE
    request_threshold_percent: int = DEFAULT_REQUEST_THRESHOLD_PERCENT
    max_ip_count: int = DEFAULT_MAX_IP_COUNT
    release_threshold_percent: int = DEFAULT_RELEASE_THRESHOLD_PERCENT

    def __post_init__(self) -> None:
        if self.max_ip_count < 1:
            raise ValueError(f"max_ip_count must be at least 1, got {self.max_ip_count}")
        if not 1 <= self.batch_size <= self.max_ip_count:
            raise ValueError(f"batch_size must be within [1, {self.max_ip_count}], got {self.batch_size}")
        if self.request_threshold_percent < 0:
            raise ValueError(
                f"request_threshold_percent must not be negative, got {self.request_threshold_percent}"
            )

    @classmethod
    def normalized(
        cls,
        *,
        batch_size: int,
        request_threshold_percent: int,
        max_ip_count: int,
        release_threshold_percent: int = DEFAULT_RELEASE_THRESHOLD_PERCENT,
        ceiling: int = MAX_SECONDARY_IPS_PER_NIC,
    ) -> PoolScaler:
        """A scaler from raw values as they may appear on the wire: a maximum of zero or less
        means the default (250), larger maxima are clamped to ``ceiling`` (what one NIC can hold
        besides its primary IP); the batch is clamped to [1, max]; a negative threshold counts
        by its magnitude, as CNS reads it."""
        maximum = DEFAULT_MAX_IP_COUNT if max_ip_count <= 0 else max_ip_count
        maximum = max(1, min(maximum, ceiling))
        return cls(
            batch_size=min(max(batch_size, 1), maximum),
            request_threshold_percent=abs(request_threshold_percent),
            max_ip_count=maximum,
            release_threshold_percent=abs(release_threshold_percent),
        )

    def exhausted(self) -> PoolScaler:
        """The scaler for a node on an exhausted subnet: a batch of one and a buffer of one whole
        batch, so the node holds exactly one spare IP beyond its demand (CNS's exhaustion mode)."""
        return PoolScaler(
            batch_size=1,
            request_threshold_percent=100,
            max_ip_count=self.max_ip_count,
            release_threshold_percent=self.release_threshold_percent,
        )


def pool_target(demand: int, scaler: PoolScaler, *, exhausted: bool = False) -> int:
    """How many IPs a node with ``demand`` pods should hold: the smallest multiple of the batch
    that leaves at least ``request_threshold_percent`` of a batch spare (a whole extra batch when
    demand sits exactly on a boundary and the buffer is 100 %), capped at the maximum.

    Example: batch 16, buffer 50 %, 25 pods -> 16 * ceil(0.5 + 25/16) = 16 * 3 = 48."""
    if demand < 0:
        raise ValueError(f"demand must not be negative, got {demand}")
    effective = scaler.exhausted() if exhausted else scaler
    batch = effective.batch_size
    percent = effective.request_threshold_percent
    # ceil(percent/100 + demand/batch) == ceil((percent*batch + 100*demand) / (100*batch))
    numerator = percent * batch + 100 * demand
    denominator = 100 * batch
    batches = -(-numerator // denominator)
    return min(effective.max_ip_count, batch * batches)
