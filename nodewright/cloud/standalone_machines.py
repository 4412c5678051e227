"""Standalone virtual machines as one group of nodes (a ScalingGroup whose groupID is a resource
group): list the group's VMs, check the subnet new VMs go to, create a VM with its own NIC from a
model, and release a VM together with its NIC and OS disk.

A VM this service creates names its NIC and OS disk with ``deleteOption: Delete``, so one DELETE
of the VM removes all three, as Azure does. A VM created by someone else may not say so: before
deleting it, ``release_machine`` PATCHes the delete options (only when one is missing), so its NIC
and disk never outlive it. Every method does I/O through the SDK clients and may raise a
``CloudError``; calls go through ``calls.GuardedCalls`` like ``ComputeService``'s. Neighbours:
``compute`` (reads a VM into ``InstanceInfo``, deletes it), ``factory`` (builds this service).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute import models as compute_models
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network import models as network_models

from nodewright.cloud.backoff import TargetBackoff
from nodewright.cloud.calls import GuardedCalls
from nodewright.cloud.compute import ComputeService
from nodewright.cloud.errors import NotFoundError
from nodewright.cloud.models import ImageReference, InstanceInfo
from nodewright.cloud.resource_ids import ResourceGroupId, VirtualMachineId, parse_subnet_id
from nodewright.cloud.throttle import CallObserver

__all__ = ["MachineModel", "StandaloneMachineService"]

log = logging.getLogger(__name__)

DELETE = "Delete"


@dataclass(frozen=True)
class MachineModel:
    """What a new standalone VM is built from: size, subnet, image, SSH key, admin user, tags."""

    vm_size: str
    subnet_id: str
    image: ImageReference
    ssh_public_key: str
    admin_username: str = "azureuser"
    tags: dict[str, str] = field(default_factory=dict)


def machine_body(name: str, location: str, nic_id: str, model: MachineModel) -> dict[str, Any]:
    """The PUT body of a new VM (pure): one NIC and the OS disk, both deleted with the VM; SSH
    login with the model's key only."""
    key_path = f"/home/{model.admin_username}/.ssh/authorized_keys"
    linux = {
        "disablePasswordAuthentication": True,
        "ssh": {"publicKeys": [{"path": key_path, "keyData": model.ssh_public_key}]},
    }
    return {
        "location": location,
        "tags": dict(model.tags),
        "properties": {
            "hardwareProfile": {"vmSize": model.vm_size},
            "storageProfile": {
                "imageReference": {k: v for k, v in model.image.to_arm().items() if v is not None},
                "osDisk": {"createOption": "FromImage", "osType": "Linux", "deleteOption": DELETE},
            },
            "osProfile": {
                "computerName": name,
                "adminUsername": model.admin_username,
                "linuxConfiguration": linux,
            },
            "networkProfile": {
                "networkInterfaces": [{"id": nic_id, "properties": {"primary": True, "deleteOption": DELETE}}]
            },
        },
    }


def missing_delete_options(machine: dict[str, Any]) -> dict[str, Any] | None:
    """The PATCH body that makes a VM's NICs and OS disk go with it, or ``None`` when they
    already do (pure; ``machine`` is the VM as ARM renders it)."""
    properties = machine.get("properties") or {}
    nics: list[dict[str, Any]] = (properties.get("networkProfile") or {}).get("networkInterfaces") or []
    os_disk = (properties.get("storageProfile") or {}).get("osDisk") or {}
    nics_go = all((nic.get("properties") or {}).get("deleteOption") == DELETE for nic in nics)
    if nics_go and os_disk.get("deleteOption") == DELETE:
        return None
    references = [
        {"id": nic["id"], "properties": {**(nic.get("properties") or {}), "deleteOption": DELETE}}
        for nic in nics
    ]
    return {
        "properties": {
            "networkProfile": {"networkInterfaces": references},
            "storageProfile": {"osDisk": {"deleteOption": DELETE}},
        }
    }


class StandaloneMachineService:
    """Standalone VMs of a resource group (see the module docstring)."""

    def __init__(
        self,
        compute_client: ComputeManagementClient,
        network_client: NetworkManagementClient,
        compute: ComputeService,
        *,
        observer: CallObserver | None = None,
        backoff: TargetBackoff | None = None,
    ) -> None:
        self._compute_client = compute_client
        self._network = network_client
        self._compute = compute
        self._call = GuardedCalls(observer, backoff)
        self._locations: dict[str, str] = {}
        self._lock = threading.Lock()

    def list_machine_names(self, group: ResourceGroupId) -> list[str]:
        """The names of the resource group's VMs that belong to no scale set (one paged list).
        Raises ``NotFoundError`` when the resource group does not exist."""

        def list_all() -> list[str]:
            return sorted(
                str(machine.name)
                for machine in self._compute_client.virtual_machines.list(group.resource_group)
                if getattr(machine, "virtual_machine_scale_set", None) is None
            )

        return self._call("compute.list_virtual_machines", list_all, group)

    def subnet_location(self, subnet_id: str) -> str:
        """The region of a subnet's virtual network (where new VMs go); checks that the subnet
        exists (``NotFoundError`` otherwise). Cached per subnet once found."""
        key = subnet_id.lower()
        with self._lock:
            if key in self._locations:
                return self._locations[key]
        subnet = parse_subnet_id(subnet_id)
        self._call(
            "network.get_subnet",
            lambda: self._network.subnets.get(
                subnet.resource_group, subnet.virtual_network_name, subnet.name
            ),
            subnet,
        )
        network = self._call(
            "network.get_virtual_network",
            lambda: self._network.virtual_networks.get(subnet.resource_group, subnet.virtual_network_name),
            subnet,
        )
        location = str(network.location)
        with self._lock:
            self._locations[key] = location
        return location

    def create_machine(self, group: ResourceGroupId, name: str, model: MachineModel) -> InstanceInfo:
        """Create VM ``name`` in the resource group from ``model``: its NIC ``<name>-nic`` in the
        model's subnet first, then the VM (each PUT waits for its operation). Both PUTs are
        idempotent, so a retry after a failure between them reuses the NIC."""
        location = self.subnet_location(model.subnet_id)
        machine = group.virtual_machine(name)
        nic_name = f"{name}-nic"
        nic_body = {
            "location": location,
            "tags": dict(model.tags),
            "properties": {
                "ipConfigurations": [
                    {"name": "ipconfig1", "properties": {"primary": True, "subnet": {"id": model.subnet_id}}}
                ]
            },
        }
        nic = self._call(
            "network.create_nic",
            lambda: self._network.network_interfaces.begin_create_or_update(
                group.resource_group, nic_name, network_models.NetworkInterface(nic_body)
            ).result(),
            machine,
            write=True,
        )
        body = machine_body(name, location, str(nic.id), model)
        self._call(
            "compute.create_virtual_machine",
            lambda: self._compute_client.virtual_machines.begin_create_or_update(
                group.resource_group,
                name,
                compute_models.VirtualMachine(body),
            ).result(),
            machine,
            write=True,
        )
        log.info("Created virtual machine: machine=%s image=%s", machine, model.image.format())
        return self._compute.get_instance(machine)

    def release_machine(self, machine: VirtualMachineId) -> None:
        """Delete a VM with its NICs and OS disk (their delete options PATCHed first when missing);
        one already gone counts as deleted."""
        try:
            current = self._call(
                "compute.get_virtual_machine",
                lambda: self._compute_client.virtual_machines.get(machine.resource_group, machine.name),
                machine,
            )
        except NotFoundError:
            return
        patch = missing_delete_options(current.as_dict())
        if patch is not None:
            self._call(
                "compute.set_delete_options",
                lambda: self._compute_client.virtual_machines.begin_update(
                    machine.resource_group,
                    machine.name,
                    compute_models.VirtualMachineUpdate(patch),
                ).result(),
                machine,
                write=True,
            )
        self._compute.delete_instance(machine)
