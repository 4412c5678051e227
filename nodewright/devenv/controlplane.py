"""A real Kubernetes control plane on loopback: etcd plus kube-apiserver, started as processes,
and beside them (unless ``bare``) kube-controller-manager, kube-scheduler and kwok (see
``components``), so that the local cluster behaves like one.

Owns the process lifecycle (start, readiness through ``/readyz``, API-server restart on the same
port, teardown that leaves no process behind), the throwaway PKI written to a work directory,
and the admin kubeconfig. The binaries come from ``hack/build-controlplane.sh`` (built from Go
modules into a cache directory); ``find_binaries`` locates them.

Side effects: spawns processes, writes files under its work directory, opens loopback ports.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import yaml
from cryptography.hazmat.primitives.asymmetric import ec

from nodewright.cloud.emulator.pki import CertificateAuthority, KeyPair, private_key_pem, public_key_pem
from nodewright.devenv.components import Component, grant_kwok, kubeconfig_document, prepare_components
from nodewright.devenv.paths import DEFAULT_CACHE

__all__ = ["ControlPlane", "ControlPlaneError", "find_binaries", "terminate_process_group"]

START_TIMEOUT = 60.0
SERVICE_CIDR = "10.96.0.0/16"


class ControlPlaneError(RuntimeError):
    """The control plane could not be found, started or stopped."""


COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok")
"""The processes a full (not bare) control plane runs beside etcd and kube-apiserver."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    components: dict[str, Path] | None = None
    """By name (``COMPONENTS``); None when one of them is not built."""


def _missing(paths: list[Path]) -> ControlPlaneError:
    return ControlPlaneError(
        f"control-plane binaries not found ({', '.join(map(str, paths))}); build them with "
        "hack/build-controlplane.sh"
    )


def find_binaries(bin_dir: Path | None = None) -> Binaries:
    """Locate etcd, kube-apiserver and the components: ``$NODEWRIGHT_BIN``, else the build cache."""
    directory = bin_dir or Path(os.environ.get("NODEWRIGHT_BIN", DEFAULT_CACHE / "bin"))
    etcd, apiserver = directory / "etcd", directory / "kube-apiserver"
    missing = [p for p in (etcd, apiserver) if not os.access(p, os.X_OK)]
    if missing:
        raise _missing(missing)
    components = {name: directory / name for name in COMPONENTS}
    built = all(os.access(path, os.X_OK) for path in components.values())
    return Binaries(etcd=etcd, kube_apiserver=apiserver, components=components if built else None)


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ControlPlane:
    """etcd and kube-apiserver on free loopback ports, with RBAC and an admin kubeconfig.

    Unless ``bare``, kube-controller-manager, kube-scheduler and kwok run too, each ready when
    its ``/healthz`` answers; ``bare`` gives a lone API server (faster, for tests of the API).
    ``etcd_compaction_interval`` (seconds) makes the API server compact etcd that often, so
    that tests can provoke 410 Gone; ``watch_cache`` False sends watches straight to etcd.
    ``audit_policy`` (the YAML of an ``audit.k8s.io/v1`` Policy) turns on the audit log, one JSON
    event per line at ``audit_log`` (blocking mode: an event is written before the response).
    ``user_kubeconfig(name)`` issues a client certificate for one more user (attribution).
    """

    def __init__(
        self,
        *,
        work_dir: Path | None = None,
        binaries: Binaries | None = None,
        bare: bool = False,
        etcd_compaction_interval: float | None = None,
        watch_cache: bool = True,
        extra_apiserver_args: tuple[str, ...] = (),
        audit_policy: str | None = None,
    ) -> None:
        self._binaries = binaries
        self.bare = bare
        self.component_processes: dict[str, subprocess.Popen[bytes]] = {}
        self._owns_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="nodewright-cp-"))
        self.etcd_compaction_interval = etcd_compaction_interval
        self.watch_cache = watch_cache
        self.extra_apiserver_args = extra_apiserver_args
        self.audit_policy = audit_policy
        self.etcd_port = 0
        self.apiserver_port = 0
        self.etcd_process: subprocess.Popen[bytes] | None = None
        self.apiserver_process: subprocess.Popen[bytes] | None = None
        self._admin: KeyPair | None = None
        self.ca: CertificateAuthority | None = None
        self.service_account_key_pem = b""

    # ---- paths and addresses -------------------------------------------------------------
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.work_dir / "pki" / "ca.crt"

    @property
    def audit_log(self) -> Path:
        """The audit log (JSON lines), written only when ``audit_policy`` was given."""
        return self.work_dir / "logs" / "audit.log"

    def user_kubeconfig(self, name: str, groups: tuple[str, ...] = (), server: str | None = None) -> Path:
        """Write a kubeconfig for user ``name`` (a new client certificate, ``groups`` as its
        organisations) that talks to ``server`` (default: this API server); returns its path."""
        assert self.ca is not None, "start the control plane first"
        pair = self.ca.issue(name, organizations=groups, client=True)
        config = kubeconfig_document(server or self.server, self.ca.cert_pem, name, pair)
        path = self.work_dir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def pids(self) -> list[int]:
        processes = [self.etcd_process, self.apiserver_process, *self.component_processes.values()]
        return [p.pid for p in processes if p is not None]

    # ---- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start etcd, then kube-apiserver, and wait until ``/readyz`` answers 200."""
        binaries = self._binaries or find_binaries()
        self._binaries = binaries
        deadline = time.monotonic() + timeout
        try:
            self._write_pki()
            self._start_etcd(binaries.etcd, deadline)
            self.apiserver_port = free_port()
            self._start_apiserver(deadline)
            self._write_kubeconfig()
            if not self.bare:
                self._start_components(deadline)
        except BaseException:
            self.stop()
            raise

    def restart_apiserver(self, timeout: float = START_TIMEOUT, down_for: float = 0.0) -> None:
        """Stop kube-apiserver and start it again on the same port (etcd keeps its data)."""
        terminate_process_group(self.apiserver_process)
        self.apiserver_process = None
        if down_for:
            time.sleep(down_for)
        self._start_apiserver(time.monotonic() + timeout)

    def stop(self) -> None:
        """Stop every process and remove the work directory; safe to call twice."""
        for process in self.component_processes.values():
            terminate_process_group(process)
        self.component_processes = {}
        terminate_process_group(self.apiserver_process)
        terminate_process_group(self.etcd_process)
        self.apiserver_process = None
        self.etcd_process = None
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # ---- internals ------------------------------------------------------------------------
    def _write_pki(self) -> None:
        pki = self.work_dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority()
        self.ca = ca
        serving = ca.issue(
            "kube-apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ip_addresses=("127.0.0.1", "10.96.0.1"),
            server=True,
        )
        self._admin = ca.issue("nodewright-admin", organizations=("system:masters",), client=True)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self.service_account_key_pem = private_key_pem(sa_key)
        files = {
            "ca.crt": ca.cert_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "admin.crt": self._admin.cert_pem,
            "admin.key": self._admin.key_pem,
            "sa.key": self.service_account_key_pem,
            "sa.pub": public_key_pem(sa_key),
        }
        for name, data in files.items():
            path = pki / name
            path.write_bytes(data)
            path.chmod(0o600)

    def _log(self, name: str) -> int:
        logs = self.work_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return os.open(logs / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = self._log(name)
        # Linux ties the parent-death signal to the thread that forks: only from the main thread
        # does it mean "when this process dies" (a killed test run then leaves nothing behind).
        die_with_us = (
            _terminate_with_parent if threading.current_thread() is threading.main_thread() else None
        )
        try:
            return subprocess.Popen(
                args,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_us,  # noqa: PLW1509 - only prctl, async-signal-safe
            )
        finally:
            os.close(log)

    def _start_etcd(self, etcd: Path, deadline: float) -> None:
        self.etcd_port = free_port()
        peer_port = free_port()
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        self.etcd_process = self._spawn(
            "etcd",
            [
                str(etcd),
                "--name=nodewright",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=nodewright=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        self._wait(lambda: _http_ok(f"{client_url}/health", None), deadline, "etcd", self.etcd_process)

    def _start_apiserver(self, deadline: float) -> None:
        pki = self.work_dir / "pki"
        assert self._binaries is not None
        args = [
            str(self._binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # A bare control plane has no controller manager to create the "default"
            # ServiceAccount this plugin demands of every Pod, and a full one creates it only
            # moments after a namespace appears: pods are admitted without it.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        ]
        if self.etcd_compaction_interval is not None:
            args.append(f"--etcd-compaction-interval={self.etcd_compaction_interval}s")
        if not self.watch_cache:
            args.append("--watch-cache=false")
        if self.audit_policy is not None:
            policy = self.work_dir / "audit-policy.yaml"
            policy.write_text(self.audit_policy)
            self.audit_log.parent.mkdir(parents=True, exist_ok=True)
            args += [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}"]
            args += ["--audit-log-mode=blocking", "--audit-log-format=json", "--audit-log-maxsize=0"]
        args.extend(self.extra_apiserver_args)
        self.apiserver_process = self._spawn("kube-apiserver", args)
        context = self.admin_ssl_context()
        self._wait(
            lambda: _http_ok(f"{self.server}/readyz", context),
            deadline,
            "kube-apiserver",
            self.apiserver_process,
        )

    def admin_ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts the local CA and presents the admin client certificate."""
        pki = self.work_dir / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return context

    def _start_components(self, deadline: float) -> None:
        """Start kube-controller-manager, kube-scheduler and kwok together; wait for each health."""
        assert self._binaries is not None
        assert self.ca is not None
        if self._binaries.components is None:
            raise _missing([self._binaries.etcd.parent / name for name in COMPONENTS])
        ports = {name: free_port() for name in COMPONENTS}
        components = prepare_components(self.work_dir, self.server, self.ca, self._binaries.components, ports)
        admin = self.admin_ssl_context()
        grant_kwok(self.server, admin, timeout=max(deadline - time.monotonic(), 1.0))
        for component in components:
            self.component_processes[component.name] = self._spawn(component.name, component.arguments)
        for component in components:
            self._wait_healthy(component, admin, deadline)

    def _wait_healthy(self, component: Component, context: ssl.SSLContext, deadline: float) -> None:
        process = self.component_processes[component.name]
        self._wait(lambda: _http_ok(component.health_url, context), deadline, component.name, process)

    def _wait(
        self,
        probe: object,
        deadline: float,
        name: str,
        process: subprocess.Popen[bytes] | None,
    ) -> None:
        assert callable(probe)
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with code {process.returncode}; see {self.work_dir}/logs/{name}.log"
                    f"\n{self._tail(name)}"
                )
            if probe():
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"{name} was not ready in time\n{self._tail(name)}")

    def _tail(self, name: str, lines: int = 20) -> str:
        path = self.work_dir / "logs" / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _write_kubeconfig(self) -> None:
        assert self._admin is not None
        assert self.ca is not None
        config = kubeconfig_document(self.server, self.ca.cert_pem, "nodewright-admin", self._admin)
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)


def terminate_process_group(
    process: subprocess.Popen[bytes] | None, grace: float = 10.0, after_kill: float | None = None
) -> None:
    """SIGTERM a child's process group, SIGKILL it if it has not exited within ``grace`` seconds,
    then wait ``after_kill`` more (``grace`` when None). Safe on a process already gone or None."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace if after_kill is None else after_kill)


def _terminate_with_parent() -> None:
    """In the child before exec: ask Linux to SIGKILL it when the parent dies (PR_SET_PDEATHSIG);
    the owner is gone, so nothing is left to shut down gracefully for."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
