"""``python -m bench.storm [--phase-seconds S]``: no failure storm, full length.

Seven nodes (standalone VMs with one NIC each). Pods churn: events arrive at 20 a second, each
a pod arriving on one node (a new identity or a new IP configuration wanted there) and, once the
node carries its most (6 identities, 10 addresses), the oldest pod there leaving (its identity or
address released); so every phase keeps asking for fresh writes. Each event marks its node for
reconciling in a deduplicated work queue served by four workers. A reconcile calls the real
cloud services (``update_identities``; ``remove_``/``add_secondary_ip_configurations``), each on
its own as separate controllers would, and logs one line for a failure the way the controller
runtime does for an expected error (its ``log_fields``; quiet ones at debug).

A run has phases: idle (no fault), then each fault kind for ``phase_seconds`` (5 minutes here;
``tests/cloud/test_storm.py`` runs 45 s): the Compute provider's 429 without Retry-After on every
write; 500 on every write (reads answer: see ``_fail_every_write``); every long-running
operation failing; the nodes' subnet full (another tenant holds every free address, so every
address wanted is refused 400 SubnetIsFull, a terminal answer). Each is followed by the faults
clearing and the time to converge. Measured per phase from the emulator's request log and a log
handler: ARM writes per target per minute (the most any target received, and the most any target
received that ARM refused with a 400-class answer), requests, log lines per
minute, tracebacks, seconds to converge after clearing. Side effects: threads, a loopback HTTPS
server, a temporary directory.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import random
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodewright.cloud.config import CloudSettings, CredentialKind, CredentialSettings
from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator, RecordedRequest
from nodewright.cloud.emulator.addresses import SubnetAddressPool
from nodewright.cloud.emulator.certificates import issue_loopback_certificates
from nodewright.cloud.emulator.errors import ArmError
from nodewright.cloud.errors import CloudError
from nodewright.cloud.factory import Cloud, build_cloud
from nodewright.cloud.resource_ids import VirtualMachineId, parse_machine_id, parse_network_interface_id

__all__ = ["FAULTS", "Inject", "Phase", "Storm", "main", "run_storm"]

GROUP = "rg-storm"
NODES = 7
IDENTITIES = 40
IDENTITIES_PER_NODE = 6  # pods with an identity a node carries at once; the oldest leaves first
ADDRESSES_PER_NODE = 10  # pod addresses a node carries at once

log = logging.getLogger("nodewright.storm")


@dataclass
class Phase:
    name: str
    seconds: float
    writes_per_target_per_minute: float
    writes_per_refused_target_per_minute: float
    """The most writes in any 60 s (the whole phase when shorter) to a target ARM refused a write
    of with a 400-class answer (a full subnet's NICs: the identity writes of the same nodes go on
    as at idle). Counted in a window, not averaged: a backoff that grows sends most of its
    writes in its first minute."""
    requests: int
    log_lines_per_minute: float
    tracebacks: int
    converged_after_seconds: float | None


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines = 0
        self.tracebacks = 0
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.lines += 1
            if record.exc_info:
                self.tracebacks += 1

    def take(self) -> tuple[int, int]:
        with self._lock:
            taken = (self.lines, self.tracebacks)
            self.lines = self.tracebacks = 0
            return taken


@dataclass
class _Wanted:
    """What one node should carry now: the newest identities and pod addresses, oldest first.
    A pod that goes away releases its identity and its address (``released_addresses`` are the
    configuration names to remove)."""

    identities: deque[str] = field(default_factory=deque)
    addresses: deque[str] = field(default_factory=deque)
    released_addresses: set[str] = field(default_factory=set)


@dataclass
class Storm:
    """The nodes, what each should carry, and the threads that reconcile them."""

    emulator: ArmEmulator
    cloud: Cloud
    events_per_second: float = 20.0
    machines: list[str] = field(default_factory=list)
    identity_ids: list[str] = field(default_factory=list)
    wanted: dict[int, _Wanted] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def build(self) -> None:
        estate = self.emulator.estate
        estate.add_resource_group(GROUP)
        vnet = estate.add_virtual_network(GROUP, "vnet", subnets={"nodes": "10.50.0.0/16"})
        self.identity_ids = [estate.add_identity(GROUP, f"id-{index:02d}") for index in range(IDENTITIES)]
        self.machines = [
            estate.add_virtual_machine(GROUP, f"node-{index}", subnet_id=vnet + "/subnets/nodes")
            for index in range(NODES)
        ]
        self.wanted = {index: _Wanted() for index in range(NODES)}

    def _nic(self, index: int) -> str:
        machine = self.machines[index]
        return (
            machine.replace("Microsoft.Compute/virtualMachines/", "Microsoft.Network/networkInterfaces/")
            + "-nic"
        )

    def change(self, index: int, chooser: random.Random, name: str, identity: bool) -> None:
        """One pod event on node ``index``: a pod arrives (a new identity or address wanted) and,
        once the node carries its most, the oldest pod there leaves (its identity or address is
        released). So every event asks for at least one write, however long the run."""
        with self._lock:
            wanted = self.wanted[index]
            if identity:
                fresh = [each for each in self.identity_ids if each not in wanted.identities]
                wanted.identities.append(chooser.choice(fresh))
                if len(wanted.identities) > IDENTITIES_PER_NODE:
                    wanted.identities.popleft()
            else:
                wanted.addresses.append(name)
                wanted.released_addresses.discard(name)
                if len(wanted.addresses) > ADDRESSES_PER_NODE:
                    wanted.released_addresses.add(wanted.addresses.popleft())

    def _snapshot(self, index: int) -> tuple[set[str], set[str], list[str], list[str]]:
        with self._lock:
            wanted = self.wanted[index]
            identities = set(wanted.identities)
            return (
                identities,
                set(self.identity_ids) - identities,
                sorted(wanted.addresses),
                sorted(wanted.released_addresses),
            )

    def _reconcile(self, index: int) -> None:
        """Both reconcilers' cloud calls for one node, each on its own as separate controllers
        would make them: the identities of the VM, the IP configurations of its NIC (additions
        before removals)."""
        machine = parse_machine_id(self.machines[index])
        if not isinstance(machine, VirtualMachineId):
            raise TypeError(f"not a VM: {machine}")
        nic = parse_network_interface_id(self._nic(index))
        add, remove, addresses, released = self._snapshot(index)
        _logged(lambda: self.cloud.compute.update_identities(machine, add=add, remove=remove))
        # Additions first, as the IPAM reconciler orders them: a new pod's address is not taken
        # from the one an old pod is giving back (in a full subnet, it would always fit).
        _logged(lambda: self.cloud.network.add_secondary_ip_configurations(nic, addresses))
        if released and _logged(lambda: self.cloud.network.remove_secondary_ip_configurations(nic, released)):
            with self._lock:
                self.wanted[index].released_addresses.difference_update(released)

    def churn(self, seconds: float, seed: int) -> None:
        """Pods come and go for ``seconds``, ``events_per_second``: each event changes one random
        node's wanted state (``change``) and marks the node for reconciling; four workers
        reconcile marked nodes, one node at a time each, as a work queue would (a node marked
        again while it is reconciled is reconciled once more afterwards)."""
        chooser = random.Random(seed)
        deadline = time.monotonic() + seconds
        queue = _NodeQueue()

        def produce() -> None:
            counter = 0
            while time.monotonic() < deadline:
                index = chooser.randrange(NODES)
                counter += 1
                self.change(index, chooser, f"pod-{seed}-{counter}", identity=bool(counter % 2))
                queue.add(index)
                time.sleep(1.0 / self.events_per_second)
            queue.close()

        def work() -> None:
            while (index := queue.get()) is not None:
                try:
                    self._reconcile(index)
                finally:
                    queue.done(index)

        threads = [threading.Thread(target=produce)] + [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def converged(self) -> bool:
        for index, machine in enumerate(self.machines):
            add, _, addresses, _ = self._snapshot(index)
            document = self.emulator.state.render(machine) or {}
            present = {
                k.lower() for k in ((document.get("identity") or {}).get("userAssignedIdentities") or {})
            }
            if present != {identity.lower() for identity in add}:
                return False
            nic = self.emulator.state.render(self._nic(index)) or {}
            configurations = (nic.get("properties") or {}).get("ipConfigurations") or []
            names = {c["name"] for c in configurations if not (c.get("properties") or {}).get("primary")}
            if names != set(addresses):
                return False
        return True

    def settle(self, timeout: float) -> float | None:
        """Reconcile every node until converged (as periodic resyncs would); seconds taken."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            for index in range(NODES):
                self._reconcile(index)
            if self.converged():
                return time.monotonic() - started
            time.sleep(1.0)
        return None


class _NodeQueue:
    """A work queue of node indexes: deduplicated, one worker per node at a time."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._dirty: list[int] = []
        self._processing: set[int] = set()
        self._closed = False

    def add(self, index: int) -> None:
        with self._condition:
            if index not in self._dirty:
                self._dirty.append(index)
                self._condition.notify()

    def close(self) -> None:
        """No more events: workers return once nothing is left (the phase's backlog is drained)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def get(self) -> int | None:
        with self._condition:
            while True:
                ready = [index for index in self._dirty if index not in self._processing]
                if ready:
                    self._dirty.remove(ready[0])
                    self._processing.add(ready[0])
                    return ready[0]
                if self._closed and not self._dirty:
                    return None
                self._condition.wait(0.2)

    def done(self, index: int) -> None:
        with self._condition:
            self._processing.discard(index)
            self._condition.notify_all()


def _logged(call: Callable[[], object]) -> bool:
    """Run one cloud call; whether it succeeded. A failure is logged the way the controller
    runtime logs an expected error (one line with its ``log_fields``; quiet ones at debug)."""
    try:
        call()
    except CloudError as error:
        if error.quiet:
            log.debug("Reconcile deferred", extra=error.log_fields())
        else:
            fields = " ".join(f"{key}={value}" for key, value in error.log_fields().items())
            log.error("Reconcile failed %s", fields)
        return False
    return True


def _throttle_compute_writes(emulator: ArmEmulator) -> None:
    emulator.faults.compute_throttle(
        method="PATCH", path="*/providers/microsoft.compute/*", times=None, policy="PutVM3Min"
    )


def _fail_every_write(emulator: ArmEmulator) -> None:
    """500 on every mutating request; reads still answer. A storm that fails the reads as well
    stops every reconcile at its first GET and never reaches a write (the milder case: the run
    before this one measured 56 requests and no write in five minutes of it). Failing the writes
    alone is the case where retries can multiply writes, and the one to bound."""
    for method in ("PUT", "PATCH", "POST", "DELETE"):
        emulator.faults.server_error(method=method, path="*", times=None, status=500)


def _fail_every_operation(emulator: ArmEmulator) -> None:
    emulator.faults.fail_operation(path="*", times=None)


def _fill_the_subnet(emulator: ArmEmulator) -> Callable[[], None]:
    """Another tenant takes every free address of every subnet (the storm has one); returns what
    gives them back."""
    taken: list[tuple[SubnetAddressPool, str]] = []
    with emulator.state.locked():
        for subnet in emulator.state.subnets.values():
            pool = subnet.pool
            for value in range(int(pool.network.network_address) + 4, int(pool.network.broadcast_address)):
                owner = f"other-tenant-{value}"
                try:
                    pool.allocate(owner, str(ipaddress.ip_address(value)))
                except ArmError:
                    continue  # a node holds it
                taken.append((pool, owner))

    def give_back() -> None:
        with emulator.state.locked():
            for pool, owner in taken:
                pool.release(owner)

    return give_back


Inject = Callable[[ArmEmulator], Callable[[], None] | None]
"""Starts a fault; returns what ends it when clearing the emulator's injected faults does not."""

FAULTS: dict[str, Inject] = {
    "429 without Retry-After": _throttle_compute_writes,
    "500 on writes": _fail_every_write,
    "failed operations": _fail_every_operation,
    "subnet full (400 SubnetIsFull)": _fill_the_subnet,
}


def run_storm(emulator: ArmEmulator, cloud: Cloud, phase_seconds: float, idle_seconds: float) -> list[Phase]:
    """Idle, then each fault kind; see the module docstring."""
    storm = Storm(emulator, cloud)
    storm.build()
    capture = _Capture()
    watched = [logging.getLogger("nodewright"), logging.getLogger("azure")]
    for logger in watched:
        logger.addHandler(capture)
    previous_level = logging.getLogger("nodewright").level
    logging.getLogger("nodewright").setLevel(logging.INFO)
    phases: list[Phase] = []
    try:
        phases.append(_phase(storm, capture, "idle", seconds=idle_seconds, inject=None, seed=1))
        for number, (name, inject) in enumerate(FAULTS.items(), start=2):
            phases.append(_phase(storm, capture, name, seconds=phase_seconds, inject=inject, seed=number))
    finally:
        for logger in watched:
            logger.removeHandler(capture)
        logging.getLogger("nodewright").setLevel(previous_level)
    return phases


def _phase(
    storm: Storm,
    capture: _Capture,
    name: str,
    *,
    seconds: float,
    inject: Inject | None,
    seed: int,
) -> Phase:
    emulator = storm.emulator
    mark = time.monotonic()
    capture.take()
    end = inject(emulator) if inject is not None else None
    storm.churn(seconds, seed)
    entries = emulator.requests.entries(since=mark)
    lines, tracebacks = capture.take()
    emulator.faults.clear()
    if end is not None:
        end()
    # A terminal answer backs its target off up to 2 minutes: converging may take that long.
    converged = storm.settle(timeout=150.0)
    return measured(name, seconds, entries, (lines, tracebacks), converged)


def measured(
    name: str,
    seconds: float,
    entries: Sequence[RecordedRequest],
    logged: tuple[int, int],
    converged: float | None,
) -> Phase:
    """A phase's figures: the most ARM writes one target got per minute (over all targets, and
    over those refused with a 400-class answer), requests, log lines per minute and tracebacks
    (``logged``), seconds to converge after clearing."""
    writes = [entry for entry in entries if entry.method in ("PUT", "PATCH", "POST", "DELETE")]
    per_target = Counter(entry.path.lower().split("?")[0] for entry in writes)
    refused = {entry.path.lower().split("?")[0] for entry in writes if 400 <= entry.status < 429}
    minutes = seconds / 60.0
    return Phase(
        name=name,
        seconds=seconds,
        writes_per_target_per_minute=max(per_target.values(), default=0) / minutes,
        writes_per_refused_target_per_minute=max(
            (
                _most_in_a_minute([e.monotonic for e in writes if e.path.lower().split("?")[0] == t])
                for t in refused
            ),
            default=0,
        ),
        requests=len(entries),
        log_lines_per_minute=logged[0] / minutes,
        tracebacks=logged[1],
        converged_after_seconds=converged,
    )


def _most_in_a_minute(moments: Sequence[float]) -> int:
    """The most of ``moments`` that fall within any 60 s."""
    ordered = sorted(moments)
    return max((len([m for m in ordered if start <= m < start + 60.0]) for start in ordered), default=0)


def table(phases: Sequence[Phase]) -> list[str]:
    """The phases as a Markdown table."""
    lines = [
        "| phase | seconds | max writes per target per minute | most in any minute to a target refused (400) "
        "| requests | log lines per minute | tracebacks | converged after clearing (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase in phases:
        converged = (
            "never" if phase.converged_after_seconds is None else f"{phase.converged_after_seconds:.1f}"
        )
        lines.append(
            f"| {phase.name} | {phase.seconds:.0f} | {phase.writes_per_target_per_minute:.1f} "
            f"| {phase.writes_per_refused_target_per_minute:.1f} | {phase.requests} "
            f"| {phase.log_lines_per_minute:.1f} | {phase.tracebacks} | {converged} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__.split("\n")[0])
    parser.add_argument("--phase-seconds", type=float, default=300.0)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    arguments = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-storm-") as directory,
        ArmEmulator(state_dir=Path(directory), certificates=issue_loopback_certificates()) as emulator,
    ):
        cloud = build_cloud(
            CloudSettings(
                subscription_id=DEFAULT_SUBSCRIPTION,
                arm_endpoint=emulator.endpoint,
                credential=CredentialSettings(kind=CredentialKind.STATIC_TOKEN, static_token="bench-token"),  # noqa: S106 - the emulator accepts any token
                ca_bundle=str(emulator.ca_file),
                polling_interval=0.0,
                pacing_max_wait_seconds=1.0,
            )
        )
        phases = run_storm(emulator, cloud, arguments.phase_seconds, arguments.idle_seconds)
        cloud.close()
    print("\n".join(table(phases)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
