"""The local control plane: real objects round-trip, restarts keep data, and nothing is left running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pykube
import pytest
import yaml

from nodewright.devenv import ControlPlane
from tests.conftest import Cluster

KUBE_VERSION = "v1.34.4"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_creates_watches_and_deletes_an_object(kube_api: pykube.HTTPClient, namespace: str) -> None:
    """A ConfigMap created on the real API server is seen by a watch, then deleted."""
    seen: list[tuple[str, str]] = []
    listing = pykube.ConfigMap.objects(kube_api).filter(namespace=namespace)
    assert listing.response["items"] == []
    since = listing.response["metadata"]["resourceVersion"]

    def watch() -> None:
        query = pykube.ConfigMap.objects(kube_api).filter(namespace=namespace).watch(since=since)
        for event in query:
            seen.append((event.type, event.object.name))
            if event.type == "DELETED":
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    config_map = pykube.ConfigMap(
        kube_api, {"metadata": {"name": "greeting", "namespace": namespace}, "data": {"a": "1"}}
    )
    config_map.create()
    config_map.obj["data"]["a"] = "2"
    config_map.update()
    config_map.delete()
    thread.join(timeout=10)
    assert seen == [("ADDED", "greeting"), ("MODIFIED", "greeting"), ("DELETED", "greeting")]
    assert not pykube.ConfigMap(kube_api, {"metadata": {"name": "greeting", "namespace": namespace}}).exists()


def test_reports_the_pinned_kubernetes_version(cluster: Cluster, kube_api: pykube.HTTPClient) -> None:
    """The binaries built from Go modules carry the real version in /version."""
    if cluster.source != "local-binaries":
        pytest.skip(f"cluster comes from {cluster.source}, not from hack/build-controlplane.sh")
    version = kube_api.session.get(url=kube_api.url + "/version").json()
    assert version["gitVersion"] == KUBE_VERSION
    assert version["major"] == "1"
    assert version["minor"] == "34"


def test_rbac_authorization_is_enforced(cluster: Cluster, kube_api: pykube.HTTPClient) -> None:
    """A service account with no role binding is forbidden: RBAC is really on."""
    name = "nobody"
    pykube.ServiceAccount(kube_api, {"metadata": {"name": name, "namespace": "default"}}).create()
    try:
        response = kube_api.session.post(
            url=f"{kube_api.url}/api/v1/namespaces/default/serviceaccounts/{name}/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        response.raise_for_status()
        config = yaml.safe_load(cluster.kubeconfig.read_text())
        for user in config["users"]:
            user["user"] = {"token": response.json()["status"]["token"]}
        as_nobody = pykube.HTTPClient(pykube.KubeConfig(config))
        denied = as_nobody.session.get(url=f"{as_nobody.url}/api/v1/namespaces/default/configmaps")
        assert denied.status_code == 403
        assert denied.json()["reason"] == "Forbidden"
    finally:
        pykube.ServiceAccount(kube_api, {"metadata": {"name": name, "namespace": "default"}}).delete()


def test_restart_keeps_data_and_port(control_plane_factory: object) -> None:
    """restart_apiserver brings the API server back on the same port with etcd's data intact."""
    assert callable(control_plane_factory)
    plane: ControlPlane = control_plane_factory()
    api = pykube.HTTPClient(pykube.KubeConfig.from_file(str(plane.kubeconfig)))
    pykube.ConfigMap(api, {"metadata": {"name": "kept", "namespace": "default"}}).create()
    server, old_pid = plane.server, plane.apiserver_process.pid if plane.apiserver_process else 0
    plane.restart_apiserver(down_for=0.5)
    assert plane.server == server
    assert plane.apiserver_process is not None
    assert plane.apiserver_process.pid != old_pid
    assert not _alive(old_pid)
    assert pykube.ConfigMap(api, {"metadata": {"name": "kept", "namespace": "default"}}).exists()


@pytest.mark.slow
def test_session_fixture_leaves_no_process_behind(tmp_path: Path) -> None:
    """A pytest session using the cluster fixture ends with its etcd and kube-apiserver gone."""
    project = Path(__file__).resolve().parents[2]
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            from tests.conftest import Cluster, cluster  # the fixture itself, imported

            def test_probe(cluster: Cluster) -> None:
                assert cluster.control_plane is not None
                print("PIDS", *cluster.control_plane.pids(), "DIR", cluster.control_plane.work_dir)
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = str(project)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            f"--confcutdir={project / 'tests'}",
            f"--rootdir={project}",
            "-c",
            str(project / "pyproject.toml"),
            str(probe),
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if "PIDS" in line)
    words = line.split("PIDS", 1)[1].split()
    pids = [int(word) for word in words[: words.index("DIR")]]
    work_dir = Path(words[words.index("DIR") + 1])
    assert len(pids) == 2
    assert not [pid for pid in pids if _alive(pid)]
    assert not work_dir.exists()


@pytest.mark.slow
def test_control_plane_dies_with_a_killed_owner(tmp_path: Path) -> None:
    """When the process that started the control plane is SIGKILLed (no teardown runs), etcd and
    kube-apiserver go too: they were asked to die with their parent."""
    project = Path(__file__).resolve().parents[2]
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from nodewright.devenv import ControlPlane
            plane = ControlPlane()
            plane.start()
            print(*plane.pids(), flush=True)
            time.sleep(600)
            """
        )
    )
    owner = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=project,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(project)},
    )
    assert owner.stdout is not None
    with owner.stdout:
        pids = [int(word) for word in owner.stdout.readline().split()]
        assert len(pids) == 2
        assert all(_alive(pid) for pid in pids)
        owner.kill()
        owner.wait(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)]
