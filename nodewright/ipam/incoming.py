"""Sizing a pool for pods that are about to arrive: the one rule that a node which will receive
pods (a heir, before its donor is drained) and the pool sizing share.

Owns ``spare_ips`` (the free IPs ``pool_target`` keeps beyond demand), ``demand_with_incoming``
(the demand a pool is sized for while pods are expected) and ``incoming_need`` (how many IPs the
pool must hold before the pods are sent). They agree by construction: for every scaler and
every count,

    pool_target(demand_with_incoming(resident, incoming)) >= incoming_need(...).pool

because ``pool_target(d) >= min(max, d + spare_ips)`` (the target is the smallest batch multiple
at least ``d + batch * requestThresholdPercent / 100``, capped at the maximum) and the need is
that same minimum. A need whose pods cannot fit under the maximum at all is said so
(``fits``), so a caller can report it instead of waiting for a pool that never grows. Not for a
subnet in exhaustion mode (batch 1, one spare IP): there the pool keeps one spare, not
``spare_ips``. Pure; imports nothing internal beyond ``scaler``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodewright.ipam.scaler import PoolScaler

__all__ = ["IncomingNeed", "demand_with_incoming", "incoming_need", "spare_ips"]


def spare_ips(scaler: PoolScaler) -> int:
    """The free IPs a pool sized by ``pool_target`` keeps beyond its demand (below the maximum):
    ``ceil(batch * requestThresholdPercent / 100)``. Example: batch 16, 50 % -> 8."""
    return -(-scaler.batch_size * scaler.request_threshold_percent // 100)


def demand_with_incoming(resident: int, incoming: int) -> int:
    """The demand to size a pool for: the pods the node holds and those about to arrive."""
    if resident < 0 or incoming < 0:
        raise ValueError(f"pod counts must not be negative, got {resident} and {incoming}")
    return resident + incoming


@dataclass(frozen=True)
class IncomingNeed:
    """What a pool must offer before ``incoming`` pods are sent to a node with ``resident`` pods."""

    pool: int
    """The IPs the pool must hold: the resident and incoming pods plus the spare, capped at the
    maximum (a pool at its maximum offers all it ever can)."""
    free: int
    """The same as free IPs (the pool less the resident pods), for messages."""
    fits: bool
    """Whether the resident and incoming pods fit under the maximum at all."""
    capacity: int
    """The most IPs the pool may hold (the scaler's maximum)."""


def incoming_need(*, resident: int, incoming: int, scaler: PoolScaler) -> IncomingNeed:
    """The pool a node needs before ``incoming`` pods arrive (see the module docstring).

    Example: batch 16, 50 %, max 250, nothing resident, 10 incoming -> a pool of 18 (18 free);
    the pool sized for ``demand_with_incoming(0, 10)`` is 32."""
    capacity = scaler.max_ip_count
    demand = demand_with_incoming(resident, incoming)
    pool = min(demand + spare_ips(scaler), capacity)
    return IncomingNeed(pool=pool, free=max(pool - resident, 0), fits=demand <= capacity, capacity=capacity)
