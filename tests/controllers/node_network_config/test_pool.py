"""Acceptance of the pool itself on a real API server, ARM emulator and node simulator: pods land
and the pool grows batch-aligned ahead of them; pods go and only ipsNotInUse are released, never
an IP in use; a NodeNetworkConfig appears for each selected node."""

from __future__ import annotations

import time
from collections.abc import Callable

from nodewright.ipam import PoolScaler, pool_target
from tests.controllers.node_network_config.harness import IpamHarness
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)


def _settled(ipam: IpamHarness, node: str, demand: int) -> bool:
    """Spec asks for the target, nothing is listed for release, status holds exactly that."""
    config = ipam.config(node)
    if config is None:
        return False
    target = pool_target(demand, SCALER)
    return (
        config.spec.requested_ip_count == target
        and not config.spec.ips_not_in_use
        and len(ipam.assignments(config)) == target
    )


def _addressed(ipam: IpamHarness, node: str, count: int) -> Callable[[], bool]:
    return lambda: len(ipam.pod_addresses(node)) == count


def _settled_at(ipam: IpamHarness, node: str, demand: int) -> Callable[[], bool]:
    return lambda: _settled(ipam, node, demand)


def test_pool_follows_pods_up_and_down(ipam: IpamHarness) -> None:
    """30 pods arrive in three waves: after each wave the request is batch-aligned, the IPs are on
    the NIC and in status before the next wave needs them (no pod of a later wave waits for the
    cloud); 25 pods go: only IPs listed in ipsNotInUse are released, none a remaining pod holds."""
    ipam.configure(scaler=SCALER, release_settle_seconds=0.5)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = eventually(ipam.node_names, message="a simulated node")[0]
    eventually(lambda: _settled(ipam, node, 0), message="the empty node's first batch")
    assert ipam.agent is not None
    pods: list[str] = []
    requests_seen: list[int] = []
    for wave in range(3):
        before = len(ipam.assignments(ipam.config(node)))
        assert before >= len(pods) + 10, f"wave {wave}: only {before} IPs ready for {len(pods) + 10} pods"
        pods += ipam.create_pods(node, 10)
        count = len(pods)
        eventually(_addressed(ipam, node, count), message=f"wave {wave} addressed")
        eventually(_settled_at(ipam, node, count), message=f"wave {wave} settled")
        config = ipam.config(node)
        assert config is not None
        requests_seen.append(config.spec.requested_ip_count)
        ipam.check_invariants()
    assert requests_seen == [32, 32, 48]
    assert all(request % SCALER.batch_size == 0 for request in requests_seen)
    assert ipam.agent.starved_passes == 0, "a pod waited for an address"

    on_nic_before = ipam.secondary(node)
    leaving, staying = pods[:25], pods[25:]
    addresses_staying = {
        name: address for name, address in ipam.pod_addresses(node).items() if name in staying
    }
    ipam.delete_pods(leaving)
    eventually(lambda: _settled(ipam, node, 5), message="scale-down settled")
    on_nic_after = ipam.secondary(node)
    released = {on_nic_before[name] for name in set(on_nic_before) - set(on_nic_after)}
    assert len(on_nic_after) == 16
    assert not released & set(addresses_staying.values()), "an IP in use was released"
    assert ipam.pod_addresses(node) == addresses_staying
    ipam.check_invariants()


def _first_batch(ipam: IpamHarness, node: str) -> Callable[[], bool]:
    return lambda: _settled(ipam, node, 0)


def test_each_selected_node_gets_a_node_network_config(ipam: IpamHarness) -> None:
    """Every node the selector picks (scale-set instances and a standalone VM) gets its
    NodeNetworkConfig with a first batch and the scaler in status; a node's network container has
    a stable id and the subnet's facts; once settled, nothing rewrites it."""
    ipam.add_scale_set(capacity=2)
    ipam.add_virtual_machine()  # a standalone VM: its NIC is written directly (etag-guarded PUT)
    ipam.configure(resync_period_seconds=0.5)  # settled passes for the last window to watch
    ipam.start(agent=False)
    nodes = eventually(lambda: len(ipam.node_names()) == 3 and ipam.node_names(), message="three nodes")
    for node in nodes:
        eventually(_first_batch(ipam, node), message=f"{node} first batch")
        config = ipam.config(node)
        assert config is not None
        container = config.status.network_containers[0]
        assert config.status.scaler.batch_size == 16
        assert config.status.assigned_ip_count == 16
        assert container.subnet_address_space == "10.240.0.0/22"
        assert container.default_gateway == "10.240.0.1"
        assert container.subnet_name == "pods"
        assert container.primary_ip
        assert container.node_ip == container.primary_ip
    ids = {ipam.config(node).status.network_containers[0].id for node in nodes}  # type: ignore[union-attr]
    assert len(ids) == 3
    versions = {node: ipam.raw_config(node)["metadata"]["resourceVersion"] for node in nodes}
    with ipam.watched(passes=6):  # two resyncs of each node's settled config
        pass
    assert versions == {node: ipam.raw_config(node)["metadata"]["resourceVersion"] for node in nodes}, (
        "a settled NodeNetworkConfig kept being rewritten"
    )
    ipam.check_invariants()


def test_scale_down_waits_until_the_surplus_has_lasted(ipam: IpamHarness) -> None:
    """scaleDownDelaySeconds 4: 18 of 20 pods leave; for the next 3 s nothing is marked or
    released; the pool shrinks to the target only once the surplus has lasted 4 s."""
    ipam.configure(scaler=SCALER, release_settle_seconds=0.5, scale_down_delay_seconds=4.0)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = eventually(ipam.node_names, message="a simulated node")[0]
    pods = ipam.create_pods(node, 20)
    eventually(_settled_at(ipam, node, 20), timeout=60, message="grown for 20 pods")
    ipam.delete_pods(pods[2:])
    left_at = time.monotonic()
    eventually(lambda: len(ipam.pods()) == 2, message="pods gone")
    while time.monotonic() - left_at < 3.0:
        config = ipam.config(node)
        assert config is not None
        assert config.spec.ips_not_in_use == [], "marked for release before the surplus lasted 4 s"
        assert len(ipam.secondary(node)) == pool_target(20, SCALER)
        time.sleep(0.2)
    eventually(_settled_at(ipam, node, 2), timeout=60, message="shrunk after the delay")
    assert time.monotonic() - left_at >= 4.0
    ipam.check_invariants()
