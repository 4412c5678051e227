"""Shared fixtures: a real Kubernetes control plane for the test session, and a fresh namespace
per test.

The cluster is chosen in this order: ``KUBECONFIG`` if set; a k3s container through
testcontainers when a Docker engine answers and the pinned image is already present; else the
local binaries built by ``hack/build-controlplane.sh``: etcd and kube-apiserver with
kube-controller-manager, kube-scheduler and kwok beside them, a cluster that behaves like one
(Deployments roll, budgets are computed, pods are scheduled, kwok plays kubelet for simulated
nodes). Tests that use the cluster are marked ``cluster`` automatically.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pykube
import pytest

from nodewright.devenv import ControlPlane

K3S_IMAGE = "rancher/k3s:v1.34.1-k3s1"
CLUSTER_FIXTURES = {"cluster", "kube_api", "namespace", "control_plane_factory"}


@dataclass(frozen=True)
class Cluster:
    """How to reach the session's API server."""

    kubeconfig: Path
    source: str
    control_plane: ControlPlane | None = None


def _docker_k3s_available() -> bool:
    """True when a Docker engine answers and the pinned k3s image is already present."""
    if not os.path.exists("/var/run/docker.sock") and "DOCKER_HOST" not in os.environ:
        return False
    try:
        import docker  # type: ignore[import-untyped]  # noqa: PLC0415  # optional, only with an engine

        client = docker.from_env()
        client.ping()
        client.images.get(K3S_IMAGE)
    except Exception:
        return False
    return True


@contextlib.contextmanager
def _k3s_cluster(tmp: Path) -> Iterator[Path]:
    from testcontainers.k3s import K3SContainer  # noqa: PLC0415  # optional, only with an engine

    with K3SContainer(image=K3S_IMAGE) as k3s:
        path = tmp / "k3s.kubeconfig"
        path.write_text(k3s.config_yaml())
        yield path


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The session's real API server (see the module docstring for how it is chosen)."""
    env = os.environ.get("KUBECONFIG")
    if env:
        yield Cluster(kubeconfig=Path(env), source="KUBECONFIG")
        return
    if _docker_k3s_available():
        with _k3s_cluster(tmp_path_factory.mktemp("k3s")) as path:
            yield Cluster(kubeconfig=path, source="k3s")
        return
    with ControlPlane() as plane:
        yield Cluster(kubeconfig=plane.kubeconfig, source="local-binaries", control_plane=plane)


@pytest.fixture(scope="session")
def kube_api(cluster: Cluster) -> pykube.HTTPClient:
    """An admin pykube-ng client for the session's API server."""
    return pykube.HTTPClient(pykube.KubeConfig.from_file(str(cluster.kubeconfig)))


@pytest.fixture
def namespace(kube_api: pykube.HTTPClient) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (the namespace controller then removes
    its objects); tests scope their reads to their own namespace."""
    name = f"nw-{uuid.uuid4().hex[:10]}"
    pykube.Namespace(kube_api, {"metadata": {"name": name}}).create()
    yield name
    with contextlib.suppress(pykube.exceptions.ObjectDoesNotExist):
        pykube.Namespace(kube_api, {"metadata": {"name": name}}).delete()


@pytest.fixture
def control_plane_factory() -> Iterator[Callable[..., ControlPlane]]:
    """Start private control planes (for restarts, compaction); all are stopped afterwards. They
    are bare (etcd and kube-apiserver only) unless a test passes ``bare=False``."""
    started: list[ControlPlane] = []

    def start(**options: object) -> ControlPlane:
        plane = ControlPlane(**{"bare": True, **options})  # type: ignore[arg-type]
        started.append(plane)
        plane.start()
        return plane

    yield start
    for plane in started:
        plane.stop()


HEAVY_FILES_FIRST = (
    "tests/cloud/test_storm.py",
    "tests/devenv/test_prometheus.py",
    "tests/controllers/test_leadership_faults.py",
    "tests/hack/test_controlplane.py",
    "tests/devenv/test_worklock.py",
    "tests/controllers/test_main.py",
    "tests/controllers/node_network_config/test_pool.py",
    "tests/controllers/test_server_fence.py",
    "tests/runtime/test_informer.py",
    "tests/controllers/node_network_config/test_terminal_answers.py",
    "tests/config/test_rbac.py",
    "tests/ipam/test_allocation.py",
    "tests/controllers/test_status.py",
    "tests/devenv/test_demo.py",
    "tests/controllers/node_network_config/test_nic_watch.py",
)
"""The files that take longest (a full run's ``--durations``, each file's tests summed, heaviest
first; test_prometheus.py, about 285 s alone, failed to start in that run and is placed by a
run of its own). ``make test`` hands out whole files (``--dist loadfile``) in collection order
(``--no-loadscope-reorder``; xdist would otherwise hand out the files with the most tests first,
which left these few-test, minutes-long files to the end, one worker running the last of them
alone). Collected first, they start at once and the many short files fill in behind them, so
both workers end close together. Refresh the list when the slow files change."""


def _heavy_rank(item: pytest.Item) -> int:
    """Where ``item``'s file stands in :data:`HEAVY_FILES_FIRST` (every other file after)."""
    path = item.nodeid.split("::", 1)[0]
    return HEAVY_FILES_FIRST.index(path) if path in HEAVY_FILES_FIRST else len(HEAVY_FILES_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
    # A stable sort: each file's tests stay together and in their order, other files too.
    items.sort(key=_heavy_rank)


# --- ARM emulator fixtures (owned by cloud/emulator; appended section) -------------------------
# ``arm_emulator``: a fresh Azure Resource Manager emulator per test, on 127.0.0.1, port 0.
# See ``nodewright.cloud.emulator`` for its API (estate, faults, requests, client_options()).

from nodewright.cloud.emulator import ArmEmulator  # noqa: E402 - appended section
from nodewright.cloud.emulator.certificates import (  # noqa: E402 - appended section
    LoopbackCertificates,
    issue_loopback_certificates,
)


@pytest.fixture(scope="session")
def arm_emulator_certificates() -> LoopbackCertificates:
    """One CA and serving certificate for every emulator of the session (cheap reuse)."""
    return issue_loopback_certificates()


@pytest.fixture
def arm_emulator(arm_emulator_certificates: LoopbackCertificates, tmp_path: Path) -> Iterator[ArmEmulator]:
    """A started ARM emulator with empty state, no faults and an empty request log."""
    emulator = ArmEmulator(state_dir=tmp_path / "arm-emulator", certificates=arm_emulator_certificates)
    with emulator:
        yield emulator
