"""ipam: pure IP-pool arithmetic and allocation planning for NodeNetworkConfig pools; no I/O.

- ``scaler``: the pool target (Azure CNS v2: batch-aligned, buffer, max; exhaustion mode).
- ``count``: the whole requested-count rule (``requested_count``): headroom, target,
  hysteresis, marking, prefix blocks, the node's bound, and the count in NIC entries.
- ``request``: the node's half, spec.requestedIPCount and ipsNotInUse (#962 and #4891 ruled out).
- ``release``: which free IPs to give back (never one in use; newest first).
- ``allocation``: the control plane's half, which NIC IP configurations to add and remove.
- ``leaks``: first-seen times and the grace period for leaked IP configurations.
- ``backoff``: per-NIC batch halving on capacity errors and exponential backoff.
- ``subnet``: subnet exhaustion with hysteresis.
- ``incoming``: sizing a pool for pods about to arrive (a heir before its donor is drained),
  and the free IPs to wait for, agreeing by construction.
- ``blocks``: /28 prefix blocks (experimental): addresses per entry, blocks in use.

Imports nothing internal (enforced by import-linter). The node_network_config reconciler in
``controllers`` reads the cluster and the cloud, calls these functions, and writes.
"""

from nodewright.ipam.allocation import (
    AllocationPlan,
    NicIpConfiguration,
    plan_allocation,
    status_assignments,
)
from nodewright.ipam.backoff import NicGuard, backoff_delay
from nodewright.ipam.blocks import (
    BLOCK_PREFIX_LENGTH,
    BLOCK_SIZE,
    address_count,
    addresses_of,
    blocks_for,
    blocks_in_use,
)
from nodewright.ipam.count import CountFacts, CountRule, RequestedCount, nic_entries_wanted, requested_count
from nodewright.ipam.incoming import IncomingNeed, demand_with_incoming, incoming_need, spare_ips
from nodewright.ipam.leaks import DEFAULT_LEAK_GRACE_SECONDS, LeakTracker, collectable
from nodewright.ipam.release import choose_ips_to_release
from nodewright.ipam.request import PoolRequest, compute_request, split_listed
from nodewright.ipam.scaler import (
    DEFAULT_MAX_IP_COUNT,
    MAX_IP_CONFIGURATIONS_PER_NIC,
    MAX_SECONDARY_IPS_PER_NIC,
    PoolScaler,
    pool_target,
)
from nodewright.ipam.subnet import subnet_exhausted

__all__ = [
    "BLOCK_PREFIX_LENGTH",
    "BLOCK_SIZE",
    "DEFAULT_LEAK_GRACE_SECONDS",
    "DEFAULT_MAX_IP_COUNT",
    "MAX_IP_CONFIGURATIONS_PER_NIC",
    "MAX_SECONDARY_IPS_PER_NIC",
    "AllocationPlan",
    "CountFacts",
    "CountRule",
    "IncomingNeed",
    "LeakTracker",
    "NicGuard",
    "NicIpConfiguration",
    "PoolRequest",
    "PoolScaler",
    "RequestedCount",
    "address_count",
    "addresses_of",
    "backoff_delay",
    "blocks_for",
    "blocks_in_use",
    "choose_ips_to_release",
    "collectable",
    "compute_request",
    "demand_with_incoming",
    "incoming_need",
    "nic_entries_wanted",
    "plan_allocation",
    "pool_target",
    "requested_count",
    "spare_ips",
    "split_listed",
    "status_assignments",
    "subnet_exhausted",
]
