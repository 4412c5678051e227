"""Pure edits of a scale set model's *boot pool*: the secondary IP configurations its primary NIC
configuration gives every new instance (``boot_pools`` reads and writes the model).

Only configurations named ``nodewright-boot-<n>`` are ours; the user's own secondaries are
counted, kept and never renamed. At most 256 IP configurations per NIC. No I/O.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from nodewright.cloud.errors import CloudError
from nodewright.cloud.ip_configurations import (
    MAX_IP_CONFIGURATIONS_PER_NIC,
    is_primary,
    primary_subnet_id,
    secondary_configuration,
)

__all__ = [
    "BOOT_CONFIGURATION_PREFIX",
    "boot_configuration_count",
    "boot_subnet_id",
    "is_boot_configuration",
    "with_boot_configurations",
]

BOOT_CONFIGURATION_PREFIX = "nodewright-boot-"
"""The name prefix of the IP configurations nodewright keeps in a scale set's model."""

_OURS = re.compile(re.escape(BOOT_CONFIGURATION_PREFIX) + r"(\d+)$", re.IGNORECASE)


def is_boot_configuration(name: str) -> bool:
    """Whether an IP configuration (a model's or, copied from it, an instance's) is ours."""
    return _OURS.match(name) is not None


def _primary_nic(nic_configurations: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The NIC configuration marked primary, else the only one."""
    marked = [nic for nic in nic_configurations if (nic.get("properties") or {}).get("primary")]
    if len(marked) == 1:
        return marked[0]
    return nic_configurations[0] if len(nic_configurations) == 1 else None


def _ip_configurations(nic: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(((nic or {}).get("properties") or {}).get("ipConfigurations") or [])


def boot_configuration_count(nic_configurations: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """Of the model's primary NIC configuration: how many secondary IP configurations are ours,
    and how many are someone else's. Pure."""
    secondaries = [c for c in _ip_configurations(_primary_nic(nic_configurations)) if not is_primary(c)]
    ours = sum(1 for c in secondaries if is_boot_configuration(str(c.get("name", ""))))
    return ours, len(secondaries) - ours


def boot_subnet_id(nic_configurations: Sequence[dict[str, Any]]) -> str | None:
    """The subnet our configurations go in: that of the model's primary IP configuration."""
    others = _ip_configurations(_primary_nic(nic_configurations))
    return primary_subnet_id([c for c in others if not is_boot_configuration(str(c.get("name", "")))])


def with_boot_configurations(
    nic_configurations: Sequence[dict[str, Any]], count: int
) -> list[dict[str, Any]]:
    """The NIC configurations with exactly ``count`` of our secondary IP configurations on the
    primary one (``nodewright-boot-1`` .. ``-count``, in its primary configuration's subnet); every
    other configuration is kept as it was. Raises ``CloudError`` when there is no primary NIC
    configuration or subnet, or past 256 IP configurations on the NIC. Pure."""
    result = [copy.deepcopy(nic) for nic in nic_configurations]
    nic = _primary_nic(result)
    if nic is None:
        raise CloudError("The scale set's model has no primary NIC configuration")
    configurations = _ip_configurations(nic)
    others = [c for c in configurations if not is_boot_configuration(str(c.get("name", "")))]
    if len(others) + count > MAX_IP_CONFIGURATIONS_PER_NIC:
        raise CloudError(
            f"A NIC holds at most {MAX_IP_CONFIGURATIONS_PER_NIC} IP configurations: the model has "
            f"{len(others)} of its own, {count} more were asked for",
            code="NicIpConfigurationLimitReached",
        )
    subnet = primary_subnet_id(others)
    if subnet is None and count:
        raise CloudError("The model's primary NIC configuration names no subnet")
    kept = {
        str(c.get("name", "")).lower(): c
        for c in configurations
        if is_boot_configuration(str(c.get("name", "")))
    }
    ours = []
    for index in range(1, count + 1):
        name = f"{BOOT_CONFIGURATION_PREFIX}{index}"
        existing = kept.get(name.lower())
        ours.append(existing or secondary_configuration(name, str(subnet), scale_set_instance=True))
    nic.setdefault("properties", {})["ipConfigurations"] = [*others, *ours]
    return result
