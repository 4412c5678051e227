"""Fixtures of the federation cluster tests: ``federation`` (see ``helpers.Federation``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nodewright.api.aadpodidentity.v1 import RESOURCES
from nodewright.cloud.emulator import ArmEmulator
from nodewright.devenv.crds import install_crds
from nodewright.runtime.kube.client import Client
from tests.conftest import Cluster
from tests.controllers.federation.helpers import Federation
from tests.controllers.identity.helpers import World


@pytest.fixture
def federation(cluster: Cluster, arm_emulator: ArmEmulator, namespace: str) -> Iterator[Federation]:
    client = Client.from_kubeconfig(cluster.kubeconfig)
    install_crds(client, RESOURCES, timeout=30)
    made = Federation(World(client=client, emulator=arm_emulator, cluster=cluster, namespace=namespace))
    try:
        yield made
    finally:
        made.cleanup()
