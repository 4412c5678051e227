"""`make run` twice on one work directory: the second exits 1 naming the first, touches nothing,
before importing anything heavy, and the first keeps running; a lock whose holder died is free
again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodewright.devenv.worklock import LOCK_FILE, WorkDirBusyError, lock_work_dir

ROOT = Path(__file__).resolve().parents[2]
UP = [sys.executable, "-m", "nodewright.devenv", "up", "--work-dir"]
HEAVY_PACKAGES = ("azure", "pykube", "yaml", "cryptography", "urllib3", "opentelemetry", "prometheus_client")
HEAVY_MODULES = (
    "nodewright.runtime",
    "nodewright.cloud",
    "nodewright.devenv.controlplane",
    "nodewright.devenv.demo",
)


def wait_for(condition: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {message}"
        time.sleep(0.2)


@contextlib.contextmanager
def held_by_another_process(work_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A live process holding ``work_dir``'s lock for the block (killed after it)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path\n"
            "from nodewright.devenv.worklock import lock_work_dir\n"
            "with lock_work_dir(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(600)",
            str(work_dir),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait(10)
        assert holder.stdout is not None
        holder.stdout.close()


def imported_modules(importtime_report: str) -> set[str]:
    """The modules named by ``python -X importtime``'s report (its lines on stderr)."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_report.splitlines()
        if line.startswith("import time:")
    } - {"package"}  # the report's header line


def test_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    """While one process holds the directory, another gets WorkDirBusyError with its pid."""
    with held_by_another_process(tmp_path) as holder:
        with pytest.raises(WorkDirBusyError) as busy, lock_work_dir(tmp_path):
            pytest.fail("took a lock another process holds")
        assert str(busy.value) == f"already running (pid {holder.pid}, work dir {tmp_path})"
    with lock_work_dir(tmp_path):  # the kernel released the dead holder's lock
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_second_up_refuses_before_any_heavy_import(tmp_path: Path) -> None:
    """A second `python -m nodewright.devenv up` on a held work dir exits 1 with "already
    running" having imported only the standard library and the lock: no Azure SDK, no
    Kubernetes client, no runtime or cloud layer, no control plane (imports are what took it
    20-48 s on a loaded machine before it refused)."""
    with held_by_another_process(tmp_path) as holder:
        second = subprocess.run(
            [sys.executable, "-X", "importtime", *UP[1:], str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert second.returncode == 1, second.stderr
    assert f"already running (pid {holder.pid}, work dir {tmp_path})" in second.stderr
    imported = imported_modules(second.stderr)
    assert "nodewright.devenv.worklock" in imported, "the report lists our own modules"
    heavy = sorted(
        name for name in imported if name.split(".")[0] in HEAVY_PACKAGES or name.startswith(HEAVY_MODULES)
    )
    assert heavy == []


@pytest.mark.timeout(420)
def test_second_make_run_exits_1_and_the_first_keeps_running(tmp_path: Path) -> None:
    """A real `python -m nodewright.devenv up` runs; a second one on the same work dir exits 1
    with "already running (pid N, work dir ...)", leaves the first one's certificates alone, and
    the first comes up and keeps serving."""
    work_dir = tmp_path / "run"
    log = (tmp_path / "first.log").open("w+")
    first = subprocess.Popen([*UP, str(work_dir)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        lock = work_dir / LOCK_FILE
        wait_for(lambda: lock.exists() and lock.read_text() == f"{first.pid}\n", 60, "the first run's lock")
        wait_for((work_dir / "pki" / "ca.crt").exists, 120, "the first run's certificates")
        certificate = (work_dir / "pki" / "ca.crt").read_bytes()
        second = subprocess.run(
            [*UP, str(work_dir)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
        assert second.returncode == 1, second.stderr
        assert f"already running (pid {first.pid}, work dir {work_dir})" in second.stderr
        assert "Everything is up" not in second.stdout
        wait_for(lambda: "Everything is up" in (tmp_path / "first.log").read_text(), 240, "the first run up")
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        assert (work_dir / "pki" / "ca.crt").read_bytes() == certificate
        kubectl = (
            Path(os.environ.get("NODEWRIGHT_CACHE", Path.home() / ".cache" / "nodewright"))
            / "bin"
            / "kubectl"
        )
        answer = subprocess.run(
            [str(kubectl), "--kubeconfig", str(work_dir / "admin.kubeconfig"), "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert answer.stdout.strip() == "ok", answer.stderr
    finally:
        first.send_signal(signal.SIGINT)  # Ctrl-C: it tears down what it started
        try:
            first.wait(90)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait(10)
        log.close()
