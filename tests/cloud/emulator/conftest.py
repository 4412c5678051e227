"""Fixtures for the emulator contract tests: a small seeded estate and SDK clients against it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.cloud.emulator.sdk_clients import Clients, sdk_clients

GROUP = "rg-nodes"


@dataclass(frozen=True)
class Estate:
    """IDs of what :func:`estate` seeded."""

    group: str
    subnet_id: str
    small_subnet_id: str
    vnet_name: str
    identity_ids: list[str]
    vm_id: str
    scale_set_id: str
    flexible_scale_set_id: str


@pytest.fixture
def estate(arm_emulator: ArmEmulator) -> Estate:
    """rg-nodes with vnet (nodes /24, small /29), three identities, VM vm-0 (identity 0),
    Uniform scale set vmss-a (2 instances, identity 0) and Flexible scale set vmss-flex (1)."""
    builder = arm_emulator.estate
    builder.add_resource_group(GROUP)
    vnet = builder.add_virtual_network(
        GROUP, "vnet", subnets={"nodes": "10.240.0.0/24", "small": "10.241.0.0/29"}
    )
    identity_ids = [builder.add_identity(GROUP, f"id-{index}") for index in range(3)]
    subnet_id = f"{vnet}/subnets/nodes"
    return Estate(
        group=GROUP,
        subnet_id=subnet_id,
        small_subnet_id=f"{vnet}/subnets/small",
        vnet_name="vnet",
        identity_ids=identity_ids,
        vm_id=builder.add_virtual_machine(GROUP, "vm-0", subnet_id=subnet_id, identity_ids=identity_ids[:1]),
        scale_set_id=builder.add_scale_set(
            GROUP,
            "vmss-a",
            subnet_id=subnet_id,
            capacity=2,
            identity_ids=identity_ids[:1],
            computer_name_prefix="aks-a-vmss",
        ),
        flexible_scale_set_id=builder.add_scale_set(
            GROUP, "vmss-flex", subnet_id=subnet_id, capacity=1, orchestration_mode="Flexible"
        ),
    )


@pytest.fixture
def clients(arm_emulator: ArmEmulator) -> Clients:
    """Compute, Network and MSI clients against the emulator (fast retries, zero polling interval)."""
    return sdk_clients(arm_emulator)
