"""``python -m bench.fence [--trials N] [--only server|pause]``: the leadership fault trials at
full count, as a stress run.

The suite runs a few trials of each (``NODEWRIGHT_SERVER_FENCE_TRIALS`` and
``NODEWRIGHT_PAUSE_TRIALS``, 4 by default) so that ``make test`` stays short; this entry point
runs the same tests, with the same machinery (``tests/controllers/leadership_harness.py``: real
manager processes behind TCP proxies, the API server's audit log, the ARM emulator), ``N`` times
each (default 20):

- ``server``: ``tests/controllers/test_server_fence.py``, partitions and SIGSTOP pauses of the
  leader; every late request of a deposed manager counted by status, none accepted.
- ``pause``: ``tests/controllers/test_leadership_faults.py``, SIGSTOP of the leader among three
  replicas; no write by a deposed replica after the takeover.

Each prints its one-line summary (trials, seed, seconds, takeovers, late requests by status);
the exit status is pytest's. Side effects: a private control plane, manager processes, files
under a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["SUITES", "command", "main"]

ROOT = Path(__file__).resolve().parent.parent
SUITES = {
    "server": (
        "NODEWRIGHT_SERVER_FENCE_TRIALS",
        "tests/controllers/test_server_fence.py::"
        "test_no_late_request_of_a_deposed_manager_is_accepted_over_partitions_and_pauses",
    ),
    "pause": (
        "NODEWRIGHT_PAUSE_TRIALS",
        "tests/controllers/test_leadership_faults.py::test_paused_leader_writes_nothing_after_the_takeover",
    ),
}


def command(only: list[str]) -> list[str]:
    """The pytest command line that runs the selected trials, printing their summaries."""
    tests = [SUITES[name][1] for name in only]
    return [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *tests]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fence", description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials of each test (default 20)")
    parser.add_argument("--only", action="append", choices=sorted(SUITES), help="one test (repeatable)")
    args = parser.parse_args(argv)
    only = args.only or sorted(SUITES)
    env = {**os.environ, **{SUITES[name][0]: str(args.trials) for name in only}}
    return subprocess.run(command(only), cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
