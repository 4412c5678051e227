"""How long the local control plane takes to start once its binaries are built (warm start):
PKI generated, etcd + kube-apiserver launched and ``/readyz`` answering 200, then
kube-controller-manager, kube-scheduler and kwok each answering ``/healthz`` (``--bare``: the API
server alone). Prints every sample and the median.
``python -m bench.controlplane_start [-n 5] [--bare]``."""

from __future__ import annotations

import argparse
import statistics
import time

from nodewright.devenv import ControlPlane


def measure(samples: int, bare: bool = False) -> list[float]:
    """Start and stop the control plane ``samples`` times; seconds until ready, each."""
    durations = []
    for _ in range(samples):
        started = time.monotonic()
        with ControlPlane(bare=bare):
            durations.append(time.monotonic() - started)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--samples", type=int, default=5)
    parser.add_argument("--bare", action="store_true", help="etcd and kube-apiserver only")
    arguments = parser.parse_args()
    measure(1, arguments.bare)  # page in the binaries once, so every sample is a warm start
    durations = measure(arguments.samples, arguments.bare)
    print("| sample | seconds until ready |")
    print("| --- | --- |")
    for index, seconds in enumerate(durations, 1):
        print(f"| {index} | {seconds:.2f} |")
    print(f"| median | {statistics.median(durations):.2f} |")


if __name__ == "__main__":
    main()
