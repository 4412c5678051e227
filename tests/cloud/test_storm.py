"""No storm under persistent failure (cloud layer): 45 s of each fault kind (a full subnet
included) while pods churn at 20 events/s on 7 nodes. Each faulted target gets at most 6 ARM
writes a minute, nothing logs a traceback, log lines stay within 3x the idle rate, and everything
converges within 60 s of the faults clearing. ``python -m bench.storm`` runs the same for 5
minutes per fault kind."""

from __future__ import annotations

import contextlib
import time

import pytest

from bench.storm import run_storm
from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.errors import CloudError
from nodewright.cloud.resource_ids import VirtualMachineId, parse_machine_id
from tests.cloud.helpers import cloud_for


@pytest.mark.timeout(900)
def test_no_storm_under_each_fault_kind(arm_emulator: ArmEmulator) -> None:
    """Per-target backoff (5 s doubling to 60 s) and the class hold after a 429 keep writes,
    log lines and tracebacks down; the targets recover once the faults clear."""
    cloud = cloud_for(arm_emulator, backoff_initial_seconds=5.0, pacing_max_wait_seconds=1.0)
    try:
        idle, *faulted = run_storm(arm_emulator, cloud, phase_seconds=45.0, idle_seconds=20.0)
    finally:
        cloud.close()
    assert idle.converged_after_seconds is not None
    report = "\n".join(str(phase) for phase in (idle, *faulted))
    *everywhere, subnet_full = faulted
    assert subnet_full.name.startswith("subnet full"), report
    for phase in everywhere:  # every write faulted: every target counts
        assert phase.writes_per_target_per_minute <= 6, report
    # Only the NICs' writes are refused (the identity writes go on as at idle): their targets count.
    assert subnet_full.writes_per_refused_target_per_minute > 0, report
    assert subnet_full.writes_per_refused_target_per_minute <= 6, report
    for phase in faulted:
        assert phase.tracebacks == 0, report
        assert phase.log_lines_per_minute <= 3 * idle.log_lines_per_minute, report
        assert phase.converged_after_seconds is not None, report
        assert phase.converged_after_seconds <= 60, report


@pytest.mark.timeout(300)
def test_writes_resume_within_the_hold_once_throttling_clears(arm_emulator: ArmEmulator) -> None:
    """45 s of the Compute provider throttling every VM write (429 OperationNotAllowed,
    Retry-After 2 s) while three nodes keep asking: once it clears, every node converges within
    the 2 s hold plus three paced writes and their operation polls (about 5 s; 15 s allowed on a
    loaded machine), because
    throttling backs a target off for the class hold only and the first write that goes through
    releases the others. Were throttles counted as failures of each target (0.2 s doubling), the
    targets would by then back off 25 s between tries and converge about 20 s after the clear."""
    group = "rg-throttle"
    estate = arm_emulator.estate
    estate.add_resource_group(group)
    vnet = estate.add_virtual_network(group, "vnet", subnets={"nodes": "10.60.0.0/16"})
    machines = [
        parse_machine_id(
            estate.add_virtual_machine(group, f"node-{index}", subnet_id=f"{vnet}/subnets/nodes")
        )
        for index in range(3)
    ]
    identities = [estate.add_identity(group, f"id-{index}") for index in range(3)]
    cloud = cloud_for(arm_emulator, backoff_initial_seconds=0.2, pacing_max_wait_seconds=1.0)

    def reconcile_all() -> None:
        for machine, identity in zip(machines, identities, strict=True):
            assert isinstance(machine, VirtualMachineId)
            with contextlib.suppress(CloudError):
                cloud.compute.update_identities(machine, add={identity})

    arm_emulator.faults.compute_throttle(
        method="PATCH", path="*/providers/microsoft.compute/*", times=None, policy="PutVM3Min", retry_after=2
    )
    try:
        deadline = time.monotonic() + 45.0
        while time.monotonic() < deadline:
            reconcile_all()
            time.sleep(0.1)
        arm_emulator.faults.clear()
        cleared = time.monotonic()
        converged = False
        while not converged and time.monotonic() - cleared < 60:
            reconcile_all()
            converged = all(
                identity.lower() in _identities_of(arm_emulator, str(machine))
                for machine, identity in zip(machines, identities, strict=True)
            )
            time.sleep(0.1)
        took = time.monotonic() - cleared
    finally:
        cloud.close()
    throttled = [entry for entry in arm_emulator.requests.entries() if entry.status == 429]
    assert converged
    assert took <= 15.0, f"converged {took:.1f} s after the throttling cleared"
    assert len(throttled) >= 3, throttled  # the throttling was met, again and again


def _identities_of(emulator: ArmEmulator, machine: str) -> set[str]:
    document = emulator.state.render(machine) or {}
    return {key.lower() for key in ((document.get("identity") or {}).get("userAssignedIdentities") or {})}
