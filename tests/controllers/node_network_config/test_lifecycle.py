"""Node lifecycle, garbage collection and subnet exhaustion against the real stack: a deleted
node's NodeNetworkConfig is finalized and its IPs released; leaked IP configurations are adopted
when needed and otherwise released after the grace period; an exhausted subnet halves batches,
marks the ClusterSubnetState exhausted and serves pods one IP at a time."""

from __future__ import annotations

import time
from collections.abc import Callable

from nodewright.api.acn.v1alpha1 import ClusterSubnetState
from nodewright.cloud.resource_ids import parse_provider_id
from nodewright.controllers.node_network_config import CLUSTER_SUBNET_STATE
from nodewright.ipam import PoolScaler
from nodewright.runtime import errors
from nodewright.runtime.kube.kinds import NODE
from tests.controllers.node_network_config.harness import IpamHarness
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)


def _pool_of(ipam: IpamHarness, node: str, size: int) -> Callable[[], bool]:
    return lambda: len(ipam.assignments(ipam.config(node))) == size


def test_deleted_nodes_are_finalized_and_their_ips_released(ipam: IpamHarness) -> None:
    """A machine deleted in Azure: its Node goes, then its NodeNetworkConfig. A Node deleted while
    its machine (and NIC) remain: the NodeNetworkConfig is finalized only after every secondary
    IP configuration is removed from the NIC."""
    ipam.add_scale_set(capacity=2)
    ipam.start()
    first, second = eventually(lambda: len(ipam.node_names()) == 2 and ipam.node_names(), message="two nodes")
    for node in (first, second):
        eventually(_pool_of(ipam, node, 16), message=f"{node} pool")
    ipam.check_invariants()

    provider_id = ipam.client.get(NODE, second)["spec"]["providerID"]
    ipam.cloud.compute.delete_instance(parse_provider_id(provider_id))
    eventually(lambda: ipam.config(second) is None, message="the deleted machine's NodeNetworkConfig gone")

    nic_id = ipam.nic_of(first)
    ipam.create_pods(first, 3)
    eventually(lambda: len(ipam.pod_addresses(first)) == 3, message="pods addressed")
    ipam.stop_simulator()
    ipam.client.delete(NODE, first)
    eventually(lambda: ipam.config(first) is None, message="the deleted node's NodeNetworkConfig gone")
    assert ipam.cloud.network.get_network_interface(nic_id).secondary_ip_configurations == ()


def test_leaked_ip_configurations_are_adopted_or_collected(ipam: IpamHarness) -> None:
    """An IP configuration on the NIC that no status lists is released once the grace period has
    passed; one that appears when the node needs more IPs is adopted instead of adding a new one."""
    ipam.configure(
        scaler=SCALER, leak_grace_period_seconds=6.0, nic_refresh_seconds=0.5, resync_period_seconds=1.0
    )
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = eventually(ipam.node_names, message="a node")[0]
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 16, message="first batch")
    nic_id = ipam.nic_of(node)

    ipam.cloud.network.add_secondary_ip_configurations(nic_id, ["leaked-ip-1"])
    started = time.monotonic()
    eventually(lambda: "leaked-ip-1" not in ipam.secondary(node), timeout=30, message="leak collected")
    assert time.monotonic() - started >= 5.5, "released before its grace period"
    assert "leaked-ip-1" not in {name for name, _ in ipam.assignments(ipam.config(node))}

    ipam.cloud.network.add_secondary_ip_configurations(nic_id, ["leaked-ip-2"])
    # Adopted only if a pass saw it before the demand grew (and within its grace): wait for the
    # controller's second NIC read after the add (a node's passes run one at a time, so that read
    # began after the add).
    reads_before = nic_reads(ipam)
    eventually(lambda: nic_reads(ipam) >= reads_before + 2, message="the NIC read since the leak")
    ipam.create_pods(node, 12)
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 32, message="second batch")
    assert "leaked-ip-2" in {name for name, _ in ipam.assignments(ipam.config(node))}
    eventually(lambda: len(ipam.pod_addresses(node)) == 12, message="pods addressed")
    with ipam.watched(passes=3):  # resyncs (1 s) over the addressed pods
        pass
    ipam.check_invariants()


def nic_reads(ipam: IpamHarness) -> int:
    """The NIC reads made through the test's cloud clients (the controller's passes; the test
    itself reads none while it waits on this)."""
    return ipam.calls.count(kind="call", operation="network.get_scale_set_instance_nic", outcome="success")


def test_exhausted_subnet(ipam: IpamHarness) -> None:
    """A /27 (26 addresses free after the node's own): growing to 32 IPs fails, the batch halves
    until what fits is added and fails at one, the subnet's ClusterSubnetState says exhausted,
    and the node then asks for one spare IP beyond its demand; all 20 pods get an address."""
    ipam.subnet_prefix = "10.241.0.0/27"
    # Subnet usage is read once at the start (26 free): the shortage is found by failing writes.
    ipam.configure(scaler=SCALER, subnet_check_interval_seconds=300)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = eventually(ipam.node_names, message="a node")[0]
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 16, message="first batch")
    ipam.create_pods(node, 20)
    eventually(lambda: len(ipam.pod_addresses(node)) == 20, timeout=60, message="20 pods addressed")

    def subnet_state() -> ClusterSubnetState | None:
        try:
            return ClusterSubnetState.from_object(
                ipam.client.get(CLUSTER_SUBNET_STATE, "pods", ipam.namespace)
            )
        except errors.NotFound:
            return None

    state = eventually(
        lambda: (s := subnet_state()) is not None and s.status is not None and s.status.exhausted and s
    )
    assert state.status.timestamp
    eventually(
        lambda: ipam.config(node).spec.requested_ip_count == 21,  # type: ignore[union-attr]
        message="exhaustion mode: demand + 1",
    )
    assert ipam.calls.count(kind="call", operation="network.get_subnet") >= 1
    assert ipam.calls.count(kind="call", outcome="subnet_full") >= 1
    ipam.check_invariants()
