"""Which secondary IPs to give back when a pool shrinks.

Owns ``choose_ips_to_release``. Rules, in order:

1. Never an IP a pod uses, nor one already pending release (it is already on its way out).
2. Newest first: the candidates are given oldest first (the order the control plane lists them
   in status.networkContainers[0].ipAssignments, to which it appends new IPs), and the newest
   are released. The newest IPs are the most speculative part of the pool (the buffer added by
   the last scale-up), have served the fewest pods, and releasing them keeps the long-lived part
   of the pool, and so the status most readers already hold, stable.
3. Ties cannot happen (names are unique); the order is fully deterministic for a given input.

Pure; imports nothing internal. Neighbour: ``request`` calls it when the target falls below the
IPs the node holds.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["choose_ips_to_release"]


def choose_ips_to_release(
    assignments: Sequence[tuple[str, str]],
    count: int,
    *,
    in_use_addresses: Collection[str],
    pending_release: Collection[str] = (),
) -> list[str]:
    """Up to ``count`` names from ``assignments`` (``(name, address)`` pairs, oldest first) that
    may be released: whose address no pod uses, not already pending release (by name). Fewer
    are returned when fewer are free; the result lists the newest first."""
    if count <= 0:
        return []
    chosen: list[str] = []
    for name, address in reversed(assignments):
        if address in in_use_addresses or name in pending_release:
            continue
        chosen.append(name)
        if len(chosen) == count:
            break
    return chosen
