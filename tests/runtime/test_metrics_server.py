"""/metrics behind authentication and authorization, decided by the real API server: 401 without
a token, 403 for a ServiceAccount without the reader role, 200 for one bound to
nodewright-metrics-reader; the manager itself holds only config/rbac/metrics_auth_role.yaml."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykube
import pytest
import yaml

from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.observe.metrics import HttpServer, Metrics
from nodewright.runtime.process.config import MetricsConfig
from nodewright.runtime.process.metrics_auth import MetricsAuthorizer
from nodewright.runtime.process.metrics_server import self_signed_certificate, serve_metrics
from tests.conftest import Cluster

RBAC = Path(__file__).resolve().parents[2] / "config" / "rbac"
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
CLUSTER_ROLE = Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING = Kind(
    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
UNVERIFIED = ssl.create_default_context()
UNVERIFIED.check_hostname = False
UNVERIFIED.verify_mode = ssl.CERT_NONE


def token_for(admin: Client, namespace: str, name: str) -> str:
    """A ServiceAccount (created here) and a short-lived token for it (TokenRequest)."""
    with contextlib.suppress(errors.AlreadyExists):
        admin.create(SERVICE_ACCOUNT, {"metadata": {"name": name}}, namespace)
    response = admin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(response.json()["status"]["token"])


def bind(admin: Client, role: str, namespace: str, account: str) -> str:
    """A ClusterRoleBinding of ``role`` to the ServiceAccount; returns the binding's name."""
    name = f"{role}-{namespace}-{account}"
    admin.create(
        CLUSTER_ROLE_BINDING,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )
    return name


def apply_cluster_role(admin: Client, path: Path, name: str) -> None:
    """Create or refresh the first ClusterRole of a config/rbac file under ``name``."""
    role = next(d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "ClusterRole")
    role["metadata"] = {"name": name}
    try:
        admin.create(CLUSTER_ROLE, role)
    except errors.AlreadyExists:
        role["metadata"]["resourceVersion"] = admin.get(CLUSTER_ROLE, name)["metadata"]["resourceVersion"]
        admin.update(CLUSTER_ROLE, role)


def allowed(admin: Client, namespace: str, account: str, *, group: str, resource: str, verb: str) -> bool:
    """What the RBAC authorizer answers now (bindings take a moment to reach it)."""
    attributes: dict[str, Any] = (
        {"nonResourceAttributes": {"path": resource, "verb": verb}}
        if resource.startswith("/")
        else {"resourceAttributes": {"group": group, "resource": resource, "verb": verb}}
    )
    review = admin.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": f"system:serviceaccount:{namespace}:{account}", **attributes},
        },
    ).json()
    return bool(review["status"].get("allowed"))


def wait_allowed(
    admin: Client, namespace: str, account: str, *, group: str, resource: str, verb: str
) -> None:
    deadline = time.monotonic() + 30
    while not allowed(admin, namespace, account, group=group, resource=resource, verb=verb):
        assert time.monotonic() < deadline, f"{account} never got {verb} {resource}"
        time.sleep(0.2)


def scrape(url: str, token: str | None, context: ssl.SSLContext = UNVERIFIED) -> tuple[int, str]:
    request = urllib.request.Request(url)  # noqa: S310 - an https URL this module builds
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:  # noqa: S310
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


@pytest.fixture
def secured(cluster: Cluster, namespace: str) -> Iterator[tuple[Client, HttpServer, dict[str, str]]]:
    """A secure metrics server whose API client is a ServiceAccount holding only the metrics
    auth role, plus tokens for a reader and for a stranger."""
    admin = Client.from_kubeconfig(cluster.kubeconfig)
    apply_cluster_role(admin, RBAC / "metrics_reader_role.yaml", "nodewright-metrics-reader")
    apply_cluster_role(admin, RBAC / "metrics_auth_role.yaml", "nodewright-metrics-auth-role")
    tokens = {account: token_for(admin, namespace, account) for account in ("manager", "reader", "stranger")}
    bindings = [
        bind(admin, "nodewright-metrics-auth-role", namespace, "manager"),
        bind(admin, "nodewright-metrics-reader", namespace, "reader"),
    ]
    for group, resource in (
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ):
        wait_allowed(admin, namespace, "manager", group=group, resource=resource, verb="create")
    wait_allowed(admin, namespace, "reader", group="", resource="/metrics", verb="get")
    kubeconfig = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in kubeconfig["users"]:
        user["user"] = {"token": tokens["manager"]}
    manager_client = Client.from_config(pykube.KubeConfig(kubeconfig))
    metrics = Metrics()
    metrics.controller_registered("secured", 1)
    server = serve_metrics(metrics, MetricsConfig(bind_address="127.0.0.1:0"), manager_client)
    try:
        yield admin, server, tokens
    finally:
        server.stop()
        metrics.shutdown()
        for name in bindings:
            admin.delete(CLUSTER_ROLE_BINDING, name, ignore_not_found=True)


def test_metrics_refuse_without_token_and_without_role_and_serve_the_reader(
    secured: tuple[Client, HttpServer, dict[str, str]],
) -> None:
    """401 with no token or a forged one, 403 for a real token without the role, 200 and the
    series for a token bound to nodewright-metrics-reader."""
    _, server, tokens = secured
    url = f"https://127.0.0.1:{server.port}/metrics"
    status, body = scrape(url, None)
    assert status == 401, body
    assert scrape(url, "not-a-token")[0] == 401
    status, body = scrape(url, tokens["stranger"])
    assert status == 403, body
    assert ":stranger" in body
    status, body = scrape(url, tokens["reader"])
    assert status == 200, body
    assert 'controller_runtime_max_concurrent_reconciles{controller="secured"} 1.0' in body
    assert scrape(f"https://127.0.0.1:{server.port}/other", tokens["reader"])[0] == 404


def test_secure_metrics_do_not_answer_plain_http(secured: tuple[Client, HttpServer, dict[str, str]]) -> None:
    """The secure port speaks only TLS: a plain-HTTP scrape gets no metrics."""
    _, server, tokens = secured
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics")
    request.add_header("Authorization", f"Bearer {tokens['reader']}")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(request, timeout=10).read()  # noqa: S310 - plain http on purpose


def test_mounted_certificate_is_served(cluster: Cluster, tmp_path: Path) -> None:
    """With certDir, the server presents tls.crt from it (a client trusting it verifies the host)."""
    certificate, key = self_signed_certificate(["localhost"])
    (tmp_path / "tls.crt").write_bytes(certificate)
    (tmp_path / "tls.key").write_bytes(key)
    metrics = Metrics()
    server = serve_metrics(
        metrics,
        MetricsConfig(bind_address="127.0.0.1:0", cert_dir=str(tmp_path)),
        Client.from_kubeconfig(cluster.kubeconfig),
    )
    try:
        trusting = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        status, _ = scrape(f"https://localhost:{server.port}/metrics", None, trusting)
        assert status == 401  # the handshake verified; the missing token is then refused
    finally:
        server.stop()
        metrics.shutdown()


def test_unreachable_api_server_answers_503_and_is_not_cached() -> None:
    """When the API server cannot be asked, a scrape gets 503 (not 200, not a cached refusal)."""
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "gone", "user": {"token": "unused"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
        "current-context": "gone",
    }
    authorizer = MetricsAuthorizer(Client.from_config(pykube.KubeConfig(kubeconfig)))
    assert authorizer.decide("Bearer some-token", "/metrics").status == 503
    assert authorizer.decide("Bearer some-token", "/metrics").status == 503
    assert authorizer.decide(None, "/metrics").status == 401
    assert authorizer.decide("Basic dXNlcjpwYXNz", "/metrics").status == 401
