"""Shared by every test that drives our cloud services against the ARM emulator (cloud and
controllers tests alike)."""

from __future__ import annotations

from typing import Any

from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.cloud.factory import Cloud, build_cloud
from nodewright.cloud.throttle import CallObserver


def cloud_for(emulator: ArmEmulator, observer: CallObserver | None = None, **overrides: Any) -> Cloud:
    """Our services over real SDK clients pointed at the emulator: static token, its CA, fast polls."""
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
    return build_cloud(CloudSettings(**options), observer=observer)
