"""Instance views through ComputeManagementClient, derived from the emulator's state: the guest
agent follows the power state and lists a handler per extension, disks are the machine's own,
scale-set instances are spread over fault and update domains and placed on a dedicated host group's
hosts in turn, and a scale set's view summarises its model's extensions and automatic repairs."""

from __future__ import annotations

from typing import Any

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.instance_views import GUEST_AGENT_VERSION
from tests.cloud.emulator.conftest import Estate
from tests.cloud.emulator.sdk_clients import Clients

HEALTH = {
    "publisher": "Microsoft.ManagedServices",
    "type": "ApplicationHealthLinux",
    "typeHandlerVersion": "1.0",
    "settings": {"port": 22},
}


def _raw(pipeline_response: Any, deserialized: Any, headers: Any) -> Any:
    return pipeline_response.http_response.json()


def test_vm_view_reports_agent_disks_extensions_and_image(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A running VM: agent Ready with one handler per extension, its OS disk by name, the image's
    generation; once stopped the agent is Not Ready."""
    arm_emulator.estate.add_extension(estate.vm_id, "health", HEALTH, tags={"team": "nodes"})
    view: dict[str, Any] = clients.compute.virtual_machines.instance_view(estate.group, "vm-0", cls=_raw)  # type: ignore[assignment]
    assert view["vmAgent"]["vmAgentVersion"] == GUEST_AGENT_VERSION
    assert view["vmAgent"]["statuses"][0]["displayStatus"] == "Ready"
    assert [handler["type"] for handler in view["vmAgent"]["extensionHandlers"]] == [
        "Microsoft.ManagedServices.ApplicationHealthLinux"
    ]
    assert [extension["name"] for extension in view["extensions"]] == ["health"]
    assert [disk["name"] for disk in view["disks"]] == ["vm-0-osdisk"]
    assert (view["platformFaultDomain"], view["platformUpdateDomain"]) == (0, 0)
    assert view["hyperVGeneration"] == "V2"
    assert view["bootDiagnostics"] is None
    machine = clients.compute.virtual_machines.get(estate.group, "vm-0")
    assert [resource.name for resource in machine.resources or []] == ["health"]
    assert (machine.resources or [])[0].tags == {"team": "nodes"}
    arm_emulator.state.set_power_state(estate.vm_id, "stopped")
    stopped: dict[str, Any] = clients.compute.virtual_machines.instance_view(estate.group, "vm-0", cls=_raw)  # type: ignore[assignment]
    assert stopped["vmAgent"]["statuses"][0]["displayStatus"] == "Not Ready"
    assert stopped["statuses"][1]["code"] == "PowerState/stopped"


def _scale_set_body(estate: Estate, **properties: Any) -> dict[str, Any]:
    return {
        "location": "eastus",
        "sku": {"name": "Standard_D2s_v5", "capacity": 6},
        "properties": {
            **properties,
            "virtualMachineProfile": {
                "storageProfile": {
                    "imageReference": {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server"}
                },
                "osProfile": {"computerNamePrefix": "view", "adminUsername": "azureuser"},
                "extensionProfile": {"extensions": [{"name": "health", "properties": HEALTH}]},
                "networkProfile": {
                    "networkInterfaceConfigurations": [
                        {
                            "name": "nic",
                            "properties": {
                                "ipConfigurations": [
                                    {"name": "ip", "properties": {"subnet": {"id": estate.subnet_id}}}
                                ]
                            },
                        }
                    ]
                },
            },
        },
    }


def test_scale_set_views_spread_instances_and_summarise_the_model(estate: Estate, clients: Clients) -> None:
    """Six instances over 5 fault and 5 update domains; the scale set's view counts them for its
    extension and reports automatic repairs running."""
    body = _scale_set_body(estate, automaticRepairsPolicy={"enabled": True})
    clients.compute.virtual_machine_scale_sets.begin_create_or_update(estate.group, "spread", body).result()  # type: ignore[call-overload]
    domains = []
    for index in range(6):
        view = clients.compute.virtual_machine_scale_set_vms.get_instance_view(
            estate.group, "spread", str(index)
        )
        domains.append((view.platform_fault_domain, view.platform_update_domain))
        assert [extension.name for extension in view.extensions or []] == ["health"]
    assert domains == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (0, 0)]
    summary: dict[str, Any] = clients.compute.virtual_machine_scale_sets.get_instance_view(
        estate.group, "spread", cls=_raw
    )  # type: ignore[assignment]
    assert summary["extensions"] == [
        {"name": "health", "statusesSummary": [{"code": "ProvisioningState/succeeded", "count": 6}]}
    ]
    assert summary["orchestrationServices"] == [
        {"serviceName": "AutomaticRepairs", "serviceState": "Running"}
    ]


def test_instances_are_placed_on_the_host_group_hosts_in_turn(
    arm_emulator: ArmEmulator, estate: Estate, clients: Clients
) -> None:
    """A scale set on a dedicated host group with automatic placement: instances alternate over the
    group's two hosts; a scale set without a host group reports no assigned host."""
    host_group = arm_emulator.estate.add_dedicated_host_group(estate.group, "hosts", ["host-a", "host-b"])
    body = _scale_set_body(estate, hostGroup={"id": host_group}, platformFaultDomainCount=1)
    body["sku"]["capacity"] = 3
    clients.compute.virtual_machine_scale_sets.begin_create_or_update(estate.group, "on-hosts", body).result()  # type: ignore[call-overload]
    hosts = [
        clients.compute.virtual_machine_scale_set_vms.get_instance_view(estate.group, "on-hosts", str(index))
        for index in range(3)
    ]
    assert [(view.assigned_host or "").rsplit("/", 1)[-1] for view in hosts] == ["host-a", "host-b", "host-a"]
    assert {view.platform_fault_domain for view in hosts} == {0}
    plain = clients.compute.virtual_machine_scale_set_vms.get_instance_view(estate.group, "vmss-a", "0")
    assert plain.assigned_host is None
