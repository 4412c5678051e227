"""Terminal ARM answers are conditions, not retries (issue 33, part 5): a NIC whose writes ARM
refuses with SubnetIsFull is tried again on a backoff that grows from seconds to minutes (the
cloud layer's, shortened to a 30 s cap here), its NodeNetworkConfig says why in its Ready
condition with one Warning Event, and the pool fills once the subnet has room."""

from __future__ import annotations

import time

from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.ipam import PoolScaler
from tests.cloud.helpers import cloud_for
from tests.controllers.node_network_config.harness import IpamHarness, events_about
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
WINDOW_SECONDS = 60.0


def ready(config: NodeNetworkConfig | None) -> tuple[str, str, str]:
    """The Ready condition's (status, reason, message); empty strings when there is none."""
    found = next((c for c in (config.status.conditions if config else []) if c.type == "Ready"), None)
    return (found.status, found.reason, found.message) if found is not None else ("", "", "")


def test_a_full_subnet_is_a_condition_not_a_retry_storm(ipam: IpamHarness) -> None:
    """Another tenant holds every free address of the /26 when the node comes: over the first
    60 s its NIC gets at most 6 write attempts (2 s doubling; the work queue's 5 ms limiter used to
    send 8 in 3.5 s), the NodeNetworkConfig's Ready condition names SubnetIsFull and ARM's message,
    and exactly one Warning Event says so. Once the addresses are freed the pool fills to a batch
    and the condition clears."""
    ipam.cloud.close()
    ipam.cloud = cloud_for(ipam.emulator, observer=ipam.calls, terminal_backoff_max_seconds=30.0)
    ipam.subnet_prefix = "10.242.0.0/26"
    ipam.configure(scaler=SCALER, subnet_check_interval_seconds=2.0)
    ipam.add_scale_set(capacity=1)
    subnet = ipam.emulator.state.find_subnet(ipam.subnet_id)
    assert subnet is not None
    with ipam.emulator.state.locked():
        others = [f"other-tenant-{index}" for index in range(subnet.pool.limit - subnet.pool.used)]
        for owner in others:
            subnet.pool.allocate(owner)

    ipam.start()
    node = eventually(ipam.node_names, message="a node")[0]
    refused = eventually(
        lambda: [e for e in ipam.emulator.requests.entries() if e.method != "GET" and e.status == 400],
        message="a NIC write refused",
    )
    first = refused[0].monotonic
    while time.monotonic() < first + WINDOW_SECONDS:
        time.sleep(1.0)  # the clock: writes are counted over a fixed window
    writes = [
        e
        for e in ipam.emulator.requests.entries()
        if e.method != "GET" and first <= e.monotonic < first + WINDOW_SECONDS
    ]
    assert 2 <= len(writes) <= 6, [(round(e.monotonic - first, 1), e.status) for e in writes]
    assert {e.status for e in writes} == {400}
    status, reason, message = ready(ipam.config(node))
    assert (status, reason) == ("False", "SubnetIsFull"), message
    assert "SubnetIsFull" in message
    assert "retried with backoff" in message
    warnings = [e for e in events_about(ipam, node) if e.get("reason") == "SubnetIsFull"]
    assert sum(int(e.get("count") or 1) for e in warnings) == 1, warnings

    with ipam.emulator.state.locked():
        for owner in others:
            subnet.pool.release(owner)
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 16, timeout=60, message="pool filled")
    eventually(lambda: ready(ipam.config(node))[1] != "SubnetIsFull", message="condition cleared")
    ipam.check_invariants()
