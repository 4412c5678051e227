"""A real Prometheus for the local environment, scraping the manager as a cluster's would.

Owns ``Prometheus`` (the ``prometheus`` binary built by hack/build-prometheus.sh, started on
loopback with the scrape config of ``scrape_config`` and config/prometheus/rules.yaml, and its HTTP
API: ``query``, ``targets``, ``alerts``) and ``grant_metrics_reader`` / ``scraper_token``: a
ServiceAccount bound to the ClusterRole ``nodewright-metrics-reader`` (config/rbac's
metrics_reader_role.yaml) and a token of it from the TokenRequest API, which Prometheus sends as
its bearer token: the manager checks it with a TokenReview and a SubjectAccessReview, as it does
in a cluster. The manager serves a self-signed certificate here, so the scrape skips verification
(``insecure_skip_verify``); in a cluster give Prometheus the CA of ``metrics.certDir``'s
certificate instead (docs/observability.md). Side effects: a process, a loopback port, files
under the work directory, ServiceAccounts and RBAC objects in the cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from nodewright.devenv.controlplane import free_port, terminate_process_group
from nodewright.devenv.paths import DEFAULT_CACHE
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind

__all__ = [
    "METRICS_READER_ROLE",
    "RULES",
    "Prometheus",
    "PrometheusMissingError",
    "grant_metrics_reader",
    "scrape_config",
    "scraper_token",
]

REPOSITORY = Path(__file__).resolve().parents[2]
RULES = REPOSITORY / "config" / "prometheus" / "rules.yaml"
METRICS_READER_ROLE = "nodewright-metrics-reader"
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
CLUSTER_ROLE = Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING = Kind(
    "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
SCRAPE_INTERVAL = "5s"
"""Scrape and rule evaluation interval: short, so that `make run` and the tests see data soon."""


class PrometheusMissingError(RuntimeError):
    """The prometheus binary is not built (``make prometheus`` or hack/build-prometheus.sh)."""


def binary(name: str = "prometheus") -> Path:
    return Path(os.environ.get("NODEWRIGHT_BIN", DEFAULT_CACHE / "bin")) / name


def _create(client: Client, kind: Kind, body: dict[str, Any], namespace: str | None = None) -> None:
    with contextlib.suppress(errors.AlreadyExists):
        client.create(kind, body, namespace)


def grant_metrics_reader(client: Client, name: str, namespace: str, *, bound: bool = True) -> None:
    """A ServiceAccount ``name``, bound (unless ``bound`` is False) to ``nodewright-metrics-reader``,
    which is created from config/rbac if missing (side effect: creates objects)."""
    role = yaml.safe_load((REPOSITORY / "config" / "rbac" / "metrics_reader_role.yaml").read_text())
    role["metadata"]["name"] = METRICS_READER_ROLE
    _create(client, CLUSTER_ROLE, role)
    _create(client, SERVICE_ACCOUNT, {"metadata": {"name": name, "namespace": namespace}}, namespace)
    if bound:
        binding = {
            "metadata": {"name": f"{METRICS_READER_ROLE}-{namespace}-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        _create(client, CLUSTER_ROLE_BINDING, binding)


def scraper_token(client: Client, name: str, namespace: str, path: Path, hours: int = 24) -> Path:
    """Write a token of the ServiceAccount to ``path`` (mode 0600) for Prometheus' credentials_file."""
    token = client.service_account_token(name, namespace, audiences=[], expiration_seconds=hours * 3600)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(token)
    return path


def scrape_job(job: str, target: str, token_file: Path) -> dict[str, Any]:
    """One HTTPS scrape job with a ServiceAccount's bearer token from a file."""
    return {
        "job_name": job,
        "scheme": "https",
        # The demo's manager serves a self-signed certificate; in a cluster set ca_file instead.
        "tls_config": {"insecure_skip_verify": True},
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "static_configs": [{"targets": [target]}],
    }


def scrape_config(jobs: list[dict[str, Any]], rules: Path = RULES) -> dict[str, Any]:
    """The whole prometheus.yml: the jobs, the alert rules, a 5 s scrape and evaluation interval."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(rules)],
        "scrape_configs": jobs,
    }


class Prometheus:
    """A ``prometheus`` process on loopback with a given config, and its HTTP API."""

    def __init__(self, work_dir: Path, config: dict[str, Any], log_file: Path | None = None) -> None:
        self.work_dir = work_dir
        self.config = config
        self.log_file = log_file or work_dir / "prometheus.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Write the config, start the process and wait until it is ready (side effects)."""
        executable = binary()
        if not executable.exists():
            raise PrometheusMissingError(
                f"{executable} is missing: run `make prometheus` (hack/build-prometheus.sh)"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        config_file = self.work_dir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(self.config, sort_keys=False))
        log = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self.process = subprocess.Popen(
                [
                    str(executable),
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={self.work_dir / 'prometheus-data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(log)
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with code {self.process.returncode} ({self.log_file})")
            ready = f"{self.url}/-/ready"
            with contextlib.suppress(OSError), urllib.request.urlopen(ready, timeout=2) as answer:  # noqa: S310
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"prometheus was not ready within {timeout} s")

    def api(self, path: str, **parameters: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (raises on an error answer)."""
        query = f"?{urllib.parse.urlencode(parameters)}" if parameters else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=30) as answer:  # noqa: S310
            body = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus /api/v1/{path}: {body}")
        return body["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        """An instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
        return list(self.api("query", query=expression)["result"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 20 s); safe to call twice."""
        terminate_process_group(self.process, grace=20, after_kill=10)
