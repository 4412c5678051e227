"""Bad input never crash-loops and never releases anything wrongly: a requestedIPCount out of
the CRD's range (rejected by the API server) or above the node's maximum, a namespace where no
NodeNetworkConfig can be created, unknown or in-use names in ipsNotInUse (with Azure CNS as the
node side, so the spec is what a node wrote), a node without providerID, a NIC missing in Azure.
Each gives the status ``Error`` (or the capped allocation), a ``Ready`` condition naming the
reason, and an Event (on the Node when there is no NodeNetworkConfig to hold a condition)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG
from nodewright.controllers.node_network_config.status import StatusWriter
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.ipam import MAX_SECONDARY_IPS_PER_NIC, PoolScaler
from nodewright.runtime import errors
from nodewright.runtime.kube.events import EventRecorder
from nodewright.runtime.kube.kinds import EVENT, NODE
from nodewright.runtime.kube.retry import retry_on_conflict
from tests.controllers.node_network_config.harness import IpamHarness, event_reasons
from tests.waiting import eventually


def _set_spec(ipam: IpamHarness, node: str, **spec: Any) -> None:
    def attempt() -> None:
        raw = ipam.raw_config(node)
        raw["spec"] = {**raw.get("spec", {}), **spec}
        ipam.client.update(NODE_NETWORK_CONFIG, raw)

    retry_on_conflict(attempt)


def _condition(config: NodeNetworkConfig | None) -> tuple[str, str] | None:
    if config is None:
        return None
    for condition in config.status.conditions:
        if condition.type == "Ready":
            return condition.status, condition.reason
    return None


def _cns_node(ipam: IpamHarness, initial: int = 16) -> str:
    """A started harness in CNS mode (the spec is ours to write) with one node holding ``initial`` IPs."""
    ipam.configure(demand_from_pods=False)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = str(eventually(ipam.node_names, message="a simulated node")[0])
    eventually(lambda: ipam.config(node) is not None, message="NodeNetworkConfig created")
    _set_spec(ipam, node, requestedIPCount=initial)
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == initial, message=f"{initial} IPs")
    return node


def test_requested_counts_out_of_range_are_rejected_by_the_crd(ipam: IpamHarness) -> None:
    """-1 and 256 (a NIC holds 256 IP configurations, one the primary) never reach the
    reconciler: the API server rejects them (422 Invalid) and the stored spec stays as it was;
    0 and 255 are accepted (checked with a server-side dry run, so the node is left alone)."""
    node = _cns_node(ipam)
    for bad in (-1, -5, 256, 10**9):
        with pytest.raises(errors.Invalid):
            _set_spec(ipam, node, requestedIPCount=bad)
    assert ipam.raw_config(node)["spec"]["requestedIPCount"] == 16
    for good in (0, MAX_SECONDARY_IPS_PER_NIC):
        body = {"metadata": {"name": f"probe-{good}"}, "spec": {"requestedIPCount": good}}
        created = ipam.client.create(NODE_NETWORK_CONFIG, body, ipam.namespace, dry_run=True)
        assert created["spec"]["requestedIPCount"] == good
    assert len(ipam.secondary(node)) == 16
    ipam.check_invariants()


def test_requested_count_above_the_nodes_maximum(ipam: IpamHarness) -> None:
    """maxIPCount 20: a request of 40 gets status Error, condition RequestedIPCountAboveMaximum
    and an Event; the NIC is filled to 20 and no further."""
    ipam.configure(
        scaler=PoolScaler(batch_size=4, request_threshold_percent=50, max_ip_count=20),
        resync_period_seconds=0.5,  # passes for the last window to watch
    )
    node = _cns_node(ipam, initial=8)
    _set_spec(ipam, node, requestedIPCount=40)
    eventually(
        lambda: _condition(ipam.config(node)) == ("False", "RequestedIPCountAboveMaximum"),
        message="condition set",
    )
    eventually(lambda: "RequestedIPCountAboveMaximum" in event_reasons(ipam, node), message="Event recorded")
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 20, timeout=60, message="filled to 20")
    with ipam.watched(passes=3):  # passes that see the request above the maximum
        pass
    assert len(ipam.secondary(node)) == 20
    config = ipam.config(node)
    assert config is not None
    assert config.status.status == "Error"
    ipam.check_invariants()


def test_a_node_network_config_that_cannot_be_created_is_reported_on_the_node(ipam: IpamHarness) -> None:
    """The configured namespace does not exist: no crash loop, a Warning Event on the Node
    (reason NodeNetworkConfigRefused) names the problem."""
    ipam.configure(namespace=f"missing-{ipam.owner}")
    ipam.add_scale_set(capacity=1)
    ipam.start(agent=False)
    node = str(eventually(ipam.node_names, message="a simulated node")[0])

    def refused() -> bool:
        items = ipam.client.list(EVENT, "default").items
        return any(
            (e.get("involvedObject") or {}).get("name") == node
            and e.get("reason") == "NodeNetworkConfigRefused"
            for e in items
        )

    eventually(refused, timeout=30, message="Event on the Node")


def test_unknown_and_in_use_names_in_ips_not_in_use(ipam: IpamHarness) -> None:
    """Names the node does not hold: condition UnknownIPsNotInUse and an Event, nothing released.
    A name whose IP a pod uses: kept (Event ReleaseRefused); a free listed one is released."""
    node = _cns_node(ipam)
    _set_spec(ipam, node, ipsNotInUse=["no-such-ip-1", "no-such-ip-2"])
    eventually(
        lambda: _condition(ipam.config(node)) == ("False", "UnknownIPsNotInUse"), message="condition set"
    )
    eventually(lambda: "UnknownIPsNotInUse" in event_reasons(ipam, node), message="Event recorded")
    assert len(ipam.secondary(node)) == 16

    [pod] = ipam.create_pods(node, 1)
    address = eventually(lambda: ipam.pod_addresses(node).get(pod), message="pod addressed")
    assignments = ipam.assignments(ipam.config(node))
    used = next(name for name, ip in assignments if ip == address)
    free = next(name for name, ip in assignments if ip != address)
    _set_spec(ipam, node, requestedIPCount=15, ipsNotInUse=[used, free])
    eventually(lambda: free not in ipam.secondary(node), message="the free IP released")
    eventually(lambda: "ReleaseRefused" in event_reasons(ipam, node), message="refusal recorded")
    assert used in ipam.secondary(node)
    assert ipam.pod_addresses(node)[pod] == address
    eventually(
        lambda: free not in {n for n, _ in ipam.assignments(ipam.config(node))}, message="status caught up"
    )
    ipam.check_invariants()


def test_node_without_provider_id(ipam: IpamHarness) -> None:
    """A selected Node without providerID: its NodeNetworkConfig says Error / MissingProviderID,
    with an Event; the reconciler does not retry in a tight loop."""
    ipam.start(agent=False)
    ipam.stop_simulator()  # it would delete a labelled Node that has no machine behind it
    name = f"bare-{ipam.owner}"
    ipam.client.create(
        NODE, {"metadata": {"name": name, "labels": {SIMULATED_LABEL: ipam.owner}}, "spec": {}}
    )
    eventually(
        lambda: _condition(ipam.config(name)) == ("False", "MissingProviderID"), message="condition set"
    )
    config = ipam.config(name)
    assert config is not None
    assert config.status.status == "Error"
    eventually(lambda: "MissingProviderID" in event_reasons(ipam, name), message="Event recorded")


def test_network_interface_missing_in_azure(ipam: IpamHarness) -> None:
    """The VM exists but its NIC is gone: Error / NetworkInterfaceNotFound and an Event; the NIC
    is retried with backoff (a handful of reads in 6 s, not a crash loop)."""
    vm = ipam.add_virtual_machine()
    group_scope, vm_name = vm.rsplit("/providers/", 1)[0], vm.rsplit("/", 1)[1]
    nic_id = f"{group_scope}/providers/Microsoft.Network/networkInterfaces/{vm_name}-nic"
    with ipam.emulator.state.locked() as state:
        state.network_interfaces.pop(nic_id.lower())
    ipam.start(agent=False)
    node = eventually(ipam.node_names, message="the VM's node")[0]
    eventually(
        lambda: _condition(ipam.config(node)) == ("False", "NetworkInterfaceNotFound"),
        message="condition set",
    )
    eventually(lambda: "NetworkInterfaceNotFound" in event_reasons(ipam, node), message="Event recorded")
    reads_before = ipam.emulator.requests.count("NetworkInterfaces.get")
    time.sleep(6.0)  # a rate over a fixed span of the clock: the backoff between NIC reads
    reads = ipam.emulator.requests.count("NetworkInterfaces.get") - reads_before
    assert reads <= 4, f"{reads} NIC reads in 6 s: not backing off"


def test_a_problem_reported_from_a_stale_cache_keeps_the_stored_addresses(ipam: IpamHarness) -> None:
    """A problem (here a NIC read that failed) is reported from the cached object, which may
    predate our last status write. The report sets Error and the condition only: addresses that
    write dropped (released from the NIC) are not handed back to the node agent."""
    name = f"stale-{ipam.owner}"
    addresses = [(f"ip-{i}", f"10.9.0.{i + 4}") for i in range(4)]

    def status(held: list[tuple[str, str]]) -> dict[str, Any]:
        assignments = [{"name": n, "ip": a} for n, a in held]
        return {"networkContainers": [{"id": "nc", "ipAssignments": assignments}], "status": "Updated"}

    ipam.client.create(NODE_NETWORK_CONFIG, {"metadata": {"name": name}, "spec": {}}, ipam.namespace)
    ipam.client.patch(
        NODE_NETWORK_CONFIG, name, {"status": status(addresses)}, ipam.namespace, subresource="status"
    )
    stale = ipam.raw_config(name)  # what a cache still shows
    ipam.client.patch(
        NODE_NETWORK_CONFIG, name, {"status": status(addresses[:2])}, ipam.namespace, subresource="status"
    )

    def patch(node: str, body: dict[str, Any], subresource: str | None) -> dict[str, Any]:
        return ipam.client.patch(NODE_NETWORK_CONFIG, node, body, ipam.namespace, subresource=subresource)

    writer = StatusWriter(patch=patch, events=EventRecorder(ipam.client, "test"), scaler=PoolScaler())
    writer.report_problem(stale, NodeNetworkConfig.from_object(stale), "CloudError", "Reading NIC nic failed")
    stored = ipam.config(name)
    assert stored is not None
    assert ipam.assignments(stored) == addresses[:2]
    assert (stored.status.status, _condition(stored)) == ("Error", ("False", "CloudError"))
