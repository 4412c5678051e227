"""The rig of the leadership fault tests: manager processes, a freezable TCP proxy, attribution.

- ``ManagerProcess``: ``python -m nodewright.controllers.main run`` with its own kubeconfig user
  (a client certificate: the audit log names it) and its own ARM bearer token (the emulator's
  request log names it); pause, resume, kill, scrape its metrics.
- ``TcpProxy``: forwards loopback TCP to the API server; ``freeze()`` black-holes it (bytes in
  either direction are read and dropped, as a network that loses packets); ``thaw()`` closes the
  connections that lived through the freeze and forwards new ones again. ``hold()`` holds back
  what the client sends instead (a partition that delays packets) and ``release()`` delivers it
  late, even for a client that has gone meanwhile: the issue's late write.
- ``Writes``: mutating requests from the audit log and the emulator log, by user or token, with
  wall-clock times (API server, emulator and test share one host clock).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.devenv.controlplane import free_port
from nodewright.runtime.kube.fence import is_mutating
from tests.waiting import wait_for

REPOSITORY = Path(__file__).resolve().parents[2]
MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
LEASE, RENEW, RETRY, MARGIN = 3.0, 2.0, 0.5, 0.5
LINGER = 5.0
"""Seconds the proxy keeps a connection whose client has gone, after delivering its held bytes."""

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [manager-a, manager-b, manager-c]
- level: None
"""


def wait_until(condition: Any, timeout: float, message: str, step: float = 0.05) -> Any:
    """``tests.waiting.wait_for`` under the name and the loosely typed condition (lambdas that bind
    loop variables as defaults) these tests use."""
    return wait_for(condition, timeout, message, interval=step)


def manager_config(
    name: str, namespace: str, emulator: ArmEmulator, group: str, scale_set: str
) -> dict[str, Any]:
    """The config of manager ``name`` (identity and ARM token both carry the name)."""
    cloud = {
        "subscriptionId": DEFAULT_SUBSCRIPTION,
        "armEndpoint": emulator.endpoint,
        "credential": {"kind": "static-token", "staticToken": f"token-{name}"},
        "caBundle": str(emulator.ca_file),
        "pollingInterval": 0.0,
        "retryBackoffFactor": 0.05,
        "mutationQps": 1000.0,
        "mutationBurst": 1000,
    }
    return {
        "metrics": {"bindAddress": f"127.0.0.1:{free_port()}", "secure": False},  # scraped over plain HTTP
        "health": {"bindAddress": f"127.0.0.1:{free_port()}"},
        "leaderElection": {
            "enabled": True,
            "namespace": namespace,
            "name": "fault-lease",
            "identity": f"manager-{name}",
            "leaseDuration": LEASE,
            "renewDeadline": RENEW,
            "retryPeriod": RETRY,
            "writeFenceMargin": MARGIN,
        },
        "logging": {"level": "warning", "format": "text"},  # the SDK logs every request at info
        "cacheSyncTimeout": 30,
        "gracefulShutdownTimeout": 5,
        "reconcilers": {
            "fence-workload": {
                "module": "tests.controllers.leadership_workload",
                "options": {
                    "namespace": namespace,
                    "resourceGroup": group,
                    "scaleSet": scale_set,
                    "periodSeconds": 0.25,
                    "cloud": cloud,
                },
            }
        },
    }


class ManagerProcess:
    """One manager replica as a real process (restartable, as a Deployment would)."""

    def __init__(self, name: str, work: Path, config: dict[str, Any], kubeconfig: Path) -> None:
        self.name = name
        self.user = f"manager-{name}"
        self.token = f"token-{name}"
        self.config_path = work / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.metrics_port = int(config["metrics"]["bindAddress"].rsplit(":", 1)[1])
        self.health_port = int(config["health"]["bindAddress"].rsplit(":", 1)[1])
        self.kubeconfig = kubeconfig
        self.log_path = work / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_codes: list[int] = []

    def start(self) -> None:
        log = self.log_path.open("ab")
        command = [sys.executable, "-m", "nodewright.controllers.main", "run"]
        command += ["--config", str(self.config_path), "--kubeconfig", str(self.kubeconfig)]
        env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
        env.pop("KUBECONFIG", None)
        self.process = subprocess.Popen(command, stdout=log, stderr=log, cwd=REPOSITORY, env=env)
        log.close()

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    def wait_exit(self, timeout: float) -> int:
        assert self.process is not None
        code = self.process.wait(timeout)
        self.exit_codes.append(code)
        return code

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read().decode()
        except (urllib.error.URLError, OSError):
            return 0, ""

    def ready(self) -> bool:
        """/readyz answers 200. A process that exited is never ready: that fails at once, with
        its log's tail, instead of waiting out a deadline."""
        if self.get(self.health_port, "/readyz")[0] == 200:
            return True
        if self.process is not None and self.process.poll() is not None:
            tail = "\n".join(self.log_text().splitlines()[-15:])
            raise AssertionError(
                f"{self.user} exited with {self.process.returncode} before it was ready:\n{tail}"
            )
        return False

    def metric(self, line_prefix: str) -> float | None:
        """The value of the first series starting with ``line_prefix``; None when unreachable."""
        status, text = self.get(self.metrics_port, "/metrics")
        if status != 200:
            return None
        for line in text.splitlines():
            if line.startswith(line_prefix):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def scrape(self, line_prefix: str, timeout: float = 30.0) -> float:
        """``metric``, retried while the scrape times out (a loaded machine); never None."""
        values: list[float] = []

        def answered() -> bool:
            value = self.metric(line_prefix)
            if value is not None:
                values.append(value)
            return value is not None

        wait_until(answered, timeout, f"{self.user} scraped", 0.2)
        return values[-1]

    def master_status(self, previous: float = 0.0) -> float:
        """leader_election_master_status. An exited process leads nothing (0); a live one whose
        scrape timed out is taken to report what it reported before (``previous``)."""
        value = self.metric('leader_election_master_status{name="fault-lease"}')
        if value is not None:
            return value
        alive = self.process is not None and self.process.poll() is None
        return previous if alive else 0.0

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


class TcpProxy:
    """A loopback TCP forwarder that can black-hole its traffic."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._frozen = threading.Event()
        self._holding = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._frozen.set()

    def hold(self) -> None:
        """Keep what clients send from here on, and send nothing back, until ``release``."""
        self._holding.set()

    def release(self) -> None:
        """Deliver what was held, on the connections it was sent on, and forward again."""
        self._holding.clear()

    def thaw(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.close()
        self._frozen.clear()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.thaw()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        held = bytearray()  # what the client sent while held, for upstream
        client_gone_at: float | None = None  # the client closed; upstream still gets what it sent
        try:
            while True:
                watched = [upstream] if client_gone_at is not None else [client, upstream]
                readable, _, _ = select.select(watched, [], [], 0.1)
                if held and not self._holding.is_set():
                    upstream.sendall(held)
                    held.clear()
                    client_gone_at = time.monotonic() if client_gone_at is not None else None
                if client_gone_at is not None and not held and time.monotonic() - client_gone_at > LINGER:
                    return
                for sock in readable:
                    if not self._forward(sock, sock is client, client, upstream, held):
                        if sock is upstream or not (held or self._holding.is_set()):
                            return
                        client_gone_at = time.monotonic()  # keep upstream: the held bytes go out
        except (OSError, ValueError):
            return
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.close()

    def _forward(
        self,
        sock: socket.socket,
        from_client: bool,
        client: socket.socket,
        upstream: socket.socket,
        held: bytearray,
    ) -> bool:
        """Move one read's bytes on (or hold or drop them); False at end of stream."""
        data = sock.recv(65536)
        if not data:
            return False
        if self._frozen.is_set():
            return True
        if from_client:
            if self._holding.is_set() or held:
                held.extend(data)
            else:
                upstream.sendall(data)
        elif not self._holding.is_set():
            with contextlib.suppress(OSError):  # the client may be gone: its answer is lost
                client.sendall(data)
        return True


def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Write:
    """One mutating request: who, what, when (wall clock, seconds since the epoch)."""

    by: str
    target: str
    what: str
    at: float
    code: int


class Writes:
    """Mutating requests read from the audit log and the emulator's request log."""

    def __init__(self, audit_log: Path, emulator: ArmEmulator) -> None:
        self.audit_log = audit_log
        self.emulator = emulator
        self._events: list[dict[str, Any]] = []
        self._parsed_size = -1

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event so far (parsed again only when the log has grown)."""
        with contextlib.suppress(FileNotFoundError):
            size = self.audit_log.stat().st_size
            if size != self._parsed_size:
                events = []
                for line in self.audit_log.read_text().splitlines():
                    with contextlib.suppress(ValueError):
                        events.append(json.loads(line))
                self._events, self._parsed_size = events, size
        return self._events

    def api(self) -> list[Write]:
        writes = []
        for event in self.audit_events():
            if event.get("verb") not in MUTATING_VERBS or event.get("stage") != "ResponseComplete":
                continue
            if not is_mutating("POST", urlsplit(event.get("requestURI", "")).path):
                continue  # a review (TokenReview, access review) asks a question and stores nothing
            ref = event.get("objectRef") or {}
            writes.append(
                Write(
                    by=event["user"]["username"],
                    target="kubernetes",
                    what=f"{event['verb']} {ref.get('resource')}/{ref.get('name', '')}",
                    at=_epoch(event["requestReceivedTimestamp"]),
                    code=int((event.get("responseStatus") or {}).get("code", 0)),
                )
            )
        return writes

    def arm(self) -> list[Write]:
        return [
            Write(
                by=f"manager-{(entry.bearer_token or '').removeprefix('token-')}",
                target="arm",
                what=f"{entry.method} {entry.operation}",
                at=entry.timestamp,
                code=entry.status,
            )
            for entry in self.emulator.requests.entries()
            if entry.method != "GET"
        ]

    def lists(self, user: str, resource: str) -> list[float]:
        """When ``user`` listed ``resource`` (informer LISTs)."""
        return [
            _epoch(event["requestReceivedTimestamp"])
            for event in self.audit_events()
            if event.get("verb") == "list"
            and event["user"]["username"] == user
            and (event.get("objectRef") or {}).get("resource") == resource
        ]

    def acquisitions(self) -> list[Write]:
        """Successful Lease writes that changed hands: the first successful write of each run of
        writes by one user (a takeover), oldest first."""
        lease_writes = sorted(
            (w for w in self.api() if w.what.startswith(("update leases", "create leases")) and w.code < 300),
            key=lambda w: w.at,
        )
        taken: list[Write] = []
        for write in lease_writes:
            if not taken or taken[-1].by != write.by:
                taken.append(write)
        return taken

    def after(self, user: str, start: float, end: float) -> list[Write]:
        """Writes by ``user`` in (start, end), failed Lease attempts aside (a 409 changes nothing)."""
        return [
            w
            for w in self.api() + self.arm()
            if w.by == user
            and start < w.at < end
            and not (w.what.split(" ", 1)[1].startswith("leases/") and w.code >= 300)
        ]
