"""Pure planning of identity PATCHes: delta maps, identity type after each request, 150 per request."""

from __future__ import annotations

import pytest

from nodewright.cloud.identity_updates import (
    identity_delta,
    identity_type,
    plan_identity_patches,
)
from nodewright.cloud.models import ResourceIdentities


def identity(number: int) -> str:
    prefix = "/subscriptions/s/resourcegroups/rg/providers/microsoft.managedidentity/userassignedidentities"
    return f"{prefix}/id-{number:03d}"


def state(*numbers: int, system: bool = False) -> ResourceIdentities:
    has_user = bool(numbers)
    return ResourceIdentities(
        identity_type(system, has_user), system, frozenset(identity(n) for n in numbers)
    )


@pytest.mark.parametrize(
    ("system", "user", "expected"),
    [
        pytest.param(False, False, "None", id="nothing"),
        pytest.param(True, False, "SystemAssigned", id="system-only"),
        pytest.param(False, True, "UserAssigned", id="user-only"),
        pytest.param(True, True, "SystemAssigned, UserAssigned", id="both"),
    ],
)
def test_identity_type(system: bool, user: bool, expected: str) -> None:
    """The type names exactly the kinds of identity that remain."""
    assert identity_type(system, user) == expected


def test_delta_adds_missing_and_removes_present_only() -> None:
    """Adding a present identity or removing an absent one sends nothing; IDs are lowercased."""
    delta = identity_delta(
        [identity(1), identity(2)], [identity(2), identity(3).upper()], [identity(1), identity(9)]
    )
    assert delta == ((identity(1), False), (identity(3), True))


@pytest.mark.parametrize(
    ("current", "add", "remove", "expected_type", "expected_map"),
    [
        pytest.param(state(1), [2], [], "UserAssigned", {identity(2): {}}, id="add-to-user-assigned"),
        pytest.param(
            state(system=True),
            [2],
            [],
            "SystemAssigned, UserAssigned",
            {identity(2): {}},
            id="add-keeps-system",
        ),
        pytest.param(state(1, 2), [], [1], "UserAssigned", {identity(1): None}, id="remove-one-of-two"),
        pytest.param(state(1), [], [1], "None", None, id="remove-last-no-system"),
        pytest.param(state(1, system=True), [], [1], "SystemAssigned", None, id="remove-last-keeps-system"),
        pytest.param(state(1), [2], [1], "UserAssigned", {identity(1): None, identity(2): {}}, id="swap"),
    ],
)
def test_single_patch_body(
    current: ResourceIdentities,
    add: list[int],
    remove: list[int],
    expected_type: str,
    expected_map: dict[str, object] | None,
) -> None:
    """One request: add maps to {}, remove to null, the type describes what remains, and no map
    is sent when no user-assigned identity remains."""
    patches = plan_identity_patches(current, [identity(n) for n in add], [identity(n) for n in remove])
    assert len(patches) == 1
    body = patches[0].body()
    assert body["type"] == expected_type
    assert body.get("userAssignedIdentities") == expected_map


def test_nothing_to_do_plans_no_request() -> None:
    """Desired state already reached: no PATCH at all."""
    assert plan_identity_patches(state(1), [identity(1)], [identity(2)]) == []


def test_more_than_150_changes_are_chunked() -> None:
    """320 additions become requests of 150, 150 and 20 entries."""
    patches = plan_identity_patches(state(), [identity(n) for n in range(320)], [])
    assert [len(patch.changes) for patch in patches] == [150, 150, 20]
    assert all(patch.type == "UserAssigned" for patch in patches)


def test_removing_everything_in_chunks_sets_none_only_on_the_last() -> None:
    """Removing 200: the first request still leaves identities (UserAssigned); the last leaves none."""
    patches = plan_identity_patches(state(*range(200)), [], [identity(n) for n in range(200)])
    assert [patch.type for patch in patches] == ["UserAssigned", "None"]
    assert "userAssignedIdentities" not in patches[1].body()
