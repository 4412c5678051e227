"""Consumer ``nodesubnet`` against the CNS NodeSubnet stand-in (its fetch schedule, NMAgent's lag,
its own pool and CNI bookkeeping): pods get addresses discovered from the NIC; nothing is ever
removed from a NIC; every ARM write is counted."""

from __future__ import annotations

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
    ipam.configure(consumer="nodesubnet", scaler=SCALER, resync_period_seconds=0.5)
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
    with ipam.watched(passes=4):  # passes after the pods left (resyncs every 0.5 s)
        pass
    assert len(ipam.secondary(node)) == TWENTY, "an IP was released with release: never"
    assert _writes(ipam) == writes, "an ARM write after the pods left"
    config = ipam.config(node)
    assert config is not None
    assert config.spec.ips_not_in_use == []
    assert consumer.stale_handouts == 0
    assert consumer.refused_updates() == 0
    ipam.settle_and_check()
