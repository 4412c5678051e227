"""What Azure fills into a machine's model when it is created, so that a GET shows it although the
PUT never sent it: server defaults (empty data disks and secrets, OS disk caching ReadWrite and
data disk caching None, extension operations allowed,
NIC and IP configuration ``primary``, IPv4, DNS settings, IP forwarding and accelerated
networking off) and what Azure derives from the image (:mod:`images`): the OS disk's ``osType``,
``windowsConfiguration`` or ``linuxConfiguration`` defaults, the security type (Trusted Launch
for a Generation 2 image, Standard otherwise, as Azure defaults since Trusted Launch became the
default), and for a machine (not a scale-set model) its disks' names, sizes and managed disk IDs
and the image's exact version.

Pure functions over ARM JSON, changing the given dictionaries in place; no I/O.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from nodewright.cloud.emulator.images import ImageFacts, ResolvedImage

__all__ = ["with_disk_defaults", "with_server_defaults"]

# Sizes whose name carries an "s" after the family letters and core count support premium SSDs.
_PREMIUM_CAPABLE = re.compile(r"^standard_[a-z]+\d+[a-z]*s[a-z]*(_|$)", re.IGNORECASE)


def with_server_defaults(properties: dict[str, Any], image: ImageFacts) -> None:
    """Defaults of a VM's properties or a scale set's ``virtualMachineProfile`` (see module)."""
    storage = properties.get("storageProfile")
    if isinstance(storage, dict):
        os_disk = storage.setdefault("osDisk", {})
        if isinstance(os_disk, dict):
            os_disk.setdefault("osType", image.os_type)
            os_disk.setdefault("caching", "ReadWrite")
        for data_disk in storage.setdefault("dataDisks", []):
            if isinstance(data_disk, dict):
                data_disk.setdefault("caching", "None")
    os_profile = properties.get("osProfile")
    if isinstance(os_profile, dict):
        _os_profile_defaults(os_profile, image)
    _security_defaults(properties, image)
    network_profile = properties.get("networkProfile") or {}
    for index, reference in enumerate(network_profile.get("networkInterfaces") or []):
        if isinstance(reference, dict):
            reference.setdefault("properties", {}).setdefault("primary", index == 0)
    for index, configuration in enumerate(network_profile.get("networkInterfaceConfigurations") or []):
        nic = configuration.setdefault("properties", {})
        nic.setdefault("primary", index == 0)
        nic.setdefault("enableAcceleratedNetworking", False)
        nic.setdefault("enableIPForwarding", False)
        nic.setdefault("dnsSettings", {"dnsServers": []})
        for ip_index, ip_configuration in enumerate(nic.get("ipConfigurations") or []):
            ip_properties = ip_configuration.setdefault("properties", {})
            ip_properties.setdefault("primary", ip_index == 0)
            ip_properties.setdefault("privateIPAddressVersion", "IPv4")


def _os_profile_defaults(os_profile: dict[str, Any], image: ImageFacts) -> None:
    os_profile.setdefault("secrets", [])
    os_profile.setdefault("allowExtensionOperations", True)
    os_profile.setdefault("requireGuestProvisionSignal", True)
    if image.windows and "linuxConfiguration" not in os_profile:
        windows = os_profile.setdefault("windowsConfiguration", {})
        windows.setdefault("provisionVMAgent", True)
        windows.setdefault("enableAutomaticUpdates", True)
    elif not image.windows and "windowsConfiguration" not in os_profile:
        linux = os_profile.setdefault("linuxConfiguration", {})
        linux.setdefault("disablePasswordAuthentication", False)
        linux.setdefault("provisionVMAgent", True)


def _security_defaults(properties: dict[str, Any], image: ImageFacts) -> None:
    """Trusted Launch (secure boot and vTPM on) for a Generation 2 image when the request names no
    security type; Standard for a Generation 1 image."""
    security = properties.setdefault("securityProfile", {})
    if not isinstance(security, dict) or security.get("securityType"):
        return
    if image.hyper_v_generation.upper() == "V2":
        security["securityType"] = "TrustedLaunch"
        uefi = security.setdefault("uefiSettings", {})
        uefi.setdefault("secureBootEnabled", True)
        uefi.setdefault("vTpmEnabled", True)
    else:
        security["securityType"] = "Standard"


def default_storage_account_type(vm_size: str) -> str:
    """Premium SSD for sizes that support it, Standard HDD otherwise (Azure's default)."""
    return "Premium_LRS" if _PREMIUM_CAPABLE.match(vm_size) else "Standard_LRS"


def with_disk_defaults(
    properties: dict[str, Any],
    *,
    disk_prefix: str,
    resource_group_id: str,
    resolved: ResolvedImage | None,
    image: ImageFacts,
) -> None:
    """A machine's disks as Azure creates them: ``{prefix}_OsDisk_1_{hex}`` and
    ``{prefix}_disk{lun + 1}_{hex}`` managed disks (IDs under ``resource_group_id``), the OS disk
    as large as the image's, and the image reference's ``exactVersion``."""
    storage = properties.get("storageProfile")
    if not isinstance(storage, dict):
        return
    vm_size = str((properties.get("hardwareProfile") or {}).get("vmSize", ""))
    reference = storage.get("imageReference")
    if resolved is not None and isinstance(reference, dict) and not reference.get("id"):
        reference.setdefault("exactVersion", resolved.exact_version)
    os_disk = storage.get("osDisk")
    if isinstance(os_disk, dict):
        os_disk.setdefault("name", f"{disk_prefix}_OsDisk_1_{uuid.uuid4().hex}")
        os_disk.setdefault("diskSizeGB", image.os_disk_size_gb)
        _managed_disk(os_disk, resource_group_id, vm_size)
    for data_disk in storage.get("dataDisks") or []:
        if isinstance(data_disk, dict):
            lun = int(data_disk.get("lun", 0))
            data_disk.setdefault("name", f"{disk_prefix}_disk{lun + 1}_{uuid.uuid4().hex}")
            data_disk.setdefault("toBeDetached", False)
            _managed_disk(data_disk, resource_group_id, vm_size)


def _managed_disk(disk: dict[str, Any], resource_group_id: str, vm_size: str) -> None:
    if disk.get("vhd"):
        return
    managed = disk.setdefault("managedDisk", {})
    managed.setdefault("storageAccountType", default_storage_account_type(vm_size))
    managed.setdefault("id", f"{resource_group_id}/providers/Microsoft.Compute/disks/{disk['name']}")
