"""The local demo (`make run`): everything comes up, every sample is reconciled, and Ctrl-C
leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
FRACTION = re.compile(r"(\d+)/(\d+)")
POOL_IPS = re.compile(r"(\d+)/(\d+) with a pool IP")


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line mentions ``text`` (the demo's work directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command_line and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def all_reconciled(line: str) -> bool:
    """A progress line whose every "done/total" is complete and non-empty."""
    fractions = [(int(done), int(total)) for done, total in FRACTION.findall(line)]
    return bool(fractions) and all(total > 0 and done == total for done, total in fractions)


@pytest.mark.slow
def test_demo_reaches_steady_state_and_ctrl_c_cleans_up(tmp_path: Path) -> None:
    """`python -m nodewright.devenv up` reconciles every sample within 2 minutes, the demo
    Deployment's pods all holding an address from their node's NIC pool (handed out by the CNS
    NodeSubnet stand-in); SIGINT stops it with exit code 0 and no etcd, kube-apiserver or manager
    process left."""
    work_dir = tmp_path / "demo"
    environment = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    demo = subprocess.Popen(
        [sys.executable, "-m", "nodewright.devenv", "up", "--work-dir", str(work_dir)],
        cwd=PROJECT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert demo.stdout is not None
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            output.append(line)
            if line.startswith("[") and all_reconciled(line):
                break
        else:
            pytest.fail("no steady state within 2 minutes:\n" + "".join(output))
        steady = [line for line in output if line.startswith("[") and all_reconciled(line)]
        assert steady, "".join(output)
        pooled = POOL_IPS.search(steady[-1])
        assert pooled, steady[-1]
        assert int(pooled[1]) == int(pooled[2]) > 0, steady[-1]
        assert processes_mentioning(str(work_dir)), "the demo's processes should be running"
    finally:
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=90)
        output.append(rest)
    assert demo.returncode == 0, "".join(output)
    assert "Stopped; nothing left running." in "".join(output)
    assert processes_mentioning(str(work_dir)) == []
