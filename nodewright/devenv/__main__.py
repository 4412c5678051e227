"""``python -m nodewright.devenv up``: the local environment behind ``make run``.

Starts the real control plane on loopback, prints where to reach it, and tears everything down
on Ctrl-C (or SIGTERM). Later stages add the ARM emulator, the node simulator and the manager.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from nodewright.devenv.controlplane import DEFAULT_CACHE, ControlPlane, ControlPlaneError

__all__ = ["main"]


def _up(work_dir: Path) -> int:
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    work_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work_dir / "etcd", ignore_errors=True)  # every run starts from an empty cluster
    plane = ControlPlane(work_dir=work_dir)
    time.monotonic()
    try:
        plane.start()
    except ControlPlaneError:
        return 1
    Path(os.environ.get("NODEWRIGHT_BIN", DEFAULT_CACHE / "bin")) / "kubectl"
    try:
        while not stop.wait(1.0):
            for _name, process in (("etcd", plane.etcd_process), ("kube-apiserver", plane.apiserver_process)):
                if process is not None and process.poll() is not None:
                    return 1
    finally:
        plane.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodewright.devenv", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the local environment until Ctrl-C")
    up.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_CACHE / "run",
        help="where certificates, etcd data, logs and the kubeconfig go (default: %(default)s)",
    )
    arguments = parser.parse_args(argv)
    if arguments.command == "up":
        return _up(arguments.work_dir)
    return 2


if __name__ == "__main__":
    sys.exit(main())
