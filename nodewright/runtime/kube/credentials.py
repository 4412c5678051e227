"""Who the API client is: a kubeconfig user turned into a request header and TLS material.

Owns ``Credentials``, built once from the user entry of a pykube-ng ``KubeConfig``:

- ``token``: a bearer token, as given;
- ``tokenFile``, and the in-cluster service account (``in_cluster_config``): the file is read
  again at most once a minute, as client-go does, so a rotated projected token is picked up
  without a restart;
- ``username`` and ``password``: basic authentication;
- ``client-certificate`` and ``client-key`` (file or ``-data``): loaded into the TLS context by
  ``load_client_certificate``;
- ``exec``: a credential plugin (``client.authentication.k8s.io`` v1, v1beta1 or v1alpha1), run
  once and again only when its token's ``expirationTimestamp`` has passed or the server answered
  401 (``refresh``); never per request.

``auth-provider`` entries (the in-tree gcp, azure and oidc plugins Kubernetes removed in 1.26) are
refused with an error that names the exec plugin to use instead (kubelogin on AKS).

Side effects: reads token files; runs an exec plugin's command; ``load_client_certificate``
writes key material to a private temporary directory and deletes it right after loading.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pykube

__all__ = ["SERVICE_ACCOUNT_DIR", "TOKEN_FILE_PERIOD", "Credentials", "CredentialsError", "in_cluster_config"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_PERIOD = 60.0
"""Seconds a token read from a file is used before the file is read again."""
TOKEN_FILE_RETRY = 5.0
"""Seconds before a token file that could not be read is tried again (the old token is kept)."""
EXEC_API_VERSIONS = frozenset(
    f"client.authentication.k8s.io/{version}" for version in ("v1", "v1beta1", "v1alpha1")
)
EXEC_TIMEOUT = 60.0


class CredentialsError(Exception):
    """The kubeconfig's user cannot be used (an unsupported kind, or a plugin that failed)."""


def in_cluster_config(directory: Path = SERVICE_ACCOUNT_DIR) -> pykube.KubeConfig:
    """The config of a pod: the API server from ``KUBERNETES_SERVICE_HOST``/``_PORT``, the
    mounted CA, and the mounted service-account token as a ``tokenFile`` (read again as the
    kubelet rotates it)."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    namespace_file = directory / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.exists() else "default"
    doc = {
        "clusters": [
            {
                "name": "in-cluster",
                "cluster": {"server": server, "certificate-authority": str(directory / "ca.crt")},
            }
        ],
        "users": [{"name": "in-cluster", "user": {"tokenFile": str(directory / "token")}}],
        "contexts": [
            {
                "name": "in-cluster",
                "context": {"cluster": "in-cluster", "user": "in-cluster", "namespace": namespace},
            }
        ],
        "current-context": "in-cluster",
    }
    return pykube.KubeConfig(doc)


class Credentials:
    """The Authorization header of the next request, cheap to ask for; thread-safe."""

    def __init__(self, user: Mapping[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        if "auth-provider" in user:
            name = (user.get("auth-provider") or {}).get("name", "")
            raise CredentialsError(
                f"The kubeconfig user's auth-provider {name!r} is not supported (Kubernetes removed "
                "the in-tree auth providers in 1.26): use an exec credential plugin such as kubelogin"
            )
        self._user = user
        self._clock = clock
        self._lock = threading.Lock()
        self._header: str | None = None
        self._valid_until = float("inf")
        self._refreshable = "tokenFile" in user or "exec" in user
        self._client_certificate: tuple[bytes, bytes] | None = _certificate_of(user)
        self.certificate_generation = 0
        """Counts changes of the client certificate (an exec plugin's): TLS contexts made before
        the last change present a stale one."""
        self._load()

    def header(self) -> str | None:
        """The ``Authorization`` value for the next request, or None (TLS identity only)."""
        if self._clock() >= self._valid_until:
            with self._lock:
                if self._clock() >= self._valid_until:
                    self._load()
        return self._header

    def refresh(self) -> bool:
        """Read the token file or run the plugin again (after a 401); whether anything changed."""
        if not self._refreshable:
            return False
        with self._lock:
            before = (self._header, self._client_certificate)
            self._load()
            return (self._header, self._client_certificate) != before

    def load_client_certificate(self, context: ssl.SSLContext) -> None:
        """Present the user's client certificate (if any) on connections made with ``context``."""
        if self._client_certificate is None:
            return
        certificate, key = self._client_certificate
        directory = tempfile.mkdtemp(prefix="nodewright-tls-")  # mode 0700
        try:
            certificate_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
            for path, data in ((certificate_path, certificate), (key_path, key)):
                path.touch(mode=0o600)
                path.write_bytes(data)
            context.load_cert_chain(str(certificate_path), str(key_path))
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _load(self) -> None:
        user = self._user
        if "exec" in user:
            self._load_exec(user["exec"])
        elif "tokenFile" in user:
            self._load_token_file(Path(user["tokenFile"]))
        elif user.get("token"):
            self._header = f"Bearer {user['token']}"
        elif user.get("username") and user.get("password"):
            pair = f"{user['username']}:{user['password']}".encode()
            self._header = "Basic " + base64.b64encode(pair).decode()

    def _load_token_file(self, path: Path) -> None:
        try:
            token = path.read_text().strip()
        except OSError as error:
            if self._header is None:
                raise CredentialsError(
                    f"The token file {str(path)!r} cannot be read: {error.strerror}"
                ) from error
            token = ""  # mid-rotation: keep the token we have and look again soon
        if token:
            self._header = f"Bearer {token}"
        self._valid_until = self._clock() + (TOKEN_FILE_PERIOD if token else TOKEN_FILE_RETRY)

    def _load_exec(self, plugin: Mapping[str, Any]) -> None:
        status = _run_exec_plugin(plugin)
        if status.get("token"):
            self._header = f"Bearer {status['token']}"
        elif status.get("clientCertificateData") and status.get("clientKeyData"):
            self._header = None
            certificate = (
                str(status["clientCertificateData"]).encode(),
                str(status["clientKeyData"]).encode(),
            )
            if certificate != self._client_certificate:
                self._client_certificate = certificate
                self.certificate_generation += 1
        else:
            raise CredentialsError(
                "The exec credential plugin returned neither a token nor a client certificate"
            )
        self._valid_until = self._clock() + _seconds_until(status.get("expirationTimestamp"))


def _certificate_of(user: Mapping[str, Any]) -> tuple[bytes, bytes] | None:
    certificate, key = user.get("client-certificate"), user.get("client-key")
    if certificate is None or key is None:
        return None
    return certificate.bytes(), key.bytes()


def _run_exec_plugin(plugin: Mapping[str, Any]) -> dict[str, Any]:
    api_version = str(plugin.get("apiVersion", ""))
    if api_version not in EXEC_API_VERSIONS:
        raise CredentialsError(f"The exec credential plugin's apiVersion {api_version!r} is not supported")
    environment = dict(os.environ)
    for variable in plugin.get("env") or []:
        environment[str(variable["name"])] = str(variable["value"])
    request = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    environment["KUBERNETES_EXEC_INFO"] = json.dumps(request)
    command = [str(plugin["command"]), *[str(argument) for argument in plugin.get("args") or []]]
    try:
        output = subprocess.run(
            command,
            env=environment,
            capture_output=True,
            check=True,
            timeout=EXEC_TIMEOUT,
            stdin=subprocess.DEVNULL,
        ).stdout
        status = json.loads(output).get("status") or {}
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        raise CredentialsError(
            f"The exec credential plugin {command[0]!r} failed: {type(error).__name__}"
        ) from error
    if not isinstance(status, dict):
        raise CredentialsError(f"The exec credential plugin {command[0]!r} returned no status")
    return status


def _seconds_until(timestamp: object) -> float:
    """Monotonic seconds until an RFC 3339 ``expirationTimestamp``, or forever if there is none."""
    if not isinstance(timestamp, str) or not timestamp:
        return float("inf")
    expires = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    return max(0.0, expires - time.time())
