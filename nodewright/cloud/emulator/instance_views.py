"""Instance views: what Azure reports about a running VM or scale-set instance, and the summary of
a scale set, derived from the emulator's state rather than from a guest.

A machine's view carries its provisioning and power statuses; its fault and update domains (a
standalone VM outside an availability set is in domain 0 of each; a scale-set instance is spread
over the scale set's ``platformFaultDomainCount`` fault domains, 5 by default, and 5 update
domains by instance ID); the OS name and version and Hyper-V generation of its image
(:mod:`images`); the guest agent, Ready while the machine runs with its agent provisioned (the
emulated agent reports :data:`GUEST_AGENT_VERSION`), with one handler per extension; its disks;
boot diagnostics when enabled; its extensions; the dedicated host it was placed on; and whether it
is in a standby pool (never: the emulator has no standby pools). Fields with nothing to report are
``null``, as Azure serializes them. A scale set's view summarises its members' provisioning, its
model's extensions and its orchestration services (automatic repairs, zone rebalancing).
No I/O; call under the state lock.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from nodewright.cloud.emulator.extensions import machine_extensions
from nodewright.cloud.emulator.images import ImageCatalog
from nodewright.cloud.emulator.state import Resource, ScaleSet, now_iso

__all__ = ["GUEST_AGENT_VERSION", "instance_view", "scale_set_instance_view"]

# The version the emulated guest agent reports (a release of the Azure Linux agent's 2.x line).
GUEST_AGENT_VERSION = "2.11.1.12"
_UPDATE_DOMAIN_COUNT = 5
_DEFAULT_FAULT_DOMAIN_COUNT = 5
_POWER_DISPLAY = {
    "running": "VM running",
    "starting": "VM starting",
    "stopping": "VM stopping",
    "stopped": "VM stopped",
    "deallocating": "VM deallocating",
    "deallocated": "VM deallocated",
}


def _status(code: str, display: str, *, level: str = "Info", time: str | None = None) -> dict[str, Any]:
    return {"code": code, "level": level, "displayStatus": display, "message": None, "time": time}


def _provisioning_status(provisioning: str, time: str | None) -> dict[str, Any]:
    failed = provisioning.lower() == "failed"
    display = "Provisioning succeeded" if provisioning == "Succeeded" else provisioning
    return _status(
        f"ProvisioningState/{provisioning.lower()}", display, level="Error" if failed else "Info", time=time
    )


def _machine_statuses(machine: Resource) -> list[dict[str, Any]]:
    provisioning = machine.provisioning_state
    power = "starting" if provisioning.lower() == "creating" else machine.power_state
    return [
        _provisioning_status(provisioning, now_iso()),
        _status(f"PowerState/{power}", _POWER_DISPLAY.get(power, power)),
    ]


def _agent_ready(machine: Resource) -> bool:
    os_profile = machine.properties.get("osProfile") or {}
    configuration = os_profile.get("windowsConfiguration") or os_profile.get("linuxConfiguration") or {}
    provisioned = configuration.get("provisionVMAgent", True) is not False
    return provisioned and machine.provisioning_state == "Succeeded" and machine.power_state == "running"


def _vm_agent(machine: Resource, extensions: list[dict[str, Any]]) -> dict[str, Any]:
    if not _agent_ready(machine):
        status = _status("ProvisioningState/Unavailable", "Not Ready", level="Warning", time=now_iso())
        status["message"] = "The guest agent has not reported its status."
        return {"vmAgentVersion": "Unknown", "statuses": [status], "extensionHandlers": None}
    status = _status("ProvisioningState/succeeded", "Ready", time=now_iso())
    status["message"] = "Guest Agent is running"
    handlers = [
        {
            "type": f"{properties.get('publisher')}.{properties.get('type')}",
            "typeHandlerVersion": properties.get("typeHandlerVersion"),
            "status": _status("ProvisioningState/succeeded", "Ready"),
        }
        for properties in (extension["properties"] for extension in extensions)
    ]
    return {
        "vmAgentVersion": GUEST_AGENT_VERSION,
        "statuses": [status],
        "extensionHandlers": handlers or None,
    }


def _disks(machine: Resource) -> list[dict[str, Any]]:
    storage = machine.properties.get("storageProfile") or {}
    disks = [storage.get("osDisk") or {}, *(storage.get("dataDisks") or [])]
    time = str(machine.properties.get("timeCreated") or now_iso())
    return [
        {
            "name": disk.get("name"),
            "encryptionSettings": None,
            "statuses": [_provisioning_status(machine.provisioning_state, time)],
        }
        for disk in disks
        if isinstance(disk, dict) and disk.get("name")
    ]


def _boot_diagnostics(machine: Resource) -> dict[str, Any] | None:
    """Blob URIs in the boot diagnostics storage account; managed storage has no fixed URIs (they
    are fetched with retrieveBootDiagnosticsData), so the view is empty."""
    settings = (machine.properties.get("diagnosticsProfile") or {}).get("bootDiagnostics") or {}
    if not settings.get("enabled"):
        return None
    storage_uri = str(settings.get("storageUri") or "")
    if not storage_uri:
        return {}
    vm_id = str(machine.properties.get("vmId", ""))
    container = (
        f"{storage_uri.rstrip('/')}/bootdiagnostics-{machine.name[:9].lower()}-{vm_id}/{machine.name}.{vm_id}"
    )
    return {
        "consoleScreenshotBlobUri": f"{container}.screenshot.bmp",
        "serialConsoleLogBlobUri": f"{container}.serialconsole.log",
    }


def _extension_views(extensions: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    views = [
        {
            "name": extension.get("name"),
            "type": f"{extension['properties'].get('publisher')}.{extension['properties'].get('type')}",
            "typeHandlerVersion": extension["properties"].get("typeHandlerVersion"),
            "statuses": [_provisioning_status(str(extension["properties"].get("provisioningState")), None)],
        }
        for extension in extensions
    ]
    return views or None


def _platform_domains(machine: Resource, scale_set: ScaleSet | None) -> tuple[int, int]:
    instance_id = str(machine.document.get("instanceId", ""))
    if scale_set is None or not instance_id.isdigit():
        return 0, 0
    count = int(scale_set.resource.properties.get("platformFaultDomainCount") or _DEFAULT_FAULT_DOMAIN_COUNT)
    return int(instance_id) % max(count, 1), int(instance_id) % _UPDATE_DOMAIN_COUNT


def instance_view(
    images: ImageCatalog, machine: Resource, scale_set: ScaleSet | None = None
) -> dict[str, Any]:
    """The instance view of a VM, or of a scale-set instance when ``scale_set`` is given."""
    properties = machine.properties
    image = images.facts((properties.get("storageProfile") or {}).get("imageReference"))
    extensions = machine_extensions(machine)
    fault_domain, update_domain = _platform_domains(machine, scale_set)
    view: dict[str, Any] = {
        "platformUpdateDomain": update_domain,
        "platformFaultDomain": fault_domain,
        "computerName": (properties.get("osProfile") or {}).get("computerName"),
        "osName": image.os_name,
        "osVersion": image.os_version,
        "hyperVGeneration": image.hyper_v_generation,
        "rdpThumbPrint": None,
        "vmAgent": _vm_agent(machine, extensions),
        "disks": _disks(machine),
        "extensions": _extension_views(extensions),
        "bootDiagnostics": _boot_diagnostics(machine),
        "isVMInStandbyPool": False,
        "statuses": _machine_statuses(machine),
    }
    if machine.assigned_host:
        view["assignedHost"] = machine.assigned_host
    return view


def _orchestration_services(scale_set: ScaleSet) -> list[dict[str, Any]] | None:
    properties = scale_set.resource.properties
    services = []
    repairs = properties.get("automaticRepairsPolicy")
    if isinstance(repairs, dict):
        services.append(
            {
                "serviceName": "AutomaticRepairs",
                "serviceState": "Running" if repairs.get("enabled") else "NotRunning",
            }
        )
    rebalancing = (properties.get("resiliencyPolicy") or {}).get("automaticZoneRebalancingPolicy")
    if isinstance(rebalancing, dict):
        state = "Running" if rebalancing.get("enabled") else "NotRunning"
        services.append({"serviceName": "AutomaticZoneRebalancing", "serviceState": state})
    return services or None


def scale_set_instance_view(scale_set: ScaleSet, members: list[Resource]) -> dict[str, Any]:
    """A scale set's instance view: its members' provisioning summary, each model extension's
    summary over the members, its own provisioning status and its orchestration services."""
    summary = Counter(f"ProvisioningState/{member.provisioning_state.lower()}" for member in members)
    model = scale_set.resource.properties.get("virtualMachineProfile") or {}
    extension_names = [
        str(item.get("name")) for item in (model.get("extensionProfile") or {}).get("extensions") or []
    ]
    view: dict[str, Any] = {
        "virtualMachine": {
            "statusesSummary": [{"code": code, "count": count} for code, count in summary.items()]
        },
        "extensions": [
            {
                "name": name,
                "statusesSummary": [{"code": code, "count": count} for code, count in summary.items()],
            }
            for name in extension_names
        ],
        "statuses": [_scale_set_status(scale_set)],
    }
    services = _orchestration_services(scale_set)
    if services:
        view["orchestrationServices"] = services
    if not view["extensions"]:
        del view["extensions"]
    return view


def _scale_set_status(scale_set: ScaleSet) -> dict[str, Any]:
    status = _provisioning_status(scale_set.resource.provisioning_state, now_iso())
    del status["message"]  # Azure sends a scale set's status without a message unless it failed
    return status
