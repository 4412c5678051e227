"""How long the local control plane takes to start once its binaries are built (warm start):
etcd + kube-apiserver launched, PKI generated, ``/readyz`` answering 200. Prints every sample
and the median. ``python -m bench.controlplane_start [-n 5]``."""

from __future__ import annotations

import argparse
import statistics
import time

from nodewright.devenv import ControlPlane


def measure(samples: int) -> list[float]:
    """Start and stop the control plane ``samples`` times; seconds until ready, each."""
    durations = []
    for _ in range(samples):
        started = time.monotonic()
        with ControlPlane():
            durations.append(time.monotonic() - started)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--samples", type=int, default=5)
    arguments = parser.parse_args()
    measure(1)  # page in the binaries once, so every sample is a warm start
    durations = measure(arguments.samples)
    print("| sample | seconds to /readyz |")
    print("| --- | --- |")
    for index, seconds in enumerate(durations, 1):
        print(f"| {index} | {seconds:.2f} |")
    print(f"| median | {statistics.median(durations):.2f} |")


if __name__ == "__main__":
    main()
