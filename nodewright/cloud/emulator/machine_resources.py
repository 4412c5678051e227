"""What goes with a deleted VM: the resources its model marks ``deleteOption: Delete``.

Azure deletes a VM's NICs (``networkProfile.networkInterfaces[].properties.deleteOption``) and
disks (``storageProfile.osDisk.deleteOption``, ``dataDisks[].deleteOption``) with the VM when they
say ``Delete``, and only detaches them when they say ``Detach`` or nothing (the default for a VM
created through the API). The emulator keeps NICs as resources, so a NIC marked ``Delete`` is
removed and its addresses freed; disks are not kept as resources, so nothing is left of them
either way. Called by ``compute.delete_vm`` under the state lock when the delete succeeds.
"""

from __future__ import annotations

from typing import Any

from nodewright.cloud.emulator.network import release_owner_prefix
from nodewright.cloud.emulator.state import EmulatorState, Resource

__all__ = ["release_attached_resources"]


def release_attached_resources(state: EmulatorState, machine: Resource) -> list[str]:
    """Delete the NICs of ``machine`` marked ``deleteOption: Delete`` and detach the others;
    returns the IDs of the NICs deleted. Call under the state lock."""
    deleted: list[str] = []
    references: list[dict[str, Any]] = (machine.properties.get("networkProfile") or {}).get(
        "networkInterfaces"
    ) or []
    for reference in references:
        nic_id = str(reference.get("id", ""))
        nic = state.network_interfaces.get(nic_id.lower())
        if nic is None:
            continue
        if (reference.get("properties") or {}).get("deleteOption") == "Delete":
            state.network_interfaces.pop(nic_id.lower(), None)
            release_owner_prefix(state, f"{nic.identifier}/ipConfigurations/")
            deleted.append(nic.identifier)
        else:
            nic.properties.pop("virtualMachine", None)
            nic.touch()
    return deleted
