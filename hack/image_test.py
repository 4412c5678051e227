"""``make image-test``: the manager image, run as users run it, against the local control plane.

Starts what ``make run`` starts (the real control plane, the ARM emulator with the sample estate,
the node simulator, the CRDs and the samples) but runs the manager from the image with podman:
as uid 65532, read-only root filesystem, all capabilities dropped, no new privileges, config,
kubeconfig and the emulator's CA mounted read-only. It waits for ``/readyz``, checks that
``/metrics`` (HTTPS) refuses a scrape without a token and serves one with the token of a
ServiceAccount bound to nodewright-metrics-reader, and waits until an AzureAssignedIdentity is
Assigned. Prints the image size and the start-to-ready time; exits 1 with the manager's log
on any failure. Side effects: processes, loopback ports, a temporary work directory, a container.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nodewright.devenv.demo import REPOSITORY, LocalEnvironment, manager_config
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind

IMAGE = os.environ.get("IMAGE", "localhost/nodewright:dev")
SEED = REPOSITORY / "config" / "emulator" / "seed-sample.yaml"
SAMPLES = REPOSITORY / "config" / "samples"
MOUNT = "/etc/nodewright"
FILE_KEYS = ("certificate-authority", "client-certificate", "client-key")
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
CLUSTER_ROLE = Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING = Kind(
    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
AZURE_ASSIGNED_IDENTITY = Kind("aadpodidentity.k8s.io/v1", "AzureAssignedIdentity", "azureassignedidentities")


def inline_kubeconfig(path: Path) -> dict[str, Any]:
    """The kubeconfig with every referenced file embedded (the container cannot see the host's)."""
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    for entry in [*config.get("clusters", []), *config.get("users", [])]:
        section = entry.get("cluster") or entry.get("user") or {}
        for key in FILE_KEYS:
            if key in section:
                data = (path.parent / section.pop(key)).read_bytes()
                section[f"{key}-data"] = base64.b64encode(data).decode()
    return config


class ContainerEnvironment(LocalEnvironment):
    """``make run``'s environment with the manager in a podman container from ``image``."""

    def __init__(self, work_dir: Path, image: str) -> None:
        super().__init__(work_dir, seed=SEED, samples=SAMPLES)
        self.image = image
        self.container = f"nodewright-image-test-{os.getpid()}"
        self.started_at = 0.0

    def _start_manager(self) -> None:
        assert self.plane is not None
        assert self.emulator is not None
        mount = self.work_dir / "container"
        mount.mkdir(mode=0o755)
        config = manager_config(self.emulator, self.metrics_port, self.health_port)
        for reconciler in config["reconcilers"].values():
            reconciler["options"]["cloud"]["caBundle"] = f"{MOUNT}/emulator-ca.pem"
        files = {
            "config.yaml": yaml.safe_dump(config, sort_keys=False),
            "kubeconfig": yaml.safe_dump(inline_kubeconfig(self.plane.kubeconfig)),
            "emulator-ca.pem": self.emulator.ca_file.read_text(),
        }
        for name, text in files.items():
            (mount / name).write_text(text)
            (mount / name).chmod(0o644)  # readable by uid 65532; the directory is deleted after
        log = (self.work_dir / "logs" / "manager.log").open("wb")
        self.started_at = time.monotonic()
        self.manager = subprocess.Popen(
            [
                *("podman", "run", "--rm", "--name", self.container, "--network", "host"),
                *("--read-only", "--user", "65532:65532", "--cap-drop", "ALL"),
                *("--security-opt", "no-new-privileges", "--volume", f"{mount}:{MOUNT}:ro"),
                *("--env", f"KUBECONFIG={MOUNT}/kubeconfig", self.image),
                *("run", "--config", f"{MOUNT}/config.yaml"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, environment: ContainerEnvironment
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        failure = environment.failure()
        if failure:
            raise RuntimeError(failure)
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def http_status(url: str, context: ssl.SSLContext | None = None, token: str = "") -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:  # noqa: S310 - our URLs
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def container_facts(name: str) -> dict[str, Any]:
    output = subprocess.run(
        ["podman", "inspect", "--format", "json", name],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    facts: dict[str, Any] = json.loads(output)[0]
    return facts


def image_size(image: str) -> int:
    output = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", image],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return int(output.strip())


def reader_token(client: Client) -> str:
    """A token of a ServiceAccount bound to the ClusterRole nodewright-metrics-reader."""
    role = yaml.safe_load((REPOSITORY / "config" / "rbac" / "metrics_reader_role.yaml").read_text())
    role["metadata"]["name"] = "nodewright-metrics-reader"
    with contextlib.suppress(errors.AlreadyExists):  # the local environment installs it for Prometheus
        client.create(CLUSTER_ROLE, role)
    client.create(SERVICE_ACCOUNT, {"metadata": {"name": "scraper"}}, "default")
    subject = {"kind": "ServiceAccount", "name": "scraper", "namespace": "default"}
    role_ref = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "nodewright-metrics-reader",
    }
    client.create(
        CLUSTER_ROLE_BINDING, {"metadata": {"name": "scraper"}, "roleRef": role_ref, "subjects": [subject]}
    )
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    response = client.request("POST", "/api/v1/namespaces/default/serviceaccounts/scraper/token", body=body)
    return str(response.json()["status"]["token"])


def check_metrics(client: Client, environment: ContainerEnvironment) -> None:
    """/metrics over HTTPS: 401 without a token, 200 with a reader's token (the container asks
    the API server with TokenReview and SubjectAccessReview)."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    url = f"https://127.0.0.1:{environment.metrics_port}/metrics"
    status = http_status(url, unverified)
    if status != 401:
        raise RuntimeError(f"/metrics without a token answered {status}, expected 401")
    token = reader_token(client)
    wait_for(lambda: http_status(url, unverified, token) == 200, 60, "/metrics 200 for a reader", environment)
    print("image-test: /metrics over HTTPS: 401 without a token, 200 with a nodewright-metrics-reader token")


def exercise(environment: ContainerEnvironment) -> float:
    """Wait for readiness, check the container's confinement, metrics and an identity."""
    health = f"http://127.0.0.1:{environment.health_port}"
    wait_for(lambda: http_status(f"{health}/readyz") == 200, 300, "/readyz", environment)
    ready = time.monotonic() - environment.started_at
    facts = container_facts(environment.container)
    user, read_only = facts["Config"]["User"], facts["HostConfig"]["ReadonlyRootfs"]
    print(f"image-test: container user={user} readOnlyRootfs={read_only}")
    if user != "65532:65532" or read_only is not True:
        raise RuntimeError(f"the container is not confined as asked: user={user} readOnlyRootfs={read_only}")
    client = environment.client
    assert client is not None
    check_metrics(client, environment)

    def assigned() -> bool:
        items = client.list(AZURE_ASSIGNED_IDENTITY).items
        return any((item.get("status") or {}).get("status") == "Assigned" for item in items)

    wait_for(assigned, 300, "an identity Assigned", environment)
    print(f"image-test: {environment.progress()}")
    return ready


def main() -> int:
    os.environ.setdefault("CONTAINERS_CONF", str(REPOSITORY / "hack" / "containers.conf"))
    size = image_size(IMAGE)
    with tempfile.TemporaryDirectory(prefix="nodewright-image-test-") as directory:
        environment = ContainerEnvironment(Path(directory), IMAGE)
        try:
            environment.start(lambda message: print(f"image-test: {message}", flush=True))
            ready = exercise(environment)
        except Exception as error:
            log = Path(directory) / "logs" / "manager.log"
            tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
            print(f"image-test: FAILED: {error}\n--- manager (container) log ---\n{tail}", file=sys.stderr)
            return 1
        finally:
            environment.stop()
    print(f"image-test: passed; image {IMAGE} {size / 1e6:.0f} MB, container start to ready {ready:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
