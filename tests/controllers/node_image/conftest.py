"""Fixtures of the node image cluster tests: a rollout bench per test (see ``support``), with the
rollout invariant (``invariants``) checked at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodewright.cloud.emulator import ArmEmulator
from tests.conftest import Cluster
from tests.controllers.node_image.invariants import assert_complete_means_whole
from tests.controllers.node_image.support import RolloutBench, rollout_bench


@pytest.fixture
def bench(cluster: Cluster, arm_emulator: ArmEmulator, namespace: str) -> Iterator[RolloutBench]:
    """Emulated scale sets, simulated nodes, the CRDs and a manager to start (closed after, once
    the rollout invariant is checked: a NodeImage reporting Complete owns only whole pools)."""
    with rollout_bench(cluster.kubeconfig, arm_emulator, namespace) as created:
        yield created
        assert_complete_means_whole(created)
