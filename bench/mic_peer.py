"""aad-pod-identity's MIC v1.8.17 as a bench peer, shared by ``bench.identity --peer mic`` and
``bench.scale --peer mic``: its binary (built once by ``bench/peers/build.sh mic``), its process
against the local emulator and control plane (its own API user, service principal, custom cloud
files and CA, through :mod:`nodewright.devenv.peers`), and the split of the emulator's request
log by caller.

Owns ``mic_binary``, ``start_mic``, ``arm_counts`` (pure: one caller's requests counted as both
benches report them) and ``identity_requests`` (pure: the requests of identity assignment, for a
caller that does more, such as the whole manager in ``bench.scale``). Side effects: a Go build
(``mic_binary``), a process and files (``start_mic``).
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.processes import Contender, RunningProcess
from nodewright.cloud.emulator.request_log import RecordedRequest
from nodewright.devenv import ControlPlane
from nodewright.devenv.controlplane import free_port
from nodewright.devenv.peers import PeerCloud, peer_process_environment, write_peer_cloud_files

__all__ = [
    "IDENTITY_OPERATIONS",
    "MIC_CLIENT_ID",
    "MIC_NAMESPACE",
    "MIC_SECRET",
    "MIC_USER",
    "MicProcess",
    "arm_counts",
    "identity_requests",
    "mic_binary",
    "start_mic",
]

REPOSITORY = Path(__file__).resolve().parents[1]
MIC_CLIENT_ID = "6f1e3c2a-9b7d-4e5f-8a1b-2c3d4e5f6a7b"
MIC_SECRET = "mic-bench-secret"  # noqa: S105 - the emulator's app registration for the benches
MIC_NAMESPACE = "aad-pod-identity"
MIC_USER = "bench-mic"
IDENTITY_OPERATIONS = frozenset(
    {
        "VirtualMachineScaleSets.get",
        "VirtualMachineScaleSets.update",
        "VirtualMachines.get",
        "VirtualMachines.update",
    }
)
"""What assigning identities costs in ARM, for MIC and for nodewright alike: reading and
patching a scale set's or a machine's identities (and the polls of those patches)."""


@dataclass(frozen=True)
class MicProcess:
    """MIC's process and the probe that answers "Active" once its sync loop runs."""

    process: RunningProcess
    ready_url: str
    ready_body: str = "Active"


@functools.cache
def mic_binary() -> Path:
    """MIC's binary, built once per go.sum by ``bench/peers/build.sh mic`` (minutes the first
    time). Side effect: a Go build."""
    script = REPOSITORY / "bench" / "peers" / "build.sh"
    answer = subprocess.run(
        ["bash", str(script), "mic"], check=True, capture_output=True, text=True, timeout=1800
    )
    return Path(answer.stdout.strip()) / "mic"


def start_mic(plane: ControlPlane, work: Path, cloud: PeerCloud, ca_file: Path) -> MicProcess:
    """Start MIC as API user ``MIC_USER`` (system:masters) signing in to ``cloud`` as its
    service principal (register ``MIC_CLIENT_ID``/``MIC_SECRET`` with the emulator first).
    Side effects: files under ``work``, a process."""
    kubeconfig = plane.user_kubeconfig(MIC_USER, groups=("system:masters",))
    probe = free_port()
    files = write_peer_cloud_files(work / "mic-cloud", cloud)
    command = (
        str(mic_binary()),
        f"--kubeconfig={kubeconfig}",
        f"--cloudconfig={files.azure_json}",
        f"--http-probe-port={probe}",
        f"--prometheus-port={free_port()}",
    )
    env = peer_process_environment(files, ca_file, MIC_NAMESPACE)
    process = RunningProcess(Contender("mic", "peer", command, env=env), work, {})
    return MicProcess(process, f"http://127.0.0.1:{probe}/healthz")


def _operation_id(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def identity_requests(
    entries: Sequence[RecordedRequest], started_by: Callable[[str], str]
) -> list[RecordedRequest]:
    """Pure: the entries of ``IDENTITY_OPERATIONS`` and the polls of operations they started
    (``started_by`` maps an operation ID to the request operation that started it)."""
    kept = []
    for entry in entries:
        if entry.operation.startswith("Operations."):
            if started_by(_operation_id(entry.path)) in IDENTITY_OPERATIONS:
                kept.append(entry)
        elif entry.operation in IDENTITY_OPERATIONS:
            kept.append(entry)
    return kept


def arm_counts(entries: Sequence[RecordedRequest]) -> dict[str, int]:
    """Pure: one caller's requests as the benches report them: requests, reads, writes (PUT,
    PATCH, POST, DELETE), polls (operation status and result), 404s, 429s, scale-set and
    machine writes."""
    polls = [e for e in entries if e.operation.startswith("Operations.")]
    writes = [e for e in entries if e.method in ("PUT", "PATCH", "POST", "DELETE")]
    return {
        "requests": len(entries),
        "reads": len(entries) - len(polls) - len(writes),
        "writes": len(writes),
        "polls": len(polls),
        "not_found": sum(1 for e in entries if e.status == 404),
        "throttled": sum(1 for e in entries if e.status == 429),
        "scale_set_writes": sum(1 for e in writes if e.operation == "VirtualMachineScaleSets.update"),
        "machine_writes": sum(1 for e in writes if e.operation == "VirtualMachines.update"),
    }
