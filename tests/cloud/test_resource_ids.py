"""Parsing of ARM resource IDs, node providerIDs and identity IDs: case-insensitive, resource group
from the ID, VM versus uniform scale-set instance."""

from __future__ import annotations

import pytest

from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    NetworkInterfaceId,
    ScaleSetInstanceId,
    VirtualMachineId,
    normalize_identity_id,
    parse_network_interface_id,
    parse_provider_id,
    parse_resource_id,
    parse_scale_set_id,
    parse_subnet_id,
    parse_user_assigned_identity_id,
)

SUB = "00000000-0000-0000-0000-000000000001"


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        pytest.param(
            f"azure:///subscriptions/{SUB}/resourceGroups/rg-a/providers/Microsoft.Compute/virtualMachines/vm-1",
            VirtualMachineId(SUB, "rg-a", "vm-1"),
            id="standalone-vm",
        ),
        pytest.param(
            f"azure:///subscriptions/{SUB}/resourceGroups/MC_rg_cluster_westeurope/providers/"
            "Microsoft.Compute/virtualMachineScaleSets/aks-pool-123/virtualMachines/7",
            ScaleSetInstanceId(SUB, "MC_rg_cluster_westeurope", "aks-pool-123", "7"),
            id="uniform-scale-set-instance",
        ),
        pytest.param(
            f"AZURE:///SUBSCRIPTIONS/{SUB}/RESOURCEGROUPS/RG-B/PROVIDERS/MICROSOFT.COMPUTE/"
            "VIRTUALMACHINESCALESETS/POOL/VIRTUALMACHINES/0",
            ScaleSetInstanceId(SUB, "RG-B", "POOL", "0"),
            id="all-upper-case",
        ),
        pytest.param(
            f"azure:///subscriptions/{SUB}/resourcegroups/rg-c/providers/microsoft.compute/virtualmachines/flex_abc123",
            VirtualMachineId(SUB, "rg-c", "flex_abc123"),
            id="flexible-orchestration-machine-is-a-vm",
        ),
    ],
)
def test_provider_ids_parse_with_resource_group_from_the_id(provider_id: str, expected: object) -> None:
    """The resource group comes from the providerID itself, in whatever case it was written."""
    parsed = parse_provider_id(provider_id)
    assert parsed == expected
    assert parsed.provider_id.lower() == provider_id.lower()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("aws:///us-east-1a/i-0123", id="other-cloud"),
        pytest.param(f"azure:///subscriptions/{SUB}/resourceGroups/rg", id="truncated"),
        pytest.param(
            f"azure:///subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n",
            id="not-a-machine",
        ),
        pytest.param(
            f"azure:///subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/s",
            id="scale-set-not-instance",
        ),
    ],
)
def test_invalid_provider_ids_are_refused(value: str) -> None:
    """Anything but a VM or scale-set instance providerID raises InvalidResourceIdError."""
    with pytest.raises(InvalidResourceIdError):
        parse_provider_id(value)


def test_resource_id_keeps_children_and_round_trips() -> None:
    """A nested ID keeps its child segments and formats back to the same path."""
    value = f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/n"
    parsed = parse_resource_id(value)
    assert parsed.children == (("subnets", "n"),)
    assert str(parsed) == value
    assert parsed.is_type("microsoft.network", "VIRTUALNETWORKS", "subnets")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic-1",
            NetworkInterfaceId(SUB, "rg", "nic-1"),
            id="standalone-nic",
        ),
        pytest.param(
            f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool"
            "/virtualMachines/3/networkInterfaces/pool-nic",
            NetworkInterfaceId(SUB, "rg", "pool-nic", ScaleSetInstanceId(SUB, "rg", "pool", "3")),
            id="scale-set-instance-nic-view",
        ),
    ],
)
def test_network_interface_ids(value: str, expected: NetworkInterfaceId) -> None:
    """NIC IDs parse in both the Network and the scale-set instance form, and round-trip."""
    parsed = parse_network_interface_id(value)
    assert parsed == expected
    assert str(parsed) == value


def test_subnet_and_scale_set_ids() -> None:
    """Subnet and scale set IDs parse case-insensitively."""
    subnet = parse_subnet_id(
        f"/SUBSCRIPTIONS/{SUB}/resourcegroups/net-rg/providers/microsoft.network/virtualnetworks/v/subnets/s"
    )
    assert (subnet.resource_group, subnet.virtual_network_name, subnet.name) == ("net-rg", "v", "s")
    scale_set = parse_scale_set_id(
        f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool"
    )
    assert scale_set.instance("4") == ScaleSetInstanceId(SUB, "rg", "pool", "4")


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param(
            f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id-1",
            True,
            id="canonical",
        ),
        pytest.param(
            f"/subscriptions/{SUB}/resourcegroups/RG/providers/microsoft.managedidentity/userassignedidentities/ID-1",
            True,
            id="lower-case-keywords",
        ),
        pytest.param(
            f"/subscriptions/{SUB}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id-1",
            False,
            id="no-resource-group",
        ),
        pytest.param(
            f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/id-1",
            False,
            id="wrong-provider",
        ),
    ],
)
def test_user_assigned_identity_ids_are_validated(value: str, valid: bool) -> None:
    """Identity IDs are checked with aad-pod-identity's pattern and normalised lowercased."""
    if valid:
        assert normalize_identity_id(value) == value.lower()
        assert parse_user_assigned_identity_id(value).key == value.lower()
    else:
        with pytest.raises(InvalidResourceIdError):
            parse_user_assigned_identity_id(value)
