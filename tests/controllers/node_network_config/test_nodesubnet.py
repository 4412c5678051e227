"""Consumer ``nodesubnet`` against the simulated Azure CNS NodeSubnet (its fetch schedule, its own
pool, its refusal to drop an assigned IP): pods get addresses discovered from the NIC; by default
nothing is ever removed from a NIC; with ``release: idle`` only addresses idle past the consumer's
longest discovery interval plus grace are released, after the hysteresis, and never one a pod
holds; every ARM write is counted."""

from __future__ import annotations

import time

from nodewright.ipam import PoolScaler, pool_target
from tests.controllers.node_network_config.harness import IpamHarness
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=8, request_threshold_percent=50, max_ip_count=250)
TWENTY = pool_target(20, SCALER)  # 24: batch-aligned with half a batch spare


def _writes(ipam: IpamHarness) -> int:
    return len(
        [r for r in ipam.emulator.requests.entries() if r.method in {"PUT", "PATCH", "DELETE", "POST"}]
    )


def test_nodesubnet_grows_with_pods_and_never_releases_by_default(ipam: IpamHarness) -> None:
    """20 pods: the NIC grows batch-aligned (24), pods are addressed from what CNS discovered, the NNC
    records the pool; all pods go: no write removes anything, the NIC keeps its IPs."""
    ipam.configure(consumer="nodesubnet", scaler=SCALER)
    ipam.add_scale_set(capacity=1)
    ipam.start(agent=False)
    node = eventually(ipam.node_names, message="a simulated node")[0]
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 8, message="first batch")
    consumer = ipam.start_nodesubnet_consumer()
    pods = ipam.create_pods(node, 20)
    eventually(lambda: len(ipam.pod_addresses(node)) == 20, timeout=60, message="pods addressed")
    eventually(lambda: len(ipam.secondary(node)) == TWENTY, timeout=30, message="pool at target")
    config = ipam.config(node)
    assert config is not None
    assert config.spec.requested_ip_count == TWENTY
    assert set(ipam.pod_addresses(node).values()) <= set(ipam.secondary(node).values())
    writes = _writes(ipam)
    ipam.delete_pods(pods)
    eventually(lambda: not ipam.pods(), timeout=30, message="pods gone")
    time.sleep(4.0)
    assert len(ipam.secondary(node)) == TWENTY, "an IP was released with release: never"
    assert _writes(ipam) == writes, "an ARM write after the pods left"
    config = ipam.config(node)
    assert config is not None
    assert config.spec.ips_not_in_use == []
    assert consumer.stale_handouts == 0
    assert consumer.refused_updates() == 0
    ipam.settle_and_check()


def test_nodesubnet_idle_release_waits_for_discovery_and_keeps_used_ips(ipam: IpamHarness) -> None:
    """release: idle with a consumer whose longest interval is 2 s, grace 1 s, hysteresis 2 s:
    nothing is released before an address has been idle 3 s; then the pool shrinks to the target;
    the IPs pods hold stay (CNS never sees an assigned IP vanish), and once CNS has fetched again
    the pods that arrive get only addresses still on the NIC."""
    ipam.configure(
        consumer="nodesubnet",
        release="idle",
        scaler=SCALER,
        consumer_discovery_max_seconds=2.0,
        idle_grace_seconds=1.0,
        scale_down_delay_seconds=2.0,
        release_settle_seconds=0.5,
    )
    ipam.add_scale_set(capacity=1)
    ipam.start(agent=False)
    node = eventually(ipam.node_names, message="a simulated node")[0]
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 8, message="first batch")
    consumer = ipam.start_nodesubnet_consumer(minimum=0.5, maximum=2.0)
    pods = ipam.create_pods(node, 20)
    eventually(lambda: len(ipam.pod_addresses(node)) == 20, timeout=60, message="pods addressed")
    eventually(lambda: len(ipam.secondary(node)) == TWENTY, timeout=30, message="grown to the target")
    staying = pods[:2]
    ipam.delete_pods(pods[2:])
    left_at = time.monotonic()
    kept = {ipam.pod_addresses(node)[p] for p in staying}
    eventually(lambda: len(ipam.secondary(node)) == 8, timeout=60, message="shrunk to the target")
    assert time.monotonic() - left_at >= 3.0, "released before the idle period"
    assert kept <= set(ipam.secondary(node).values()), "an IP in use was released"
    assert consumer.refused_updates() == 0, "CNS saw an assigned IP vanish"
    # CNS keeps handing out released IPs until its next fetch: the risk release: idle accepts.
    # Pods that arrive after that fetch get only addresses still on the NIC.
    eventually(
        lambda: consumer.known(node) == set(ipam.secondary(node).values()), timeout=10, message="fetched"
    )
    more = ipam.create_pods(node, 4)
    eventually(
        lambda: all(p in ipam.pod_addresses(node) for p in more), timeout=60, message="new pods addressed"
    )
    assert consumer.stale_handouts == 0
    ipam.settle_and_check()
