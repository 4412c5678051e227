"""The heir-network gate's rule, table-style (pure): which of the donor's pods move, what the
heir's pool must hold for them (the same rule IPAM sizes it by, ``ipam.incoming``), and the two
waits that could never end by themselves (a heir that cannot hold them all; a full subnet)."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.api.acn.v1alpha import NETWORK_CONTAINER_STATUS_SUBNET_FULL
from nodewright.controllers.node_image.heir_network import (
    HeirPoolVerdict,
    heir_pool_verdict,
    incoming_pods,
    pool_size,
)
from nodewright.ipam import PoolScaler, demand_with_incoming, pool_target

DONOR: dict[str, Any] = {"status": {}}


def _config(
    pool: int, *, batch: int = 16, threshold: int = 50, maximum: int = 250, status: str = ""
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "ipAssignments": [{"name": str(i), "ip": f"10.0.{i // 250}.{i % 250 + 1}"} for i in range(pool)]
    }
    if status:
        container["status"] = status
    scaler = {"batchSize": batch, "requestThresholdPercent": threshold, "maxIPCount": maximum}
    return {"status": {"scaler": scaler, "networkContainers": [container]}}


def _pod(**changes: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Running"}}
    for key, value in changes.items():
        section, _, field = key.partition("__")
        pod[section][field] = value
    return pod


@pytest.mark.parametrize(
    ("pod", "moves"),
    [
        pytest.param(_pod(), True, id="running-pod"),
        pytest.param(_pod(status__phase="Pending"), True, id="pending-pod"),
        pytest.param(_pod(spec__hostNetwork=True), False, id="host-network"),
        pytest.param(_pod(status__phase="Succeeded"), False, id="finished"),
        pytest.param(_pod(metadata__deletionTimestamp="2026-12-01T00:00:00Z"), False, id="terminating"),
        pytest.param(
            _pod(metadata__ownerReferences=[{"kind": "DaemonSet", "controller": True}]), False, id="daemonset"
        ),
        pytest.param(
            _pod(metadata__annotations={"kubernetes.io/config.mirror": "x"}), False, id="mirror-pod"
        ),
    ],
)
def test_which_pods_move(pod: dict[str, Any], moves: bool) -> None:
    """Only pods a drain sends elsewhere and that will need an IP there are announced and needed."""
    assert incoming_pods([pod]) == (1 if moves else 0)


@pytest.mark.parametrize(
    ("donor", "heir", "incoming", "resident", "expected"),
    [
        pytest.param(None, None, 10, 0, HeirPoolVerdict(), id="donor-not-on-pod-subnet"),
        pytest.param(
            DONOR,
            None,
            10,
            0,
            HeirPoolVerdict(waits="no NodeNetworkConfig for the heir yet (10 pods to move)"),
            id="heir-without-pool",
        ),
        pytest.param(
            DONOR,
            _config(16),
            10,
            0,
            HeirPoolVerdict(waits="the heir's pool has 16 free IPs, 18 needed (10 pods plus the buffer)"),
            id="issue-32-pool-sized-from-the-heirs-own-pods",
        ),
        pytest.param(DONOR, _config(18), 10, 0, HeirPoolVerdict(), id="pods-plus-buffer"),
        pytest.param(DONOR, _config(32), 10, 0, HeirPoolVerdict(), id="pool-sized-for-incoming-pods"),
        pytest.param(
            DONOR,
            _config(20),
            10,
            3,
            HeirPoolVerdict(waits="the heir's pool has 17 free IPs, 18 needed (10 pods plus the buffer)"),
            id="resident-pods-hold-addresses",
        ),
        pytest.param(
            DONOR,
            _config(16, status=NETWORK_CONTAINER_STATUS_SUBNET_FULL),
            10,
            0,
            HeirPoolVerdict(
                waits="the heir's pool has 16 free IPs, 18 needed (10 pods plus the buffer); "
                "the heir's subnet is full",
                stuck=True,
            ),
            id="subnet-full-is-stuck",
        ),
        pytest.param(
            DONOR,
            _config(30, maximum=30),
            28,
            5,
            HeirPoolVerdict(
                short="the heir holds at most 30 IPs: 5 used on it, 28 pods to move; "
                "the rest must find room elsewhere"
            ),
            id="cannot-hold-them-all-goes-once-full",
        ),
        pytest.param(
            DONOR,
            _config(29, maximum=30),
            28,
            5,
            HeirPoolVerdict(
                waits="the heir's pool has 24 free IPs, 25 needed (28 pods plus the buffer), "
                "capped at its maximum of 30",
                short="the heir holds at most 30 IPs: 5 used on it, 28 pods to move; "
                "the rest must find room elsewhere",
            ),
            id="cannot-hold-them-all-waits-for-a-full-pool",
        ),
    ],
)
def test_heir_pool_verdict(
    donor: Any, heir: Any, incoming: int, resident: int, expected: HeirPoolVerdict
) -> None:
    """The heir's pool must hold its own pods, the incoming ones and the spare (capped at its
    maximum); why it waits is said, and whether a human is needed."""
    assert heir_pool_verdict(donor, heir, incoming=incoming, resident=resident) == expected


@pytest.mark.parametrize("incoming", [0, 1, 8, 9, 10, 20, 64, 100, 200, 245, 250, 255])
@pytest.mark.parametrize(
    "scaler", [PoolScaler(16, 50, 250), PoolScaler(4, 50, 250), PoolScaler(10, 100, 120)], ids=str
)
def test_a_pool_sized_by_ipam_passes_the_gate(incoming: int, scaler: PoolScaler) -> None:
    """Whatever the donor's pod count up to the NIC's limit, the pool IPAM sizes for the heir's
    pods plus the announced ones passes the gate (no deadlock)."""
    resident = 2
    target = pool_target(demand_with_incoming(resident, incoming), scaler)
    heir = _config(
        target,
        batch=scaler.batch_size,
        threshold=scaler.request_threshold_percent,
        maximum=scaler.max_ip_count,
    )
    assert heir_pool_verdict(DONOR, heir, incoming=incoming, resident=resident).waits is None


def test_a_prefix_block_counts_its_addresses() -> None:
    """In /28 prefix mode an ipAssignment is a block of 16 addresses."""
    config = {"status": {"networkContainers": [{"ipAssignments": [{"name": "a", "ip": "10.0.0.16/28"}]}]}}
    assert pool_size(config) == 16
