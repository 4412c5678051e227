"""Fixtures of the node image cluster tests: a rollout bench per test (see ``support``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.conftest import Cluster
from tests.controllers.node_image.support import RolloutBench, rollout_bench


@pytest.fixture
def bench(cluster: Cluster, arm_emulator: ArmEmulator, namespace: str) -> Iterator[RolloutBench]:
    """Emulated scale sets, simulated nodes, the CRDs and a manager to start (closed after)."""
    with rollout_bench(cluster.kubeconfig, arm_emulator, namespace) as created:
        yield created
