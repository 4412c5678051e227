"""Contract: a subscription's virtual networks through ``VirtualNetworksOperations.list_all`` (what
Cilium's Azure IPAM lists at start): every network of every group, subnets inline, in pages, each
with the fields of Azure's published example (VirtualNetworkListAll.json, Microsoft.Network
2023-09-01) and equal to the GET of the same network."""

from __future__ import annotations

from typing import Any

from azure.core.rest import HttpRequest

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from tests.cloud.emulator.sdk_clients import Clients

# The field paths each network of the published example carries (``[]`` is a list's items).
EXAMPLE_FIELDS = (
    "id",
    "name",
    "type",
    "location",
    "properties.addressSpace.addressPrefixes",
    "properties.dhcpOptions.dnsServers",
    "properties.subnets",
    "properties.subnets[].id",
    "properties.subnets[].name",
    "properties.subnets[].properties.addressPrefix",
    "properties.subnets[].properties.provisioningState",
    "properties.virtualNetworkPeerings",
    "properties.provisioningState",
)


def _present(document: Any, path: str) -> bool:
    head, _, rest = path.partition(".")
    if head.endswith("[]"):
        items = document.get(head[:-2]) if isinstance(document, dict) else None
        return isinstance(items, list) and all(_present(item, rest) for item in items)
    if not isinstance(document, dict) or head not in document:
        return False
    return not rest or _present(document[head], rest)


def test_list_all_pages_every_group_with_subnets_inline(arm_emulator: ArmEmulator, clients: Clients) -> None:
    """Five networks in two groups, two per page: the SDK pager follows nextLink and gets all five,
    each with its subnets, and nothing of another subscription's."""
    arm_emulator.state.list_page_size = 2
    expected = {}
    for group in ("rg-one", "rg-two"):
        arm_emulator.estate.add_resource_group(group)
    for index in range(5):
        group = "rg-one" if index < 3 else "rg-two"
        network_id = arm_emulator.estate.add_virtual_network(
            group, f"vnet-{index}", subnets={"pods": f"10.{index}.0.0/24", "nodes": f"10.{index}.1.0/24"}
        )
        expected[network_id.lower()] = {
            f"{network_id}/subnets/pods".lower(),
            f"{network_id}/subnets/nodes".lower(),
        }
    listed = list(clients.network.virtual_networks.list_all())
    assert {str(n.id).lower() for n in listed} == set(expected)
    for network in listed:
        subnets = {str(s.id).lower() for s in network.subnets or []}
        assert subnets == expected[str(network.id).lower()]
    pages = arm_emulator.requests.count("VirtualNetworks.list_all")
    assert pages == 3, f"five networks two per page are three pages, not {pages}"


def test_listed_network_has_the_published_fields_and_equals_its_get(
    arm_emulator: ArmEmulator, clients: Clients
) -> None:
    """Raw JSON of the list: every field the published example shows, and the same document the
    network's own GET answers."""
    arm_emulator.estate.add_resource_group("rg-one")
    arm_emulator.estate.add_virtual_network("rg-one", "vnet", subnets={"pods": "10.9.0.0/24"})
    page = clients.network._client.send_request(
        _request(arm_emulator, "/providers/Microsoft.Network/virtualNetworks")
    ).json()
    (document,) = page["value"]
    missing = [path for path in EXAMPLE_FIELDS if not _present(document, path)]
    assert not missing, f"fields of VirtualNetworkListAll.json missing: {missing}"
    single = clients.network._client.send_request(
        _request(arm_emulator, "/resourceGroups/rg-one/providers/Microsoft.Network/virtualNetworks/vnet")
    ).json()
    assert document == single


def _request(arm_emulator: ArmEmulator, suffix: str) -> HttpRequest:
    return HttpRequest(
        "GET", f"{arm_emulator.endpoint}/subscriptions/{DEFAULT_SUBSCRIPTION}{suffix}?api-version=2023-09-01"
    )
