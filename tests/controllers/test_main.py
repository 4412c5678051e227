"""The ``nodewright`` CLI: subcommands, config errors, and real manager processes sharing a Lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykube
import pytest
import yaml

from nodewright.controllers.main import main
from nodewright.devenv.controlplane import free_port

ROOT = Path(__file__).resolve().parents[2]
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.5


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodewright.controllers.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    """version prints the version; --help works on every subcommand."""
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip()
    for argv in (["--help"], ["run", "--help"], ["check-config", "--help"], ["version", "--help"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 0
        assert "usage: nodewright" in capsys.readouterr().out


def test_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check-config accepts a good file and rejects a bad one with exit 2 and one stderr line."""
    good = tmp_path / "good.yaml"
    good.write_text("leaderElection: {enabled: false}\n")
    assert main(["check-config", str(good)]) == 0
    bad = tmp_path / "config.yaml"
    bad.write_text("leaderElection: {leaseDuration: abc}\n")
    assert main(["check-config", str(bad)]) == 2
    error = capsys.readouterr().err
    assert error == f"nodewright: {bad}: leaderElection.leaseDuration: expected a number, got 'abc'\n"


def test_run_with_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    """`nodewright run` with an unknown key exits 2 and prints exactly one line."""
    bad = tmp_path / "config.yaml"
    bad.write_text("metrics: {bindAdress: ':0'}\n")
    result = run_cli("run", "--config", str(bad))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "config.yaml: metrics.bindAdress: unknown key" in result.stderr


def test_run_with_unknown_reconciler_exits_2(tmp_path: Path) -> None:
    """A reconciler name that resolves nowhere is a config error too."""
    config = tmp_path / "config.yaml"
    config.write_text("reconcilers: {nowhere: {}}\nleaderElection: {enabled: false}\n")
    result = run_cli("run", "--config", str(config), env={"KUBECONFIG": str(tmp_path / "absent")})
    assert result.returncode == 2
    assert "'nowhere' is not registered" in result.stderr


class ManagerProcess:
    """`python -m nodewright.controllers.main run` with its own config and identity."""

    def __init__(self, tmp_path: Path, kubeconfig: Path, namespace: str, identity: str) -> None:
        self.identity = identity
        self.health_port = free_port()
        config: dict[str, Any] = {
            "metrics": {"bindAddress": "127.0.0.1:0"},
            "health": {"bindAddress": f"127.0.0.1:{self.health_port}"},
            "leaderElection": {
                "namespace": namespace,
                "name": "cli-lease",
                "identity": identity,
                "leaseDuration": LEASE_DURATION,
                "renewDeadline": RENEW_DEADLINE,
                "retryPeriod": RETRY_PERIOD,
            },
            "logging": {"format": "text"},
            "gracefulShutdownTimeout": 5,
            "reconcilers": {
                "sample": {"module": "tests.runtime.sample_reconciler", "options": {"greeting": identity}}
            },
        }
        path = tmp_path / f"{identity}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log = (tmp_path / f"{identity}.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nodewright.controllers.main", "run", "--config", str(path)],
            cwd=ROOT,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def ready(self) -> bool:
        """/readyz answers 200: caches synced (a standby is ready while it waits on the Lease)."""
        assert self.process.poll() is None, f"{self.identity} exited with {self.process.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=5) as answer:
                return int(answer.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            assert time.monotonic() < deadline, f"{self.identity} not ready within {timeout} s"
            time.sleep(0.1)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.log.close()


@pytest.fixture
def spawn(tmp_path: Path, cluster: Any, namespace: str) -> Iterator[Callable[[str], ManagerProcess]]:
    """Start manager processes by identity; all are killed afterwards."""
    started: list[ManagerProcess] = []

    def start(identity: str) -> ManagerProcess:
        process = ManagerProcess(tmp_path, Path(cluster.kubeconfig), namespace, identity)
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


def holder(kube_api: pykube.HTTPClient, namespace: str) -> str:
    leases = [
        lease
        for lease in pykube.object_factory(kube_api, "coordination.k8s.io/v1", "Lease")
        .objects(kube_api, namespace=namespace)
        .filter()
        if lease.name == "cli-lease"
    ]
    return str(leases[0].obj["spec"].get("holderIdentity") or "") if leases else ""


def wait_for_holder(kube_api: pykube.HTTPClient, namespace: str, accept: set[str], timeout: float) -> float:
    started = time.monotonic()
    while holder(kube_api, namespace) not in accept:
        assert time.monotonic() - started < timeout, f"no holder among {accept} within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - started


def greeting(kube_api: pykube.HTTPClient, namespace: str, name: str) -> str:
    obj = pykube.ConfigMap.objects(kube_api, namespace=namespace).get_by_name(name)
    return str((obj.obj.get("data") or {}).get("greeting", ""))


def wait_for_greeting(kube_api: pykube.HTTPClient, namespace: str, name: str, expected: str) -> None:
    deadline = time.monotonic() + 15
    while greeting(kube_api, namespace, name) != expected:
        assert time.monotonic() < deadline, f"{name} never greeted by {expected}"
        time.sleep(0.1)


def add_config_map(kube_api: pykube.HTTPClient, namespace: str, name: str) -> None:
    body = {"metadata": {"name": name, "namespace": namespace, "labels": {"sample": "yes"}}}
    pykube.ConfigMap(kube_api, body).create()


@pytest.mark.slow
def test_sigkill_leader_fails_over_within_lease_and_sigterm_hands_over_at_once(
    spawn: Callable[[str], ManagerProcess], kube_api: pykube.HTTPClient, namespace: str
) -> None:
    """Two manager processes, one Lease: only the leader reconciles; after SIGKILL the other
    leads within the lease duration plus retry periods; after SIGTERM a standby leads at once."""
    processes = {name: spawn(name) for name in ("one", "two")}
    wait_for_holder(kube_api, namespace, {"one", "two"}, timeout=90)  # process start-up, not what is measured
    first = holder(kube_api, namespace)
    second = "two" if first == "one" else "one"
    add_config_map(kube_api, namespace, "a")
    wait_for_greeting(kube_api, namespace, "a", first)
    time.sleep(1.0)  # the standby's chance to reconcile wrongly (another process: no pass to count)
    assert greeting(kube_api, namespace, "a") == first  # the standby never reconciled it

    killed_at = time.monotonic()
    processes[first].process.send_signal(signal.SIGKILL)
    wait_for_holder(kube_api, namespace, {second}, timeout=LEASE_DURATION * 3)
    took = time.monotonic() - killed_at
    # client-go semantics: expiry runs from when the standby saw the last renewal (up to one
    # jittered retry period after it happened) and is noticed at the next poll.
    assert took <= LEASE_DURATION + 2 * RETRY_PERIOD * 1.2 + 0.5, took
    add_config_map(kube_api, namespace, "b")
    wait_for_greeting(kube_api, namespace, "b", second)

    third = spawn("three")  # the replacement becomes the standby
    third.wait_ready(timeout=60)  # process start-up, not what is measured
    assert holder(kube_api, namespace) == second
    terminated_at = time.monotonic()
    processes[second].process.send_signal(signal.SIGTERM)
    wait_for_holder(kube_api, namespace, {"three"}, timeout=LEASE_DURATION * 3)
    took = time.monotonic() - terminated_at
    assert took < LEASE_DURATION, took  # released, not expired
    assert processes[second].process.wait(10) == 0
    add_config_map(kube_api, namespace, "c")
    wait_for_greeting(kube_api, namespace, "c", third.identity)


CLOUD_BLOCK = "{subscriptionId: sub, credential: {kind: static-token, staticToken: t}}"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            "{cloud: CLOUD, repairInterval: soon}",
            "reconcilers.identity-assignment.options.repairInterval: expected a number, got 'soon'",
            id="bad-option-type",
        ),
        pytest.param(
            "{cloud: {credential: {kind: default}}}",
            "reconcilers.identity-assignment.options.cloud.subscriptionId: is required",
            id="cloud-block-incomplete",
        ),
        pytest.param(
            "{cloud: CLOUD, repairIntervall: 5}",
            "reconcilers.identity-assignment.options.repairIntervall: unknown key",
            id="misspelt-option",
        ),
    ],
)
def test_check_config_validates_reconciler_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, message: str
) -> None:
    """A built-in reconciler's options are checked without a cluster: one line naming the key."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"reconcilers:\n  identity-assignment: {{options: {options.replace('CLOUD', CLOUD_BLOCK)}}}\n"
    )
    assert main(["check-config", str(config)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"nodewright: {config}: {message}")
    assert error.count("\n") == 1


def test_check_config_accepts_the_built_in_reconcilers(tmp_path: Path) -> None:
    """identity-assignment is registered under its name and its valid options pass."""
    config = tmp_path / "config.yaml"
    config.write_text(f"reconcilers:\n  identity-assignment: {{options: {{cloud: {CLOUD_BLOCK}}}}}\n")
    assert main(["check-config", str(config)]) == 0
