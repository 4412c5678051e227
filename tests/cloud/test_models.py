"""Pure mappings of the cloud layer's own models: instance-view codes to node states, image
reference forms, identity blocks."""

from __future__ import annotations

import pytest

from nodewright.cloud.models import (
    ImageReference,
    NodeState,
    ResourceIdentities,
    node_state_from_status_codes,
)


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        pytest.param(["ProvisioningState/creating"], NodeState.CREATING, id="creating"),
        pytest.param(
            ["ProvisioningState/succeeded", "PowerState/starting"], NodeState.CREATING, id="starting"
        ),
        pytest.param(["ProvisioningState/succeeded", "PowerState/running"], NodeState.READY, id="running"),
        pytest.param(["ProvisioningState/updating", "PowerState/running"], NodeState.STOPPED, id="updating"),
        pytest.param(["ProvisioningState/migrating"], NodeState.STOPPED, id="migrating"),
        pytest.param(
            ["ProvisioningState/succeeded", "PowerState/stopping"], NodeState.STOPPED, id="stopping"
        ),
        pytest.param(["ProvisioningState/succeeded", "PowerState/stopped"], NodeState.STOPPED, id="stopped"),
        pytest.param(["PowerState/deallocating"], NodeState.STOPPED, id="deallocating"),
        pytest.param(["PowerState/deallocated"], NodeState.STOPPED, id="deallocated"),
        pytest.param(
            ["ProvisioningState/failed/InternalOperationError"], NodeState.FAILED, id="failed-with-detail"
        ),
        pytest.param(
            ["ProvisioningState/deleting", "PowerState/running"], NodeState.TERMINATING, id="deleting"
        ),
        pytest.param(
            ["PowerState/running", "ProvisioningState/deleting"], NodeState.TERMINATING, id="order-free"
        ),
        pytest.param(["provisioningstate/CREATING"], NodeState.CREATING, id="case-insensitive"),
        pytest.param([], NodeState.UNKNOWN, id="no-statuses"),
        pytest.param(["ProvisioningState/succeeded"], NodeState.UNKNOWN, id="succeeded-without-power"),
        pytest.param(["OSState/generalized"], NodeState.UNKNOWN, id="unrelated-code"),
    ],
)
def test_node_state_from_instance_view(codes: list[str], expected: NodeState) -> None:
    """Instance-view status codes map to node states as constellation's table does."""
    assert node_state_from_status_codes(codes) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/i/versions/1.2.3",
            ImageReference(
                id="/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/i/versions/1.2.3"
            ),
            id="gallery-image-version-id",
        ),
        pytest.param(
            "/CommunityGalleries/cg-1/Images/node/Versions/2024.1.0",
            ImageReference(
                community_gallery_image_id="/CommunityGalleries/cg-1/Images/node/Versions/2024.1.0"
            ),
            id="community-gallery-any-case",
        ),
        pytest.param(
            "/sharedGalleries/sg/images/node/versions/1.0.0",
            ImageReference(shared_gallery_image_id="/sharedGalleries/sg/images/node/versions/1.0.0"),
            id="shared-gallery",
        ),
        pytest.param(
            "Canonical:ubuntu-24_04-lts:server:latest",
            ImageReference(publisher="Canonical", offer="ubuntu-24_04-lts", sku="server", version="latest"),
            id="marketplace-colons",
        ),
        pytest.param(
            "Canonical/0001-com-ubuntu-server-jammy/22_04-lts-gen2/22.04.202401010",
            ImageReference(
                publisher="Canonical",
                offer="0001-com-ubuntu-server-jammy",
                sku="22_04-lts-gen2",
                version="22.04.202401010",
            ),
            id="marketplace-slashes",
        ),
    ],
)
def test_image_reference_forms_parse(text: str, expected: ImageReference) -> None:
    """Each image reference form parses to its own field and formats back."""
    parsed = ImageReference.parse(text)
    assert parsed == expected
    assert ImageReference.parse(parsed.format()) == parsed


@pytest.mark.parametrize(
    "text", [pytest.param("ubuntu", id="one-part"), pytest.param("a:b::d", id="empty-part")]
)
def test_malformed_image_references_are_refused(text: str) -> None:
    """Neither a resource ID nor four marketplace parts: ValueError."""
    with pytest.raises(ValueError, match="not an image reference"):
        ImageReference.parse(text)


def test_image_reference_arm_body_nulls_unused_forms() -> None:
    """A PATCH body names the chosen form and nulls the others, so a merge cannot mix forms."""
    body = ImageReference(id="/img").to_arm()
    assert body["id"] == "/img"
    assert body["publisher"] is None
    assert body["communityGalleryImageId"] is None
    assert ImageReference(id="/A/B").same_image(ImageReference(id="/a/b"))


@pytest.mark.parametrize(
    ("identity_type", "system_assigned"),
    [
        pytest.param("SystemAssigned, UserAssigned", True, id="both"),
        pytest.param("SystemAssigned,UserAssigned", True, id="both-no-space"),
        pytest.param("UserAssigned", False, id="user-only"),
        pytest.param(None, False, id="absent"),
    ],
)
def test_resource_identities_from_parts(identity_type: str | None, system_assigned: bool) -> None:
    """The system-assigned flag is read from the type; user-assigned IDs are lowercased."""
    identities = ResourceIdentities.from_parts(identity_type, ["/Subscriptions/S/X"])
    assert identities.system_assigned is system_assigned
    assert identities.user_assigned == frozenset({"/subscriptions/s/x"})
