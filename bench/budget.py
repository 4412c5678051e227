"""``python -m bench.budget [--nodes N]``: a cold start inside Azure's request budget.

The ARM emulator enforces Azure's limits (write bucket 200 refilled at 10/s, reads 250 at 25/s,
deletes 200 at 10/s, the Compute policies) and answers 429 as Azure does. One process drives the
cloud layer the way the reconcilers do at a cold start, from 16 threads sharing one request
budget: 200 nodes (10 uniform scale sets of 20 instances) each get a full IP pool (two batches of
16 secondary IP configurations on their NIC, as the IPAM reconciler adds them), and each scale set
gets its share of 50 identities (one PATCH per scale set, as the identity reconciler sends it).

Reports the 429s received (must be 0), ARM writes and reads, the peak write rate over any 1 s and
any 10 s window, and the time to converge next to the bucket-limited lower bound
(``max(0, writes - 200) / 10`` s: the bucket starts full and refills at 10/s; likewise for reads).
``--operation-seconds S`` makes each long-running operation run S seconds (0 by default: each ends
at once), and ``--retry-after R`` sets the ``Retry-After`` the emulator sends while one runs
(default the emulator's 10 s, as ARM documents; 0: none); polls per write are reported (reads
include them). No Kubernetes: the budget is the cloud layer's, and the cluster would only add its own latency.
Side effects: threads, a loopback HTTPS server, a temporary directory.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator, RecordedRequest
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.cloud.emulator.state import DEFAULT_OPERATION_RETRY_AFTER
from nodewright.cloud.emulator.throttling import RequestLimits
from nodewright.cloud.factory import Cloud, build_cloud
from nodewright.cloud.resource_ids import (
    NetworkInterfaceId,
    parse_network_interface_id,
    parse_scale_set_id,
)

__all__ = ["Figures", "run"]

GROUP = "bench-budget"
SCALE_SETS = 10
IDENTITIES = 50
BATCHES = 2
BATCH_SIZE = 16
WORKERS = 16
WRITE_CAPACITY, WRITE_REFILL = 200, 10.0
READ_CAPACITY, READ_REFILL = 250, 25.0


@dataclass(frozen=True)
class Figures:
    nodes: int
    seconds: float
    writes: int
    reads: int
    throttled: int
    peak_writes_1s: int
    peak_writes_10s: int
    write_bound: float
    read_bound: float
    polls: int = 0


def _peak(times: list[float], window: float) -> int:
    times = sorted(times)
    best, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def _measure(entries: list[RecordedRequest], nodes: int, seconds: float) -> Figures:
    writes = [e for e in entries if e.method in ("PUT", "PATCH", "POST")]
    reads = [e for e in entries if e.method == "GET"]
    return Figures(
        nodes=nodes,
        seconds=seconds,
        writes=len(writes),
        reads=len(reads),
        throttled=sum(1 for e in entries if e.status == 429),
        peak_writes_1s=_peak([e.monotonic for e in writes], 1.0),
        peak_writes_10s=_peak([e.monotonic for e in writes], 10.0),
        write_bound=max(0, len(writes) - WRITE_CAPACITY) / WRITE_REFILL,
        read_bound=max(0, len(reads) - READ_CAPACITY) / READ_REFILL,
        polls=sum(1 for e in reads if e.operation.startswith("Operations.")),
    )


def _cloud(emulator: ArmEmulator) -> Cloud:
    return build_cloud(
        CloudSettings(
            subscription_id=DEFAULT_SUBSCRIPTION,
            arm_endpoint=emulator.endpoint,
            credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="bench-token"),  # noqa: S106 - the emulator accepts any token
            ca_bundle=str(emulator.ca_file),
            mutation_qps=1000.0,
            mutation_burst=1000,
            pacing_max_wait_seconds=120.0,  # no work queue here: the threads pace by sleeping
        )
    )


def run(
    nodes: int = 200, operation_seconds: float = 0.0, retry_after: float = DEFAULT_OPERATION_RETRY_AFTER
) -> Figures:
    """Seed, enforce Azure's limits, drive the cold start, measure."""
    per_scale_set = nodes // SCALE_SETS
    with (
        tempfile.TemporaryDirectory(prefix="bench-budget-") as directory,
        ArmEmulator(state_dir=Path(directory), certificates=issue_loopback_certificates()) as emulator,
    ):
        estate = emulator.estate
        estate.add_resource_group(GROUP)
        vnet = estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.0.0.0/16"})
        identities = [estate.add_identity(GROUP, f"id-{index:02d}") for index in range(IDENTITIES)]
        scale_sets = [
            estate.add_scale_set(
                GROUP, f"vmss-{index}", subnet_id=vnet + "/subnets/nodes", capacity=per_scale_set
            )
            for index in range(SCALE_SETS)
        ]
        emulator.throttling.configure(RequestLimits(enforce=True))
        emulator.state.operation_duration = operation_seconds
        emulator.state.operation_retry_after = retry_after or None
        cloud = _cloud(emulator)
        work: list[Callable[[], object]] = []
        for index, scale_set in enumerate(scale_sets):
            share = identities[index * IDENTITIES // SCALE_SETS : (index + 1) * IDENTITIES // SCALE_SETS]
            work.append(
                functools.partial(cloud.compute.update_identities, parse_scale_set_id(scale_set), add=share)
            )
            for instance in range(per_scale_set):
                nic_name = scale_set.rsplit("/", 1)[-1] + "-nic"
                nic = parse_network_interface_id(
                    f"{scale_set}/virtualMachines/{instance}/networkInterfaces/{nic_name}"
                )
                work.append(functools.partial(_fill_pool, cloud, nic))
        emulator.requests.clear()
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            for future in [pool.submit(item) for item in work]:
                future.result()
        seconds = time.monotonic() - started
        cloud.close()
        return _measure(emulator.requests.entries(), nodes, seconds)


def _fill_pool(cloud: Cloud, nic: NetworkInterfaceId) -> None:
    for batch in range(BATCHES):
        names = [f"pool-{batch}-{index:02d}" for index in range(BATCH_SIZE)]
        cloud.network.add_secondary_ip_configurations(nic, names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.budget", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=200, help="nodes (a multiple of 10)")
    parser.add_argument("--operation-seconds", type=float, default=0.0, help="each operation's duration")
    parser.add_argument("--retry-after", type=float, default=DEFAULT_OPERATION_RETRY_AFTER, help="0: none")
    arguments = parser.parse_args(argv)
    figures = run(arguments.nodes, arguments.operation_seconds, arguments.retry_after)
    bound = max(figures.write_bound, figures.read_bound)
    print(
        f"budget: {figures.nodes} nodes, {IDENTITIES} identities, {BATCHES} x {BATCH_SIZE} IPs per node, "
        f"{WORKERS} threads, write bucket {WRITE_CAPACITY} @ {WRITE_REFILL:g}/s, reads {READ_CAPACITY} @ "
        f"{READ_REFILL:g}/s (enforced)\n"
        f"429s received: {figures.throttled}\n"
        f"ARM writes: {figures.writes}, reads: {figures.reads} (operation polls {figures.polls}, "
        f"{figures.polls / max(1, figures.writes):.2f} per write; operations "
        f"{arguments.operation_seconds:g} s, Retry-After {arguments.retry_after:g} s)\n"
        f"peak writes: {figures.peak_writes_1s} in 1 s, {figures.peak_writes_10s} in 10 s\n"
        f"converged in {figures.seconds:.1f} s; bucket-limited lower bound {bound:.1f} s "
        f"(writes {figures.write_bound:.1f} s, reads {figures.read_bound:.1f} s)"
    )
    return 0 if figures.throttled == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
