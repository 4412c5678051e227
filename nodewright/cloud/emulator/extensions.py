"""VM extensions as the emulator keeps them: child resources listed in a machine's ``resources``
(as a VM or scale-set instance GET shows them), added to a standalone VM by the estate builder and
given to each Uniform scale-set instance from the model's ``extensionProfile`` when it is created.

An extension's provisioning follows its machine's: it is ``Succeeded`` once the machine is, as the
guest agent reports it on Azure. Pure functions over ARM JSON; call under the state lock.
"""

from __future__ import annotations

import copy
from typing import Any

from nodewright.cloud.emulator.state import Resource

__all__ = ["add_extension", "extension_resource", "machine_extensions", "model_extensions"]

_EXTENSION_TYPE = "Microsoft.Compute/virtualMachines/extensions"
_KEPT_PROPERTIES = (
    "publisher",
    "type",
    "typeHandlerVersion",
    "autoUpgradeMinorVersion",
    "enableAutomaticUpgrade",
    "settings",
    "suppressFailures",
)


def extension_resource(
    machine_id: str, location: Any, name: str, properties: dict[str, Any], tags: dict[str, str] | None = None
) -> dict[str, Any]:
    """One extension child resource of ``machine_id`` (protected settings are never kept)."""
    kept = {key: copy.deepcopy(properties[key]) for key in _KEPT_PROPERTIES if key in properties}
    kept.setdefault("settings", {})
    kept["provisioningState"] = "Succeeded"
    document: dict[str, Any] = {
        "name": name,
        "id": f"{machine_id}/extensions/{name}",
        "type": _EXTENSION_TYPE,
        "location": location,
        "properties": kept,
    }
    if tags:
        document["tags"] = dict(tags)
    return document


def model_extensions(machine_id: str, location: Any, model: dict[str, Any]) -> list[dict[str, Any]]:
    """The extension resources an instance gets from a scale-set model's ``extensionProfile``."""
    extensions = (model.get("extensionProfile") or {}).get("extensions") or []
    return [
        extension_resource(machine_id, location, str(item.get("name")), item.get("properties") or {})
        for item in extensions
        if isinstance(item, dict) and item.get("name")
    ]


def add_extension(
    machine: Resource, name: str, properties: dict[str, Any], tags: dict[str, str] | None = None
) -> dict[str, Any]:
    """Add (or replace) an extension on a machine; returns the extension resource."""
    resource = extension_resource(
        machine.identifier, machine.document.get("location"), name, properties, tags
    )
    resources = [item for item in machine.document.get("resources") or [] if item.get("name") != name]
    machine.document["resources"] = [*resources, resource]
    machine.touch()
    return resource


def machine_extensions(machine: Resource) -> list[dict[str, Any]]:
    """The machine's extension resources, their provisioning following the machine's."""
    extensions = copy.deepcopy(machine.document.get("resources") or [])
    for extension in extensions:
        extension.setdefault("properties", {})["provisioningState"] = machine.provisioning_state
    return list(extensions)
