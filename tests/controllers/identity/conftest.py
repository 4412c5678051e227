"""Fixtures of the identity cluster tests: ``world`` (see ``helpers.World``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.conftest import Cluster
from tests.controllers.identity.helpers import World, world_for


@pytest.fixture
def world(cluster: Cluster, arm_emulator: ArmEmulator, namespace: str) -> Iterator[World]:
    with world_for(cluster, arm_emulator, namespace) as made:
        yield made
