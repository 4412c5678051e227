"""Whether a subnet counts as exhausted, from its usage, with hysteresis.

Owns ``subnet_exhausted``. Azure CNS's control plane polls subnet utilisation and flips
ClusterSubnetState.status.exhausted with two thresholds so it does not oscillate. We express the
thresholds in free addresses per batch, which is what matters to a node: a subnet is exhausted
when fewer addresses are free than one batch (a normal scale-up could fail), and it recovers
once at least two batches are free again. Exhausted nodes use a batch of one (``scaler``).
Pure; imports nothing internal.
"""

from __future__ import annotations

__all__ = ["subnet_exhausted"]


def subnet_exhausted(
    *, available: int, batch_size: int, was_exhausted: bool, recover_batches: int = 2
) -> bool:
    """Enter exhaustion when ``available`` < one batch; leave it at ``recover_batches`` batches."""
    batch = max(1, batch_size)
    if was_exhausted:
        return available < batch * max(1, recover_batches)
    return available < batch
