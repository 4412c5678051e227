"""The client's identities against the real API server: a token file read again after a 401 (a
rotated token), an exec plugin run once and again only on a 401 or past its expiry, the
in-cluster service account, and the auth providers Kubernetes removed refused clearly."""

from __future__ import annotations

import base64
import json
import stat
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pykube
import pytest
import yaml

from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.credentials import Credentials, CredentialsError, in_cluster_config
from nodewright.runtime.kube.kinds import Kind

SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


@pytest.fixture
def admin(cluster: Any) -> Client:
    return Client.from_kubeconfig(cluster.kubeconfig)


@pytest.fixture
def robot(admin: Client, namespace: str) -> tuple[str, str]:
    """A ServiceAccount and a token for it: (username, token)."""
    admin.create(SERVICE_ACCOUNT, {"metadata": {"name": "robot"}}, namespace)
    token = admin.service_account_token("robot", namespace, [API_AUDIENCE])
    return f"system:serviceaccount:{namespace}:robot", token


def who(client: Client) -> str:
    """The username the API server sees for ``client`` (SelfSubjectReview: any user may ask)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = client.request("POST", SELF_SUBJECT_REVIEWS, body=body).json()
    return str(answer["status"]["userInfo"]["username"])


def kubeconfig_for(cluster: Any, tmp_path: Path, user: dict[str, Any]) -> Path:
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    for entry in config["users"]:
        entry["user"] = user
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_rotated_token_file_is_read_again_after_a_401(
    cluster: Any, tmp_path: Path, robot: tuple[str, str]
) -> None:
    username, token = robot
    token_file = tmp_path / "token"
    token_file.write_text("not-a-real-token")
    client = Client.from_kubeconfig(kubeconfig_for(cluster, tmp_path, {"tokenFile": str(token_file)}))
    with pytest.raises(errors.Unauthorized):
        who(client)
    token_file.write_text(token + "\n")  # the kubelet rotated the projected token
    assert who(client) == username


def write_plugin(tmp_path: Path, expires_in: float | None) -> tuple[Path, Path, Path]:
    """An exec credential plugin that hands out the token in a file and logs each run."""
    token_file, runs = tmp_path / "plugin-token", tmp_path / "plugin-runs"
    runs.write_text("")
    expiry = ""
    if expires_in is not None:
        stamp = (datetime.now(UTC) + timedelta(seconds=expires_in)).strftime("%Y-%m-%dT%H:%M:%SZ")
        expiry = f', "expirationTimestamp": "{stamp}"'
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        textwrap.dedent(
            f"""\
            import json, os, pathlib
            info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
            with open({str(runs)!r}, "a") as log:
                log.write(info["apiVersion"] + "\\n")
            token = pathlib.Path({str(token_file)!r}).read_text().strip()
            print('{{"apiVersion": "' + info["apiVersion"] + '", "kind": "ExecCredential", '
                  '"status": {{"token": "' + token + '"{expiry}}}}}')
            """
        )
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    return plugin, token_file, runs


def exec_user(plugin: Path) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }


def test_an_exec_plugin_runs_once_and_again_only_after_a_401(
    cluster: Any, tmp_path: Path, robot: tuple[str, str]
) -> None:
    username, token = robot
    plugin, token_file, runs = write_plugin(tmp_path, expires_in=None)
    token_file.write_text("not-a-real-token")
    client = Client.from_kubeconfig(kubeconfig_for(cluster, tmp_path, exec_user(plugin)))
    with pytest.raises(errors.Unauthorized):
        who(client)
    assert runs.read_text().splitlines() == ["client.authentication.k8s.io/v1"] * 2  # built, then the 401
    token_file.write_text(token)
    for _ in range(5):
        assert who(client) == username
    assert len(runs.read_text().splitlines()) == 3  # one more, for the 401 of the stale token


def test_an_exec_token_is_fetched_again_once_it_expires(tmp_path: Path) -> None:
    plugin, token_file, runs = write_plugin(tmp_path, expires_in=600)
    token_file.write_text("first")
    now = [0.0]
    credentials = Credentials(exec_user(plugin), clock=lambda: now[0])
    assert credentials.header() == "Bearer first"
    token_file.write_text("second")
    now[0] = 590.0  # the stamp has whole seconds and the plugin takes a moment: not 599
    assert credentials.header() == "Bearer first"
    now[0] = 601.0
    assert credentials.header() == "Bearer second"
    assert len(runs.read_text().splitlines()) == 2


def test_a_token_file_is_read_again_each_minute(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    now = [0.0]
    credentials = Credentials({"tokenFile": str(token_file)}, clock=lambda: now[0])
    token_file.write_text("second\n")
    now[0] = 59.0
    assert credentials.header() == "Bearer first"
    now[0] = 60.0
    assert credentials.header() == "Bearer second"


def test_basic_authentication_header() -> None:
    header = Credentials({"username": "ada", "password": "pa:ss"}).header()
    assert header == "Basic " + base64.b64encode(b"ada:pa:ss").decode()


@pytest.mark.parametrize("provider", ["azure", "gcp", "oidc"])
def test_removed_auth_providers_are_refused_with_the_replacement_named(provider: str) -> None:
    with pytest.raises(CredentialsError, match="kubelogin") as caught:
        Credentials({"auth-provider": {"name": provider, "config": {}}})
    assert provider in str(caught.value)


def test_a_failing_exec_plugin_is_a_clear_error_without_its_output(tmp_path: Path) -> None:
    plugin = tmp_path / "broken.py"
    plugin.write_text("import sys\nprint('secret-token-material')\nsys.exit(3)\n")
    with pytest.raises(CredentialsError, match="failed: CalledProcessError") as caught:
        Credentials(exec_user(plugin))
    assert "secret-token-material" not in str(caught.value)


def test_in_cluster_config_reads_the_mounted_service_account(
    cluster: Any, tmp_path: Path, robot: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client.from_environment in a pod: server from the service variables, the mounted CA,
    and the mounted token as a token file."""
    username, token = robot
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = config["clusters"][0]["cluster"]
    host, port = server["server"].removeprefix("https://").rsplit(":", 1)
    mounted = tmp_path / "serviceaccount"
    mounted.mkdir()
    (mounted / "ca.crt").write_bytes(base64.b64decode(server["certificate-authority-data"]))
    (mounted / "token").write_text(token)
    (mounted / "namespace").write_text("robots")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    in_cluster = in_cluster_config(mounted)
    assert in_cluster.user == {"tokenFile": str(mounted / "token")}
    assert in_cluster.namespace == "robots"
    assert who(Client.from_config(in_cluster)) == username
    assert json.dumps(in_cluster.doc).count(token) == 0  # the token stays in its file


def test_a_token_file_missing_mid_rotation_keeps_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first")
    now = [0.0]
    credentials = Credentials({"tokenFile": str(token_file)}, clock=lambda: now[0])
    token_file.unlink()
    now[0] = 60.0
    assert credentials.header() == "Bearer first"
    token_file.write_text("second")
    now[0] = 64.0
    assert credentials.header() == "Bearer first"  # looked again 5 s after the miss, not before
    now[0] = 65.0
    assert credentials.header() == "Bearer second"


def test_a_plugin_that_starts_failing_is_an_unauthorized_error(tmp_path: Path) -> None:
    """The token expired and the plugin fails: requests raise the typed 401, nothing is sent."""
    plugin, token_file, runs = write_plugin(tmp_path, expires_in=-10)  # expired: run every time
    token_file.write_text("first")
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": exec_user(plugin)}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    client = Client.from_config(pykube.KubeConfig(doc))
    token_file.unlink()  # the plugin now exits non-zero
    with pytest.raises(errors.Unauthorized, match="exec credential plugin"):
        client.request("GET", "/version")
    assert len(runs.read_text().splitlines()) == 2  # built, then the run that failed
