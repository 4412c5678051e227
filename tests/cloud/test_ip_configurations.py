"""Pure edits of IP configuration lists: append in the right shape, 256 per NIC, primary kept."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.cloud.errors import CloudError, LimitExceededError
from nodewright.cloud.ip_configurations import with_configurations_added, with_configurations_removed

SUBNET = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes"


def primary() -> dict[str, Any]:
    return {"name": "ipconfig1", "properties": {"primary": True, "subnet": {"id": SUBNET}}}


@pytest.mark.parametrize(
    ("scale_set_instance", "allocation"),
    [pytest.param(False, "Dynamic", id="standalone-nic"), pytest.param(True, None, id="scale-set-instance")],
)
def test_added_configurations_use_the_primary_subnet(
    scale_set_instance: bool, allocation: str | None
) -> None:
    """New secondary configurations take the primary's subnet; NICs ask for Dynamic allocation."""
    result = with_configurations_added(
        [primary()], ["pod-1", "pod-2"], None, scale_set_instance=scale_set_instance
    )
    assert [entry["name"] for entry in result] == ["ipconfig1", "pod-1", "pod-2"]
    added = result[1]["properties"]
    assert added["subnet"] == {"id": SUBNET}
    assert added["primary"] is False
    assert added.get("privateIPAllocationMethod") == allocation


def test_existing_names_are_not_added_twice() -> None:
    """Adding a name already present (any case) changes nothing."""
    result = with_configurations_added([primary()], ["IPCONFIG1"], None, scale_set_instance=False)
    assert result == [primary()]


def test_more_than_256_is_refused() -> None:
    """The 257th configuration raises LimitExceededError before any request."""
    configurations = [primary()] + [{"name": f"c{n}", "properties": {}} for n in range(255)]
    with pytest.raises(LimitExceededError):
        with_configurations_added(configurations, ["one-too-many"], SUBNET, scale_set_instance=False)


def test_removal_keeps_primary_and_ignores_unknown() -> None:
    """Removing secondaries drops them; unknown names are ignored; the primary cannot go."""
    configurations = with_configurations_added([primary()], ["a", "b"], None, scale_set_instance=False)
    assert [entry["name"] for entry in with_configurations_removed(configurations, ["A", "zzz"])] == [
        "ipconfig1",
        "b",
    ]
    with pytest.raises(CloudError, match="primary"):
        with_configurations_removed(configurations, ["ipconfig1"])
