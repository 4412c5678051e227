"""Azure's published examples, replayed through the real SDK pipeline against the emulator: the
status code is one the example lists, its LRO headers are present, key fields (id, name, type,
location, provisioningState) are present, and every field of the example's body is present with
the same JSON type, except the gaps listed below with their reasons (fields the emulator has no
state for). The examples are read from ``shared/`` beside the project, never copied."""

from __future__ import annotations

import pytest

from nodewright.cloud.emulator import ArmEmulator
from nodewright.cloud.emulator.server import build_router
from tests.cloud.emulator.example_seeds import seed
from tests.cloud.emulator.examples import CASES, EXAMPLES, Case, judge, load, request_for, send
from tests.cloud.emulator.sdk_clients import sdk_clients

# Operations the emulator serves that have no published example in shared/ (the polling endpoints
# of its long-running operations, the refusal of writes to a uniform scale-set instance's NIC, and
# the federated identity credential operations, whose examples are asked for in the closing note;
# the NICs of a whole scale set, whose published example, VmssNetworkInterfaceList.json of
# Microsoft.Network 2017-06-01, is not in shared/ yet: test_scale_set_network holds each listed
# NIC equal to the per-instance list's, which VmssVmNetworkInterfaceList.json checks).
WITHOUT_EXAMPLE = frozenset(
    {
        "NetworkInterfaces.list_virtual_machine_scale_set_network_interfaces",
        "Operations.status",
        "Operations.result",
        "NetworkInterfaces.scale_set_write",
        # VirtualNetworkListAll.json (Microsoft.Network 2023-09-01) is not in shared/ yet:
        # test_virtual_network_list holds each listed network to its fields and to the network's GET.
        "VirtualNetworks.list_all",
        "FederatedIdentityCredentials.get",
        "FederatedIdentityCredentials.list",
        "FederatedIdentityCredentials.create_or_update",
        "FederatedIdentityCredentials.delete",
    }
)

# Example -> (why, the fields that differ). Everything else must match every field.
KNOWN_GAPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "compute/VirtualMachine_Get_InstanceView.json": (
        "the example's VM is in a capacity reservation group and its guest has assessed and installed "
        "patches, and its extension handler wrote a status message; the emulator models neither "
        "capacity reservations nor what runs inside a guest",
        (
            ".capacityReservationType: missing",
            ".extensions[0].statuses[0].message: null instead of string",
            ".patchStatus: missing",
        ),
    ),
    "compute/VirtualMachineScaleSet_GetInstanceView_MaximumSet_Gen.json": (
        "a synthetic example (every optional field filled): a real answer carries no message on a "
        "succeeded scale set's provisioning status, and neither does the emulator",
        (".statuses[0].message: missing",),
    ),
    "compute/VirtualMachineScaleSetVM_Get_WithVMSizeProperties.json": (
        "the example's instance lists a tagged extension (a standalone VM's, by its ID); a scale-set "
        "instance's extensions come from the model's extensionProfile, whose extensions carry no tags",
        (".resources[0].tags: missing",),
    ),
    "msi/IdentityListByResourceGroup.json": (
        "the example shows a nextLink for a one-item page; the emulator answers in one page and, as ARM "
        "does on the last page, sends no nextLink",
        (".nextLink: missing",),
    ),
}


def test_examples_are_beside_the_project_and_cover_every_operation() -> None:
    """Each served operation has an example (or is listed as having none), each case's file exists."""
    assert EXAMPLES.is_dir(), f"Azure's examples are expected at {EXAMPLES} (shared/ beside the project)"
    served = {route.name for route in build_router().routes}
    replayed = {case.operation for case in CASES}
    assert served - WITHOUT_EXAMPLE == replayed
    for case in CASES:
        assert (EXAMPLES / case.file).is_file(), case.file


@pytest.mark.parametrize(
    "case", CASES, ids=[case.file.split("/")[-1].removesuffix(".json") for case in CASES]
)
def test_example_replays(arm_emulator: ArmEmulator, case: Case) -> None:
    """Status, LRO headers and key fields always; every field unless the gap is listed."""
    example = load(case)
    seed(arm_emulator, case, example)
    answer = send(sdk_clients(arm_emulator, retry_total=0), request_for(case, example, arm_emulator.endpoint))
    verdict = judge(example, answer)
    assert verdict.status_ok, f"{answer.status} not among {sorted(example['responses'])}: {answer.body}"
    assert verdict.lro_headers_missing == []
    assert verdict.key_fields_missing == []
    _, allowed = KNOWN_GAPS.get(case.file, ("", ()))
    assert sorted(verdict.fields_differing) == sorted(allowed)


def test_at_least_28_of_32_operations_match_every_field() -> None:
    """As the issue asks (see KNOWN_GAPS for what is missing and why)."""
    assert len(CASES) == 32
    assert len(CASES) - len(KNOWN_GAPS) >= 28
