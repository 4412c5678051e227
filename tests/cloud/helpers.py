"""Shared by every test that drives our cloud services against the ARM emulator (cloud and
controllers tests alike)."""

from __future__ import annotations

from typing import Any

from nodewright.cloud.budget import ArmBudgets
from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.emulator.images import MarketplaceImage
from nodewright.cloud.factory import Cloud, build_cloud
from nodewright.cloud.throttle import CallObserver


def cloud_for(
    emulator: ArmEmulator,
    observer: CallObserver | None = None,
    *,
    budgets: ArmBudgets | None = None,
    **overrides: Any,
) -> Cloud:
    """Our services over real SDK clients pointed at the emulator: static token, its CA, fast polls
    (and ARM request budgets of their own unless ``budgets`` are shared)."""
    options: dict[str, Any] = {
        "subscription_id": DEFAULT_SUBSCRIPTION,
        "arm_endpoint": emulator.endpoint,
        "credential": CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="emulator-token"),
        "ca_bundle": str(emulator.ca_file),
        "polling_interval": 0.0,
        "retry_backoff_factor": 0.01,
        "mutation_qps": 1000.0,
        "mutation_burst": 1000,
        "backoff_initial_seconds": 0.2,
    }
    options.update(overrides)
    return build_cloud(CloudSettings(**options), observer=observer, budgets=budgets)


# Marketplace images the cloud tests name; the emulator refuses unpublished images as Azure does.
TEST_IMAGES = (
    MarketplaceImage("p", "o", "s", ("1", *(f"1.0.{patch}" for patch in range(10)))),
    MarketplaceImage("Canonical", "ubuntu-24_04-lts", "server", ("24.04.0", "24.04.1")),
    MarketplaceImage("canonical", "ubuntu", "22_04-lts", ("22.04.0",)),
)


def publish_test_images(emulator: ArmEmulator) -> None:
    """Publish :data:`TEST_IMAGES` in the emulator's image catalog."""
    for image in TEST_IMAGES:
        emulator.estate.add_marketplace_image(image)
