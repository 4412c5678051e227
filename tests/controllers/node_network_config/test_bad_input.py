"""Bad input never crash-loops and never releases anything wrongly: a negative or huge
requestedIPCount, unknown or in-use names in ipsNotInUse (with Azure CNS as the node side, so the
spec is what a node wrote), a node without providerID, a NIC missing in Azure. Each gives the
status ``Error`` (or the capped allocation), a ``Ready`` condition naming the reason, and an Event."""

from __future__ import annotations

import time
from typing import Any

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG
from nodewright.devenv.nodesim import SIMULATED_LABEL
from nodewright.ipam import MAX_SECONDARY_IPS_PER_NIC
from nodewright.runtime.kinds import NODE
from nodewright.runtime.retry import retry_on_conflict
from tests.controllers.node_network_config.harness import IpamHarness, event_reasons, wait_until


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


def _cns_node(ipam: IpamHarness) -> str:
    """A started harness in CNS mode (the spec is ours to write) with one node holding 16 IPs."""
    ipam.configure(demand_from_pods=False)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = str(wait_until(ipam.node_names, message="a simulated node")[0])
    wait_until(lambda: ipam.config(node) is not None, message="NodeNetworkConfig created")
    _set_spec(ipam, node, requestedIPCount=16)
    wait_until(lambda: len(ipam.assignments(ipam.config(node))) == 16, message="16 IPs")
    return node


def test_negative_and_huge_requested_counts(ipam: IpamHarness) -> None:
    """-5: status Error, condition InvalidRequestedIPCount, an Event, the NIC untouched.
    10^9: the same condition, and the NIC filled to its 255 secondary IPs, no further."""
    node = _cns_node(ipam)
    before = ipam.secondary(node)
    _set_spec(ipam, node, requestedIPCount=-5)
    wait_until(
        lambda: _condition(ipam.config(node)) == ("False", "InvalidRequestedIPCount"), message="condition set"
    )
    config = ipam.config(node)
    assert config is not None
    assert config.status.status == "Error"
    wait_until(lambda: "InvalidRequestedIPCount" in event_reasons(ipam, node), message="Event recorded")
    time.sleep(1.0)
    assert ipam.secondary(node) == before

    _set_spec(ipam, node, requestedIPCount=10**9)
    wait_until(
        lambda: len(ipam.assignments(ipam.config(node))) == MAX_SECONDARY_IPS_PER_NIC,
        timeout=60,
        message="NIC filled to its capacity",
    )
    assert _condition(ipam.config(node)) == ("False", "InvalidRequestedIPCount")
    assert len(ipam.secondary(node)) == MAX_SECONDARY_IPS_PER_NIC
    ipam.check_invariants()


def test_unknown_and_in_use_names_in_ips_not_in_use(ipam: IpamHarness) -> None:
    """Names the node does not hold: condition UnknownIPsNotInUse and an Event, nothing released.
    A name whose IP a pod uses: kept (Event ReleaseRefused); a free listed one is released."""
    node = _cns_node(ipam)
    _set_spec(ipam, node, ipsNotInUse=["no-such-ip-1", "no-such-ip-2"])
    wait_until(
        lambda: _condition(ipam.config(node)) == ("False", "UnknownIPsNotInUse"), message="condition set"
    )
    wait_until(lambda: "UnknownIPsNotInUse" in event_reasons(ipam, node), message="Event recorded")
    assert len(ipam.secondary(node)) == 16

    [pod] = ipam.create_pods(node, 1)
    address = wait_until(lambda: ipam.pod_addresses(node).get(pod), message="pod addressed")
    assignments = ipam.assignments(ipam.config(node))
    used = next(name for name, ip in assignments if ip == address)
    free = next(name for name, ip in assignments if ip != address)
    _set_spec(ipam, node, requestedIPCount=15, ipsNotInUse=[used, free])
    wait_until(lambda: free not in ipam.secondary(node), message="the free IP released")
    wait_until(lambda: "ReleaseRefused" in event_reasons(ipam, node), message="refusal recorded")
    assert used in ipam.secondary(node)
    assert ipam.pod_addresses(node)[pod] == address
    wait_until(
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
    wait_until(
        lambda: _condition(ipam.config(name)) == ("False", "MissingProviderID"), message="condition set"
    )
    config = ipam.config(name)
    assert config is not None
    assert config.status.status == "Error"
    wait_until(lambda: "MissingProviderID" in event_reasons(ipam, name), message="Event recorded")


def test_network_interface_missing_in_azure(ipam: IpamHarness) -> None:
    """The VM exists but its NIC is gone: Error / NetworkInterfaceNotFound and an Event; the NIC
    is retried with backoff (a handful of reads in 6 s, not a crash loop)."""
    vm = ipam.add_virtual_machine()
    group_scope, vm_name = vm.rsplit("/providers/", 1)[0], vm.rsplit("/", 1)[1]
    nic_id = f"{group_scope}/providers/Microsoft.Network/networkInterfaces/{vm_name}-nic"
    with ipam.emulator.state.locked() as state:
        state.network_interfaces.pop(nic_id.lower())
    ipam.start(agent=False)
    node = wait_until(ipam.node_names, message="the VM's node")[0]
    wait_until(
        lambda: _condition(ipam.config(node)) == ("False", "NetworkInterfaceNotFound"),
        message="condition set",
    )
    wait_until(lambda: "NetworkInterfaceNotFound" in event_reasons(ipam, node), message="Event recorded")
    reads_before = ipam.emulator.requests.count("NetworkInterfaces.get")
    time.sleep(6.0)
    reads = ipam.emulator.requests.count("NetworkInterfaces.get") - reads_before
    assert reads <= 4, f"{reads} NIC reads in 6 s: not backing off"
