"""Who assigns identities in ``bench.scale``: nodewright's own identity reconciler (the default)
or, with ``--peer mic``, aad-pod-identity's MIC v1.8.17, unmodified, beside the manager with
that reconciler off and upstream's CRDs, on the same seeded estate and workload.

Owns ``IdentityTool`` (which tool, its API user, starting and stopping MIC through
``bench.mic_peer``), ``AUDIT_POLICY`` (the API server records the two users' writes, so writes
are counted by user), ``install_identity_crds`` and ``tool_figures`` (per phase: the tool's ARM
requests from the emulator's log split by caller, all and identity assignment's alone, and its API
writes by resource from the audit log), the figures ``bench.identity --peer mic`` reports.

Side effects: MIC's process and files, CRDs written to the API server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.identity_peers import audit_writes
from bench.mic_peer import MIC_CLIENT_ID, MIC_NAMESPACE, MIC_SECRET, MIC_USER, MicProcess, start_mic
from bench.scale_world import RESOURCE_GROUP
from nodewright.api import RESOURCES
from nodewright.api.aadpodidentity.v1 import RESOURCES as POD_IDENTITY_RESOURCES
from nodewright.devenv import ControlPlane
from nodewright.devenv.crds import install_crds
from nodewright.devenv.peers import PeerCloud, install_upstream_pod_identity_crds
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NAMESPACE

__all__ = ["AUDIT_POLICY", "MANAGER_TOKEN", "MANAGER_USER", "PEERS", "IdentityTool", "tool_figures"]

PEERS = ("mic",)
MANAGER_USER = "bench-scale-manager"
MANAGER_TOKEN = "bench-scale-manager"  # noqa: S105 - the emulator accepts any bearer token
AUDIT_POLICY = f"""\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [{MIC_USER}, {MANAGER_USER}]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


class _World(Protocol):
    info: dict[str, Any]

    def call(self, command: str, *arguments: Any, timeout: float = 600.0) -> Any: ...


@dataclass
class IdentityTool:
    """The tool that assigns identities in this run: ``nodewright`` (the manager's identity
    reconciler) or ``mic`` (MIC's process; the manager runs with that reconciler off)."""

    name: str = "nodewright"
    mic: MicProcess | None = field(default=None, repr=False)

    @property
    def peer(self) -> bool:
        return self.name != "nodewright"

    @property
    def user(self) -> str:
        return MIC_USER if self.peer else MANAGER_USER

    def install_crds(self, client: Client) -> None:
        """Every CRD the manager needs; the pod-identity ones in upstream's shape for MIC (no
        status subresource: MIC writes status through the main resource), and its namespace."""
        if not self.peer:
            install_crds(client, RESOURCES)
            return
        install_crds(client, [r for r in RESOURCES if r not in POD_IDENTITY_RESOURCES])
        install_upstream_pod_identity_crds(client)
        client.create(NAMESPACE, {"metadata": {"name": MIC_NAMESPACE}})

    def start(self, plane: ControlPlane, world: _World, work: Path) -> None:
        """Start MIC (nothing for nodewright: the manager is the tool). Side effect: a process."""
        if not self.peer:
            return
        world.call("register_application", MIC_CLIENT_ID, MIC_SECRET)
        info = world.info
        cloud = PeerCloud(
            info["endpoint"],
            info["tenant_id"],
            info["subscription"],
            MIC_CLIENT_ID,
            MIC_SECRET,
            RESOURCE_GROUP,
        )
        self.mic = start_mic(plane, work, cloud, Path(info["ca_file"]))

    def problems(self) -> list[str]:
        if self.mic is not None and not self.mic.process.running():
            return [f"MIC exited with {self.mic.process.exit_code}"]
        return []

    def cpu_seconds(self) -> float:
        return self.mic.process.cpu_seconds() if self.mic is not None else 0.0

    def stop(self) -> None:
        if self.mic is not None:
            self.mic.process.stop(grace=10)


def tool_figures(
    tool: IdentityTool, world: _World, audit_log: Path, since: float, wall: tuple[float, float]
) -> dict[str, Any]:
    """The identity tool's figures for a phase that began at ``since`` (monotonic) and spans
    ``wall`` (wall clock): ARM requests of its caller (MIC's service principal, or the manager's
    token) counted all and for identity assignment alone, and its API writes by resource."""
    if tool.peer:
        counts = world.call("caller_counts", None, MIC_CLIENT_ID, since)
    else:
        counts = world.call("caller_counts", MANAGER_TOKEN, None, since)
    writes = audit_writes(audit_log, tool.user, *wall)
    return {
        "tool": tool.name,
        "arm": counts["all"],
        "arm_identity": counts["identity"],
        "api_writes": dict(sorted(writes.items())),
        "api_writes_identity": sum(v for k, v in writes.items() if k.startswith("azure")),
    }
