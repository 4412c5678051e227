"""Two failures Azure CNS users hit, reproduced against the real stack and shown not to happen:
a scale-up right after a scale-down wiping ipsNotInUse (azure-container-networking #962), also
through a pass that runs on the cache's copy from before its own marks (the controller's client
and cache view read its own writes), and a stale ipsNotInUse
never cleared when the target did not change (#4891)."""

from __future__ import annotations

import time
from typing import Any

from nodewright.controllers.node_network_config import NodeNetworkConfigReconciler
from nodewright.controllers.node_network_config.reconciler import POD_NODE_INDEX, NodeNetworkConfigStores
from nodewright.controllers.node_network_config.resources import NODE_NETWORK_CONFIG, pod_addresses
from nodewright.ipam import PoolScaler
from nodewright.runtime.control.reconcile import Request
from nodewright.runtime.informers.cache import field_indexer
from nodewright.runtime.informers.cache_view import StoreView
from nodewright.runtime.informers.informer import Store, object_key
from nodewright.runtime.informers.recent_writes import OwnWrites
from nodewright.runtime.kube.events import EventRecorder
from nodewright.runtime.kube.kinds import NODE, POD
from tests.controllers.node_network_config.harness import IpamHarness
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)


def _spec(ipam: IpamHarness, node: str) -> tuple[int, list[str], set[str]]:
    config = ipam.config(node)
    assert config is not None
    return (
        config.spec.requested_ip_count,
        list(config.spec.ips_not_in_use),
        {n for n, _ in ipam.assignments(config)},
    )


def _start_with_pods(ipam: IpamHarness, count: int) -> tuple[str, list[str]]:
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = eventually(ipam.node_names, message="a simulated node")[0]
    pods = ipam.create_pods(node, count)
    eventually(lambda: len(ipam.pod_addresses(node)) == count, message="pods addressed")
    eventually(lambda: _spec(ipam, node)[0] == 32 and len(_spec(ipam, node)[2]) == 32, message="32 IPs")
    return node, pods


def test_scale_up_right_after_scale_down_keeps_ips_not_in_use(ipam: IpamHarness) -> None:
    """#962: 20 pods (32 IPs); 15 leave, 16 IPs are marked; 15 come back while the marked IPs are
    still being released. At every sample a marked IP still in status stays listed in ipsNotInUse
    (never wiped) unless a pod holds its address (then taking it back is right); the node ends
    with 32 usable IPs, all pods addressed, the marked IPs released, nothing stranded."""
    ipam.configure(scaler=SCALER, release_settle_seconds=3.0)
    node, pods = _start_with_pods(ipam, 20)
    ipam.delete_pods(pods[:15])
    marked = eventually(lambda: _spec(ipam, node)[1], message="IPs marked for release")
    assert len(marked) == 16
    time.sleep(1.0)  # the node agent has seen the marks; the release is still 2 s away
    pods = pods[15:] + ipam.create_pods(node, 15)
    deadline = time.monotonic() + 30
    samples = 0
    while time.monotonic() < deadline:
        config = ipam.config(node)
        assert config is not None
        requested, listed = config.spec.requested_ip_count, set(config.spec.ips_not_in_use)
        address_of = dict(ipam.assignments(config))
        given = set(ipam.pod_addresses(node).values())
        samples += 1
        for name in set(marked) & set(address_of) - listed:
            assert address_of[name] in given, (
                f"marked IP {name} dropped from ipsNotInUse, unused and unreleased"
            )
        if requested == 32 and not listed and len(address_of) == 32 and len(ipam.pod_addresses(node)) == 20:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"did not settle: {_spec(ipam, node)[:2]}")
    assert samples > 5
    held = set(ipam.pod_addresses(node).values())
    for name, address in ipam.secondary(node).items():
        assert name not in marked or address in held, f"marked IP {name} neither released nor in use"
    ipam.check_invariants()


def _held_stores(
    node: dict[str, Any], config: dict[str, Any], pods: list[dict[str, Any]], own: OwnWrites
) -> tuple[NodeNetworkConfigStores, Store]:
    """Stores holding exactly these versions, as informers' caches that have seen nothing later
    would, read as the controller reads its cache (its own writes laid over); and the pod store."""
    nodes, configs, pod_store = Store(), Store(), Store()
    pod_store.ensure_indexer(POD_NODE_INDEX, field_indexer("spec.nodeName"))
    nodes.put(object_key(node), node)
    configs.put(object_key(config), config)
    for pod in pods:
        pod_store.put(object_key(pod), pod)
    stores = NodeNetworkConfigStores(
        nodes=StoreView(nodes, NODE, own),
        node_network_configs=StoreView(configs, NODE_NETWORK_CONFIG, own),
        pods=StoreView(pod_store, POD, own),
    )
    return stores, pod_store


def test_a_pass_on_the_cached_copy_from_before_its_marks_keeps_them(ipam: IpamHarness) -> None:
    """#962 through a lagging cache: 15 of 20 pods go; a pass whose pod cache still shows one of
    them marks 16 IPs; the next pass runs before the NodeNetworkConfig watch has brought that
    write (its cached copy lists nothing), with that pod gone from its pod cache. It must keep
    the 16 marks, not mark afresh: a fresh choice would mark the gone pod's newer IP instead of
    one already marked, and so take a marked, unused IP back out of ipsNotInUse. Our reconciler
    is driven pass by pass with its caches held at those versions; API server and NIC are real."""
    ipam.configure(scaler=SCALER, release_settle_seconds=600.0)  # nothing released meanwhile
    node, pods = _start_with_pods(ipam, 20)
    ipam.stop_manager()
    stale = ipam.raw_config(node)
    assert not stale["spec"].get("ipsNotInUse")
    name_of = {address: name for name, address in ipam.assignments(ipam.config(node))}
    order = list(name_of.values())
    by_name = {pod["metadata"]["name"]: pod for pod in ipam.pods()}
    leaving, staying = pods[:15], pods[15:]
    # The leaving pod with the newest IP: at most the 12 IPs no pod held are newer.
    last = max(leaving, key=lambda pod: order.index(name_of[pod_addresses(by_name[pod])[0]]))
    ipam.delete_pods(leaving)
    node_object = ipam.client.get(NODE, node)
    own = OwnWrites()
    stores, pod_store = _held_stores(node_object, stale, [by_name[pod] for pod in (*staying, last)], own)
    events = EventRecorder(ipam.client, "nodewright-test")
    reconciler = NodeNetworkConfigReconciler(
        client=ipam.client.with_own_writes(own),
        stores=stores,
        network=ipam.cloud.network,
        compute=ipam.cloud.compute,
        events=events,
        settings=ipam.settings,
    )
    try:
        reconciler.reconcile(Request(ipam.namespace, node))
        marked = set(_spec(ipam, node)[1])
        assert len(marked) == 16
        assert name_of[pod_addresses(by_name[last])[0]] not in marked
        pod_store.remove(object_key(by_name[last]))
        reconciler.reconcile(Request(ipam.namespace, node))
    finally:
        events.stop()
    requested, listed, in_status = _spec(ipam, node)
    assert sorted(marked - set(listed)) == [], "marked IPs taken back out of ipsNotInUse, unused"
    assert (requested, set(listed), len(in_status)) == (16, marked, 32)


def test_stale_ips_not_in_use_are_cleared_when_the_target_is_unchanged(ipam: IpamHarness) -> None:
    """#4891: after a scale-down the request is 16 with 16 names listed; once the control plane
    has released them the names are cleared, although the request (the target) stays 16."""
    ipam.configure(scaler=SCALER, release_settle_seconds=1.0)
    node, pods = _start_with_pods(ipam, 20)
    ipam.delete_pods(pods[:15])
    requested, listed, _ = eventually(
        lambda: (spec := _spec(ipam, node))[1] and spec, message="IPs marked for release"
    )
    assert requested == 16
    assert len(listed) == 16
    eventually(lambda: _spec(ipam, node)[1] == [], message="ipsNotInUse cleared")
    requested_after, _, in_status = _spec(ipam, node)
    assert requested_after == 16
    assert len(in_status) == 16
    assert not set(listed) & in_status
    ipam.check_invariants()
