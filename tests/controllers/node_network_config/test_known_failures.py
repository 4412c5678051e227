"""Two failures Azure CNS users hit, reproduced against the real stack and shown not to happen:
a scale-up right after a scale-down wiping ipsNotInUse (azure-container-networking #962), and a
stale ipsNotInUse never cleared when the target did not change (#4891)."""

from __future__ import annotations

import time

from nodewright.ipam import PoolScaler
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
