"""The cluster components beside the API server: kube-controller-manager, kube-scheduler and kwok
(the kubelet stand-in, see ``kwok``), each with its own client certificate and kubeconfig (users
``system:kube-controller-manager``, ``system:kube-scheduler`` and ``nodewright:kwok``), a serving
certificate from the local CA, and a ``/healthz`` over TLS on a free loopback port.

Owns what each needs before it starts: identities and kubeconfigs under the work directory,
kwok's Stage file and RBAC, and the command lines. The controller manager signs service-account
tokens with the API server's key and runs ``CONTROLLERS`` (each controller with its own service
account, as in a real cluster). ``ControlPlane`` spawns the processes and waits for health.

Side effects: writes files under the work directory; ``grant_kwok`` creates RBAC objects.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodewright.cloud.emulator.pki import CertificateAuthority, KeyPair
from nodewright.devenv.kwok import KWOK_USER, STAGES, kwok_arguments, kwok_rbac

__all__ = ["CONTROLLERS", "Component", "grant_kwok", "kubeconfig_document", "prepare_components"]

CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
)
"""kube-controller-manager's controllers in the local cluster (``--controllers``). Not the root CA
publisher: its ConfigMap in every namespace would stand in the way of tests that count theirs."""


@dataclass(frozen=True)
class Component:
    """One process to start: its name (also its log file), command line and health URL."""

    name: str
    arguments: list[str]
    health_url: str


def kubeconfig_document(server: str, ca_pem: bytes, user: str, identity: KeyPair) -> dict[str, Any]:
    """A kubeconfig for ``user`` authenticating with ``identity``'s client certificate."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "nodewright-local",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(identity.cert_pem),
                    "client-key-data": b64(identity.key_pem),
                },
            }
        ],
        "contexts": [{"name": "nodewright-local", "context": {"cluster": "nodewright-local", "user": user}}],
        "current-context": "nodewright-local",
    }


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings (kwok's templates) as readable literal blocks."""


def _literal(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_LiteralDumper.add_representer(str, _literal)


def _write_private(path: Path, data: bytes | str) -> None:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(0o600)


@dataclass(frozen=True)
class _Files:
    kubeconfig: Path
    cert: Path
    key: Path


def _identity(work_dir: Path, server: str, ca: CertificateAuthority, name: str, user: str) -> _Files:
    """Client identity (kubeconfig) and loopback serving certificate for component ``name``."""
    pki = work_dir / "pki"
    client = ca.issue(user, client=True)
    serving = ca.issue(name, dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True)
    files = _Files(work_dir / f"{name}.kubeconfig", pki / f"{name}.crt", pki / f"{name}.key")
    _write_private(files.kubeconfig, yaml.safe_dump(kubeconfig_document(server, ca.cert_pem, user, client)))
    _write_private(files.cert, serving.cert_pem)
    _write_private(files.key, serving.key_pem)
    return files


def _serving(files: _Files, port: int, ca_file: Path) -> list[str]:
    """Flags shared by the controller manager and the scheduler: TLS, delegated auth, no election."""
    return [
        f"--kubeconfig={files.kubeconfig}",
        f"--authentication-kubeconfig={files.kubeconfig}",
        f"--authorization-kubeconfig={files.kubeconfig}",
        f"--client-ca-file={ca_file}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={files.cert}",
        f"--tls-private-key-file={files.key}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def prepare_components(
    work_dir: Path,
    server: str,
    ca: CertificateAuthority,
    binaries: dict[str, Path],
    ports: dict[str, int],
) -> list[Component]:
    """Write every component's identity and configuration; return what to start.

    ``binaries`` and ``ports`` are keyed by component name (kube-controller-manager,
    kube-scheduler, kwok).
    """
    pki = work_dir / "pki"
    ca_file = pki / "ca.crt"
    manager = _identity(work_dir, server, ca, "kube-controller-manager", "system:kube-controller-manager")
    scheduler = _identity(work_dir, server, ca, "kube-scheduler", "system:kube-scheduler")
    kwok = _identity(work_dir, server, ca, "kwok", KWOK_USER)
    stages = work_dir / "kwok-stages.yaml"
    stages.write_text(yaml.dump_all(STAGES, Dumper=_LiteralDumper, sort_keys=False))

    def health(name: str) -> str:
        return f"https://127.0.0.1:{ports[name]}/healthz"

    manager_arguments = [
        str(binaries["kube-controller-manager"]),
        *_serving(manager, ports["kube-controller-manager"], ca_file),
        f"--controllers={','.join(CONTROLLERS)}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={ca_file}",
    ]
    scheduler_arguments = [
        str(binaries["kube-scheduler"]),
        *_serving(scheduler, ports["kube-scheduler"], ca_file),
    ]
    kwok_command = kwok_arguments(
        binaries["kwok"],
        kubeconfig=kwok.kubeconfig,
        stages=stages,
        port=ports["kwok"],
        cert=kwok.cert,
        key=kwok.key,
    )
    return [
        Component("kube-controller-manager", manager_arguments, health("kube-controller-manager")),
        Component("kube-scheduler", scheduler_arguments, health("kube-scheduler")),
        Component("kwok", kwok_command, health("kwok")),
    ]


def grant_kwok(server: str, admin: ssl.SSLContext, timeout: float = 30.0) -> None:
    """Create kwok's RBAC objects as the admin (existing ones are kept). The API server creates
    the kube-node-lease namespace shortly after it is ready, so a 404 there is retried."""
    deadline = time.monotonic() + timeout
    for item in kwok_rbac():
        namespace = item["metadata"].get("namespace")
        plural = item["kind"].lower() + "s"
        path = f"/apis/rbac.authorization.k8s.io/v1/{plural}"
        if namespace:
            path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}"
        body = json.dumps({"apiVersion": "rbac.authorization.k8s.io/v1", **item}).encode()
        while not _created(server + path, body, admin):
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {namespace} did not appear in time")
            time.sleep(0.2)


def _created(url: str, body: bytes, admin: ssl.SSLContext) -> bool:
    """POST ``body``; True once it exists (201 or 409), False while its namespace is missing."""
    request = urllib.request.Request(  # noqa: S310 - our own loopback API server
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=admin):  # noqa: S310
            return True
    except urllib.error.HTTPError as error:
        if error.code == 409:
            return True
        if error.code == 404:
            return False
        raise
