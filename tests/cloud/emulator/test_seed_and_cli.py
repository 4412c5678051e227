"""Seed files (YAML and JSON), the sample seed, and the standalone command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from azure.mgmt.compute import ComputeManagementClient

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator, load_seed_file
from tests.cloud.emulator.sdk_clients import StaticTokenCredential, sdk_clients

REPOSITORY = Path(__file__).resolve().parents[3]
SAMPLE_SEED = REPOSITORY / "config" / "emulator" / "seed-sample.yaml"


def test_sample_seed_builds_the_described_estate(arm_emulator: ArmEmulator) -> None:
    """The sample seed yields its scale sets with their capacities, the VM, identities and usage."""
    arm_emulator.estate.apply(load_seed_file(SAMPLE_SEED))
    clients = sdk_clients(arm_emulator)
    system = list(clients.compute.virtual_machine_scale_set_vms.list("rg-nodes", "vmss-system"))
    assert [vm.properties.os_profile.computer_name for vm in system] == [  # type: ignore[union-attr]
        "aks-system-vmss000000",
        "aks-system-vmss000001",
        "aks-system-vmss000002",
    ]
    user_nic = clients.network.network_interfaces.get_virtual_machine_scale_set_network_interface(
        "rg-nodes", "vmss-user", "1", "vmss-user-nic"
    )
    assert len(user_nic.properties.ip_configurations or []) == 3  # type: ignore[union-attr]
    gateway = clients.compute.virtual_machines.get("rg-nodes", "vm-gateway")
    assert gateway.identity.type == "SystemAssigned, UserAssigned"  # type: ignore[union-attr]
    assert len(list(clients.compute.virtual_machine_scale_set_vms.list("rg-nodes", "vmss-flex"))) == 1
    usages = {
        str(u.id).rsplit("/", 1)[-1]: (u.current_value, u.limit)
        for u in clients.network.virtual_networks.list_usage("rg-nodes", "vnet-cluster")
    }
    assert usages == {"nodes": (3 + 2 * 3 + 1 + 1, 251), "pods": (0, 1019), "tiny": (0, 3)}
    assert arm_emulator.state.operation_duration == 0.5


def test_json_seed_file(tmp_path: Path, arm_emulator: ArmEmulator) -> None:
    """A JSON seed file is read the same way, and identities can be named by ID."""
    seed = {
        "resourceGroups": [
            {"name": "rg-a", "identities": ["id-a"]},
            {
                "name": "rg-b",
                "virtualNetworks": [
                    {"name": "v", "subnets": [{"name": "s", "addressPrefix": "10.1.0.0/28"}]}
                ],
                "virtualMachines": [
                    {
                        "name": "vm",
                        "subnet": "v/s",
                        "identities": [
                            f"/subscriptions/{DEFAULT_SUBSCRIPTION}/resourceGroups/rg-a/providers/"
                            "Microsoft.ManagedIdentity/userAssignedIdentities/id-a"
                        ],
                    }
                ],
            },
        ]
    }
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(seed))
    arm_emulator.estate.apply_file(path)
    machine = sdk_clients(arm_emulator).compute.virtual_machines.get("rg-b", "vm")
    assert [key.rsplit("/", 1)[-1] for key in machine.identity.user_assigned_identities or {}] == ["id-a"]  # type: ignore[union-attr]


def test_seed_file_must_be_a_mapping(tmp_path: Path) -> None:
    """A seed file that is not a mapping is refused with a clear error."""
    path = tmp_path / "seed.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_seed_file(path)


@pytest.mark.timeout(60)
def test_command_line_serves_a_seeded_estate(tmp_path: Path) -> None:
    """``python -m nodewright.cloud.emulator`` prints endpoint and CA path, writes endpoint.json,
    serves the seed to the real SDK, and stops cleanly on SIGTERM."""
    state_dir = tmp_path / "state"
    command = [
        sys.executable,
        "-m",
        "nodewright.cloud.emulator",
        "--seed",
        str(SAMPLE_SEED),
        "--port",
        "0",
        "--state-dir",
        str(state_dir),
    ]
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPOSITORY, env=environment
    ) as process:
        try:
            assert process.stdout is not None
            lines = dict(process.stdout.readline().strip().split("=", 1) for _ in range(3))
            assert lines["endpoint"].startswith("https://127.0.0.1:")
            assert Path(lines["ca_file"]).is_file()
            assert json.loads((state_dir / "endpoint.json").read_text())["endpoint"] == lines["endpoint"]
            client = ComputeManagementClient(
                StaticTokenCredential(),
                lines["subscription"],
                base_url=lines["endpoint"],
                credential_scopes=[lines["endpoint"] + "/.default"],
                connection_verify=lines["ca_file"],
                polling_interval=0,
            )
            assert client.virtual_machine_scale_sets.get("rg-nodes", "vmss-system").sku.capacity == 3  # type: ignore[union-attr]
        finally:
            process.terminate()
            process.wait(timeout=10)
    assert process.returncode == 0


def test_seed_can_fix_identity_client_and_principal_ids(arm_emulator: ArmEmulator) -> None:
    """An identity seeded with clientId/principalId keeps them, so sample manifests can name them;
    one seeded by name alone gets fresh ones."""
    client_id, principal_id = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-9999-000000000000"
    arm_emulator.estate.apply(
        {
            "resourceGroups": [
                {
                    "name": "rg-fixed",
                    "identities": [
                        {"name": "fixed", "clientId": client_id, "principalId": principal_id},
                        "fresh",
                    ],
                }
            ]
        }
    )
    identities = sdk_clients(arm_emulator).identity.user_assigned_identities
    fixed = identities.get("rg-fixed", "fixed")
    assert (fixed.client_id, fixed.principal_id) == (client_id, principal_id)
    assert identities.get("rg-fixed", "fresh").client_id not in (None, client_id)
