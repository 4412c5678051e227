"""``python -m nodewright.devenv up``: the local demo behind ``make run``.

Starts the real control plane, the ARM emulator with a small estate, the node simulator, the
CRDs, the samples and the manager (see ``demo.LocalEnvironment``), prints where to look and a
progress line as the reconcilers work, and tears everything down on Ctrl-C (or SIGTERM). The work
directory is locked for the run (``worklock``): a second ``up`` on it exits 1 with "already
running (pid N, work dir ...)" and touches nothing.

The lock is taken before anything heavy is imported: this module and the packages above it import
only the standard library until the lock is held, and ``demo`` (the control plane, the ARM
emulator, the Azure SDK, the manager) is imported after, so a second run refuses at once instead
of after the seconds those imports take on a loaded machine.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from nodewright.devenv.paths import DEFAULT_WORK_DIR
from nodewright.devenv.worklock import WorkDirBusyError, lock_work_dir

__all__ = ["main"]


def _stop_on_signals() -> threading.Event:
    """An event set by Ctrl-C or SIGTERM (side effect: installs both handlers)."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def _up(work_dir: Path) -> int:
    # Imported only once the work directory is ours: seconds of imports (the Azure SDK among them).
    from nodewright.devenv.demo import REPOSITORY, WORKLOAD, LocalEnvironment  # noqa: PLC0415

    stop = _stop_on_signals()
    environment = LocalEnvironment(
        work_dir,
        seed=REPOSITORY / "config" / "emulator" / "seed-sample.yaml",
        samples=REPOSITORY / "config" / "samples",
    )
    started = time.monotonic()
    try:
        environment.start(lambda message: print(message, flush=True))
    except Exception as error:
        print(f"error: {error}", file=sys.stderr)
        environment.stop()
        return 1
    assert environment.plane is not None
    kubectl = environment.kubectl
    prometheus_url = environment.prometheus.url if environment.prometheus else "(not started)"
    print(
        f"""
Everything is up after {time.monotonic() - started:.1f} s.

  export KUBECONFIG={environment.plane.kubeconfig}
  {kubectl} get nodes -L kubernetes.azure.com/agentpool
  {kubectl} get pods -o wide -l app={WORKLOAD}   # moves to the new-image nodes
  {kubectl} get azureidentities,azureidentitybindings,azureassignedidentities -A
  {kubectl} get nodenetworkconfigs -n kube-system
  {kubectl} get nodeimages,scalinggroups,pendingnodes
  {kubectl} get events -A --sort-by=.lastTimestamp

  {Path(sys.executable).parent / "nodewright"} status --watch
  metrics  https://127.0.0.1:{environment.metrics_port}/metrics (HTTPS; token of a nodewright-metrics-reader)
  health   http://127.0.0.1:{environment.health_port}/readyz
  prometheus {prometheus_url} (HTTP API: /api/v1/query, /api/v1/targets, /api/v1/alerts)
  logs     {work_dir / "logs"} (manager.log, prometheus.log, kube-apiserver.log, kwok.log, ...)

Progress every 5 s; press Ctrl-C to stop and clean up.""",
        flush=True,
    )
    code = 0
    last = ""
    try:
        while not stop.wait(5.0):
            failure = environment.failure()
            if failure:
                print(f"error: {failure}", file=sys.stderr)
                code = 1
                break
            line = environment.progress()
            if line != last:
                print(f"[{time.monotonic() - started:6.1f} s] {line}", flush=True)
                last = line
    finally:
        print("\nStopping Prometheus, the manager, node simulator, ARM emulator and cluster ...", flush=True)
        environment.stop()
    print("Stopped; nothing left running.")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodewright.devenv", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the local environment until Ctrl-C")
    up.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK_DIR,
        help="where certificates, etcd data, logs and the kubeconfig go (default: %(default)s)",
    )
    arguments = parser.parse_args(argv)
    if arguments.command == "up":
        try:
            with lock_work_dir(arguments.work_dir):
                return _up(arguments.work_dir)
        except WorkDirBusyError as busy:
            print(f"error: {busy}; stop it first, or give this run its own --work-dir", file=sys.stderr)
            return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
