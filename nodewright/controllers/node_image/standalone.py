"""Groups of standalone VMs (a ScalingGroup whose groupID is a resource group): the cloud
operations they need, the model new VMs are built from, and one new VM per scale-out.

A scale set grows by a capacity step on its model; a group of standalone VMs has no model at the
cloud, so a heir is created here: the VM's name is recorded on the ScalingGroup first
(``CREATING_ANNOTATION``), then its NIC and the VM are PUT (both idempotent), then a Join
PendingNode tracks it and the record goes. A restart that finds the record adopts the VM if it
exists, and otherwise leaves the record so the next scale-out reuses the name (and a NIC already
created), so nothing leaks. Side effects: ARM writes through ``StandaloneCloud``, Kubernetes writes
through the caller's helpers. Neighbours: ``rollout_writes`` (scale-out and adoption call in),
``scaling_group`` (reports the group's image), ``pending_node`` (releases a leaving VM).
"""

from __future__ import annotations

import secrets
from typing import Protocol

from nodewright.api.nodewright.v1alpha1 import ScalingGroup
from nodewright.cloud.models import ImageReference, InstanceInfo
from nodewright.cloud.resource_ids import ResourceGroupId, VirtualMachineId
from nodewright.cloud.standalone_machines import MachineModel

__all__ = ["CREATING_ANNOTATION", "StandaloneCloud", "machine_model", "new_machine_name"]

CREATING_ANNOTATION = "nodewright.io/creating-machine"
"""On a ScalingGroup of standalone VMs while a VM is being created: its name."""


class StandaloneCloud(Protocol):
    """The cloud operations a group of standalone VMs needs (``StandaloneMachineService``)."""

    def list_machine_names(self, group: ResourceGroupId) -> list[str]: ...

    def subnet_location(self, subnet_id: str) -> str: ...

    def create_machine(self, group: ResourceGroupId, name: str, model: MachineModel) -> InstanceInfo: ...

    def release_machine(self, machine: VirtualMachineId) -> None: ...


def machine_model(scaling_group: ScalingGroup, image: ImageReference) -> MachineModel:
    """The model new VMs of a standalone group are built from, with ``image`` (pure)."""
    machines = scaling_group.spec.virtual_machines
    assert machines is not None, "only for a group of standalone VMs"
    return MachineModel(
        vm_size=machines.vm_size,
        subnet_id=machines.subnet_id,
        image=image,
        admin_username=machines.admin_username,
        ssh_public_key=machines.ssh_public_key,
        tags=dict(machines.tags),
    )


def new_machine_name(scaling_group: ScalingGroup) -> str:
    """A fresh VM name for the group: its prefix and six random hex digits."""
    machines = scaling_group.spec.virtual_machines
    assert machines is not None, "only for a group of standalone VMs"
    return machines.name_prefix + secrets.token_hex(3)
