"""One writer of a NodeNetworkConfig's spec (issue 34), on a real API server, ARM emulator and
node simulator: nodewright writes the spec only as the node agent (``demandFromPods: true``),
with server-side apply under its own field manager; a CNS-pool-monitor stand-in that writes the
spec meanwhile is noticed (condition ``SpecWriter=False`` naming it, one Event) and followed, never
overwritten; a spec last written by nodewright's own earlier merge patches is taken over quietly;
and by default (CNS writes the spec) nodewright writes status only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodewright.controllers.node_network_config import NODE_NETWORK_CONFIG
from nodewright.controllers.node_network_config.spec_writer import (
    ANOTHER_SPEC_WRITER,
    SPEC_FIELD_MANAGER,
    SPEC_WRITER_CONDITION,
    conflicting_managers,
)
from nodewright.ipam import PoolScaler
from nodewright.runtime import errors
from tests.controllers.node_network_config.harness import IpamHarness, event_reasons, events_about
from tests.waiting import eventually

SCALER = PoolScaler(batch_size=16, request_threshold_percent=50, max_ip_count=250)
CNS_POOL_MONITOR = "azure-cns"  # the field manager of the stand-in, as Azure CNS's client would show


def _pool_monitor_writes(
    ipam: IpamHarness, node: str, requested: int, manager: str = CNS_POOL_MONITOR
) -> None:
    """The node agent's write of the spec, as CNS's pool monitor sends it: a merge patch (an
    Update in managedFields) under its own field manager."""
    body = {"spec": {"requestedIPCount": requested, "ipsNotInUse": []}}
    ipam.client.patch(NODE_NETWORK_CONFIG, node, body, ipam.namespace, field_manager=manager)


def _spec_writer_condition(ipam: IpamHarness, node: str) -> dict[str, Any] | None:
    for condition in (ipam.raw_config(node).get("status") or {}).get("conditions") or []:
        if condition.get("type") == SPEC_WRITER_CONDITION:
            return dict(condition)
    return None


def _spec_managers(ipam: IpamHarness, node: str) -> set[str]:
    """The field managers owning a field under spec (managedFields, read from the API server)."""
    raw = ipam.client.get(NODE_NETWORK_CONFIG, node, ipam.namespace)
    return {
        str(entry.get("manager"))
        for entry in raw["metadata"].get("managedFields") or []
        if "f:spec" in (entry.get("fieldsV1") or {})
    }


def _addressed(ipam: IpamHarness, node: str, count: int) -> Callable[[], bool]:
    return lambda: len(ipam.pod_addresses(node)) >= count


def _started_with_one_node(ipam: IpamHarness) -> str:
    ipam.configure(scaler=SCALER, demand_from_pods=True)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = str(eventually(ipam.node_names, message="a simulated node")[0])
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 16, message="the first batch")
    return node


def test_another_writer_of_the_spec_is_noticed_and_followed_not_overwritten(ipam: IpamHarness) -> None:
    """nodewright writes the spec (demandFromPods) and owns it under its field manager; the CNS
    stand-in then asks for 48: nodewright's next spec write conflicts, so it sets SpecWriter=False
    naming azure-cns, sends one Event, and fills the pool to the 48 asked, while pods come and go
    (passes that would each have rewritten the spec to 16) the spec stays 48."""
    node = _started_with_one_node(ipam)
    assert SPEC_FIELD_MANAGER in _spec_managers(ipam, node)
    _pool_monitor_writes(ipam, node, 48)
    pods = ipam.create_pods(node, 3)  # demand 3: nodewright's own target stays 16
    eventually(
        lambda: (_spec_writer_condition(ipam, node) or {}).get("status") == "False",
        message="SpecWriter=False",
    )
    condition = _spec_writer_condition(ipam, node)
    assert condition is not None
    assert condition["reason"] == ANOTHER_SPEC_WRITER
    assert CNS_POOL_MONITOR in condition["message"]
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 48, timeout=60, message="pool follows 48")
    for wave in range(3):  # each wave runs passes that want the spec back at 16
        pods += ipam.create_pods(node, 2, prefix=f"wave{wave}")
        eventually(_addressed(ipam, node, len(pods)), message=f"wave {wave} addressed")
        ipam.delete_pods(pods[-1:])
        pods = pods[:-1]
        assert ipam.raw_config(node)["spec"]["requestedIPCount"] == 48
    noticed = [event for event in events_about(ipam, node) if event.get("reason") == ANOTHER_SPEC_WRITER]
    assert sum(int(event.get("count") or 1) for event in noticed) == 1
    ipam.check_invariants()


def test_a_spec_from_nodewrights_own_earlier_patches_is_taken_over_quietly(ipam: IpamHarness) -> None:
    """A spec last merge-patched under nodewright's own client manager (the manager of its spec
    writes before they were applies) is not another writer: the apply takes it over, with no
    condition and no Event, and the spec goes back to the target."""
    node = _started_with_one_node(ipam)
    _pool_monitor_writes(ipam, node, 48, manager=ipam.client.field_manager)
    ipam.create_pods(node, 1)
    eventually(lambda: ipam.raw_config(node)["spec"]["requestedIPCount"] == 16, message="back to 16")
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 16, timeout=60, message="pool of 16")
    assert _spec_writer_condition(ipam, node) is None
    assert ANOTHER_SPEC_WRITER not in event_reasons(ipam, node)


def test_by_default_the_node_agent_writes_the_spec_and_nodewright_only_status(ipam: IpamHarness) -> None:
    """Default settings (consumer crd, demandFromPods false): pods on the node change nothing in
    the spec; the CNS stand-in's request is filled; nodewright never applies a spec (its create
    of the object is its only spec write)."""
    ipam.configure(scaler=SCALER, demand_from_pods=False)
    ipam.add_scale_set(capacity=1)
    ipam.start()
    node = str(eventually(ipam.node_names, message="a simulated node")[0])
    eventually(lambda: ipam.config(node) is not None, message="NodeNetworkConfig created")
    _pool_monitor_writes(ipam, node, 32)
    ipam.create_pods(node, 5)
    eventually(lambda: len(ipam.assignments(ipam.config(node))) == 32, timeout=60, message="32 filled")
    assert ipam.raw_config(node)["spec"]["requestedIPCount"] == 32
    assert CNS_POOL_MONITOR in _spec_managers(ipam, node)
    assert SPEC_FIELD_MANAGER not in _spec_managers(ipam, node)  # no spec write after the create


def test_conflicting_managers_are_read_from_the_status_causes() -> None:
    """The API server's 409 for an apply names each manager in a cause; each is reported once."""
    status = {
        "details": {
            "causes": [
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "azure-cns" using acn.azure.com/v1alpha',
                },
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "azure-cns" using acn.azure.com/v1alpha',
                },
                {
                    "reason": "FieldManagerConflict",
                    "message": 'conflict with "kubectl-edit" using acn.azure.com/v1alpha',
                },
            ]
        }
    }
    error = errors.Conflict("Apply failed with 3 conflicts", code=409, reason="Conflict", status=status)
    assert conflicting_managers(error) == ("azure-cns", "kubectl-edit")
    bare = errors.Conflict('Apply failed with 1 conflict: conflict with "azure-cns": .spec.requestedIPCount')
    assert conflicting_managers(bare) == ("azure-cns",)
