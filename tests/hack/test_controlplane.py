"""The local control plane: real objects round-trip, restarts keep data, the controllers,
scheduler and kwok make workloads run, and nothing is left running."""

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
from nodewright.devenv.kwok import KWOK_USER, MANAGED_NODE_LABEL
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD, POD_DISRUPTION_BUDGET, Kind
from tests.conftest import Cluster

KUBE_VERSION = "v1.34.4"
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
ACCESS_REVIEW = Kind(
    "authorization.k8s.io/v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False
)


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


def _wait_for(predicate: object, timeout: float = 60.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def test_a_deployment_runs_and_its_budget_is_computed(cluster: Cluster, namespace: str) -> None:
    """On a Node kwok manages, a Deployment's pods are created (ReplicaSet controller), scheduled
    (kube-scheduler), Running and Ready (kwok), and the disruption controller computes the
    budget's status; deleting one pod brings a replacement."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    node_name = f"kwok-{namespace}"
    node_labels = {MANAGED_NODE_LABEL: namespace, "kubernetes.io/hostname": node_name}
    client.create(NODE, {"metadata": {"name": node_name, "labels": node_labels}})
    try:
        labels = {"app": "web"}
        client.create(
            DEPLOYMENT,
            {
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {
                    "replicas": 3,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "nodeSelector": {"kubernetes.io/hostname": node_name},
                            "containers": [{"name": "c", "image": "busybox"}],
                        },
                    },
                },
            },
        )
        client.create(
            POD_DISRUPTION_BUDGET,
            {
                "metadata": {"name": "web", "namespace": namespace},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}},
            },
        )

        def budget() -> tuple[int, int, int]:
            status = client.get(POD_DISRUPTION_BUDGET, "web", namespace).get("status") or {}
            return (
                status.get("currentHealthy", 0),
                status.get("desiredHealthy", 0),
                status.get("disruptionsAllowed", 0),
            )

        _wait_for(lambda: budget() == (3, 2, 1))
        pods = client.list(POD, namespace).items
        assert {p["spec"]["nodeName"] for p in pods} == {node_name}
        assert all(p["status"]["phase"] == "Running" for p in pods)
        client.delete(POD, pods[0]["metadata"]["name"], namespace)
        _wait_for(
            lambda: budget() == (3, 2, 1) and pods[0]["metadata"]["name"] not in _names(client, namespace)
        )
    finally:
        client.delete(NODE, node_name, ignore_not_found=True)


def _names(client: Client, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in client.list(POD, namespace).items}


@pytest.mark.parametrize(
    ("resource", "verb", "allowed"),
    [
        pytest.param({"resource": "pods", "subresource": "status"}, "patch", True, id="pod-status"),
        pytest.param({"resource": "pods"}, "delete", True, id="pod-delete"),
        pytest.param({"resource": "nodes", "subresource": "status"}, "patch", True, id="node-status"),
        pytest.param(
            {"group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-node-lease"},
            "update",
            True,
            id="node-lease",
        ),
        pytest.param({"resource": "pods"}, "create", False, id="no-pod-create"),
        pytest.param({"resource": "nodes"}, "delete", False, id="no-node-delete"),
        pytest.param({"resource": "secrets"}, "list", False, id="no-secrets"),
        pytest.param(
            {"group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-system"},
            "update",
            False,
            id="no-other-leases",
        ),
    ],
)
def test_kwok_has_a_kubelets_rights_and_no_more(
    cluster: Cluster, resource: dict[str, str], verb: str, allowed: bool
) -> None:
    """kwok's user may do what a kubelet does to nodes, pods and node Leases, nothing else."""
    client = Client.from_kubeconfig(cluster.kubeconfig)
    review = client.create(
        ACCESS_REVIEW,
        {"spec": {"user": KWOK_USER, "resourceAttributes": {**resource, "verb": verb}}},
    )
    assert review["status"].get("allowed", False) is allowed


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
    """A pytest session using the cluster fixture ends with every process it started gone (etcd,
    kube-apiserver, kube-controller-manager, kube-scheduler, kwok)."""
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
    assert len(pids) == 5
    assert not [pid for pid in pids if _alive(pid)]
    assert not work_dir.exists()


@pytest.mark.slow
def test_control_plane_dies_with_a_killed_owner(tmp_path: Path) -> None:
    """When the process that started the control plane is SIGKILLed (no teardown runs), etcd,
    kube-apiserver, kube-controller-manager, kube-scheduler and kwok go too: each was asked to die
    with its parent."""
    project = Path(__file__).resolve().parents[2]
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from nodewright.devenv import ControlPlane
            plane = ControlPlane()
            plane.start()
            names = [str(plane.etcd_process.args[0]), str(plane.apiserver_process.args[0])]
            names += [str(p.args[0]) for p in plane.component_processes.values()]
            print(*plane.pids(), *names, flush=True)
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
        words = owner.stdout.readline().split()
        pids = [int(word) for word in words[:5]]
        names = sorted(Path(word).name for word in words[5:])
        assert names == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
        assert all(_alive(pid) for pid in pids)
        owner.kill()
        owner.wait(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)]
