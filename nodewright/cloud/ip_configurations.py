"""Pure edits of a NIC's IP configuration list, in the ARM JSON shapes.

Two shapes share these rules: a standalone NIC (``Microsoft.Network/networkInterfaces``, where a
secondary configuration has ``privateIPAllocationMethod: Dynamic``) and a uniform scale-set
instance's ``networkInterfaceConfigurations[]`` entry (``privateIPAddressVersion: IPv4``, no
address can be chosen). Rules: at most 256 IP configurations per NIC; names are unique
(case-insensitively); the primary configuration is never removed (ARM answers
IpConfigDeleteNotSupported). ``network`` and ``compute`` send what these functions return.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from nodewright.cloud.errors import CloudError, LimitExceededError

MAX_IP_CONFIGURATIONS_PER_NIC = 256


def is_primary(configuration: dict[str, Any]) -> bool:
    return bool(configuration.get("properties", {}).get("primary"))


def primary_subnet_id(configurations: Sequence[dict[str, Any]]) -> str | None:
    """The subnet of the primary IP configuration (else of the first one)."""
    ordered = sorted(configurations, key=lambda configuration: not is_primary(configuration))
    for configuration in ordered:
        subnet = configuration.get("properties", {}).get("subnet") or {}
        if subnet.get("id"):
            return str(subnet["id"])
    return None


def secondary_configuration(
    name: str, subnet_id: str, *, scale_set_instance: bool, prefix_length: int | None = None
) -> dict[str, Any]:
    """A new secondary IP configuration in the NIC or the scale-set instance shape; with
    ``prefix_length`` (28) it asks for a block of addresses (NIC shape only)."""
    properties: dict[str, Any] = {
        "subnet": {"id": subnet_id},
        "primary": False,
        "privateIPAddressVersion": "IPv4",
    }
    if not scale_set_instance:
        properties["privateIPAllocationMethod"] = "Dynamic"
    if prefix_length is not None:
        properties["privateIPAddressPrefixLength"] = prefix_length
    return {"name": name, "properties": properties}


def with_configurations_added(
    configurations: Sequence[dict[str, Any]],
    names: Iterable[str],
    subnet_id: str | None,
    *,
    scale_set_instance: bool,
    limit: int = MAX_IP_CONFIGURATIONS_PER_NIC,
    prefix_length: int | None = None,
) -> list[dict[str, Any]]:
    """The list with a secondary configuration appended per new name (names already present are
    skipped). Raises ``LimitExceededError`` past ``limit`` and ``CloudError`` without a subnet."""
    result = [copy.deepcopy(configuration) for configuration in configurations]
    existing = {str(configuration.get("name", "")).lower() for configuration in result}
    new_names: list[str] = []
    for name in names:
        if name.lower() not in existing:
            existing.add(name.lower())
            new_names.append(name)
    if not new_names:
        return result
    if len(result) + len(new_names) > limit:
        raise LimitExceededError(
            f"A NIC holds at most {limit} IP configurations: it has {len(result)}, "
            f"{len(new_names)} more were asked for",
            code="NicIpConfigurationLimitReached",
        )
    subnet = subnet_id or primary_subnet_id(result)
    if subnet is None:
        raise CloudError("No subnet given and the NIC's primary IP configuration names none")
    if prefix_length is not None and scale_set_instance:
        raise CloudError("A uniform scale-set instance's IP configurations cannot carry a prefix length")
    result.extend(
        secondary_configuration(
            name, subnet, scale_set_instance=scale_set_instance, prefix_length=prefix_length
        )
        for name in new_names
    )
    return result


def with_configurations_removed(
    configurations: Sequence[dict[str, Any]], names: Iterable[str]
) -> list[dict[str, Any]]:
    """The list without the named secondary configurations (absent names are ignored). Raises
    ``CloudError`` when asked to remove the primary one."""
    unwanted = {name.lower() for name in names}
    result: list[dict[str, Any]] = []
    for configuration in configurations:
        if str(configuration.get("name", "")).lower() in unwanted:
            if is_primary(configuration):
                raise CloudError(
                    f"The primary IP configuration {configuration.get('name')!r} cannot be removed",
                    code="IpConfigDeleteNotSupported",
                )
            continue
        result.append(copy.deepcopy(configuration))
    return result


def changed(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> bool:
    """Whether the edit changed the set of configuration names."""
    return sorted(str(c.get("name", "")).lower() for c in before) != sorted(
        str(c.get("name", "")).lower() for c in after
    )
