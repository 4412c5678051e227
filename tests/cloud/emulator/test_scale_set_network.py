"""The read-only NICs of Uniform scale-set instances through NetworkManagementClient: what the
scale set's model references (security group, load balancer pools, inbound NAT pools, public IP
configuration) appears on each instance's NIC as Azure shows it, with a stable MAC address and the
virtual network's internal DNS suffix."""

from __future__ import annotations

from typing import Any

from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients


def _raw(pipeline_response: Any, deserialized: Any, headers: Any) -> Any:
    return pipeline_response.http_response.json()


def _scale_set(estate: Estate, network: str) -> dict[str, Any]:
    ip_configuration = {
        "name": "ipconfig1",
        "properties": {
            "subnet": {"id": estate.subnet_id},
            "loadBalancerBackendAddressPools": [
                {"id": f"{network}/loadBalancers/lb/backendAddressPools/nodes"}
            ],
            "loadBalancerInboundNatPools": [{"id": f"{network}/loadBalancers/lb/inboundNatPools/ssh"}],
            "publicIPAddressConfiguration": {"name": "public", "properties": {}},
        },
    }
    return {
        "location": "eastus",
        "sku": {"name": "Standard_D2s_v5", "capacity": 2},
        "properties": {
            "virtualMachineProfile": {
                "storageProfile": {
                    "imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server"}
                },
                "osProfile": {"computerNamePrefix": "lb", "adminUsername": "azureuser"},
                "networkProfile": {
                    "networkInterfaceConfigurations": [
                        {
                            "name": "nic",
                            "properties": {
                                "primary": True,
                                "networkSecurityGroup": {"id": f"{network}/networkSecurityGroups/nodes"},
                                "dnsSettings": {"dnsServers": ["10.0.0.10"]},
                                "ipConfigurations": [ip_configuration],
                            },
                        }
                    ]
                },
            }
        },
    }


def test_instance_nics_show_what_the_model_references(estate: Estate, clients: Clients) -> None:
    """Each instance's NIC carries the model's NSG and backend pool, its own NAT rule
    ``<pool>.<instance id>`` and public address, the model's DNS servers and a stable MAC."""
    network = estate.subnet_id.split("/virtualNetworks/")[0]
    clients.compute.virtual_machine_scale_sets.begin_create_or_update(  # type: ignore[call-overload]
        estate.group, "behind-lb", _scale_set(estate, network)
    ).result()
    nics: dict[str, Any] = {
        index: clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
            estate.group, "behind-lb", index, "nic", cls=_raw
        )
        for index in ("0", "1")
    }
    for index, nic in nics.items():
        properties = nic["properties"]
        configuration = properties["ipConfigurations"][0]
        references = configuration["properties"]
        assert properties["networkSecurityGroup"]["id"].endswith("/networkSecurityGroups/nodes")
        assert references["loadBalancerBackendAddressPools"][0]["id"].endswith("/backendAddressPools/nodes")
        assert [rule["id"].rsplit("/", 1)[-1] for rule in references["loadBalancerInboundNatRules"]] == [
            f"ssh.{index}"
        ]
        assert references["publicIPAddress"]["id"] == f"{configuration['id']}/publicIPAddresses/public"
        assert properties["dnsSettings"]["dnsServers"] == ["10.0.0.10"]
        assert properties["dnsSettings"]["internalDomainNameSuffix"].endswith(".internal.cloudapp.net")
    assert nics["0"]["properties"]["macAddress"] != nics["1"]["properties"]["macAddress"]
    again = clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
        estate.group, "behind-lb", "0", "nic"
    )
    assert again.mac_address == nics["0"]["properties"]["macAddress"]
