"""The local cluster ``bench.scale`` runs on: ``ControlPlane`` with settings that hold at 1,000
kwok nodes on two cores (../shared/DESIGN.md: kwok falls behind renewing node leases and nodes
go NotReady otherwise).

Owns ``ScaleControlPlane`` and ``CLUSTER_SETTINGS`` (pure: each component's extra flags):
- kwok: node leases of ``LEASE_SECONDS`` (renewed every quarter of that, 30 s: at 1,000 nodes 33
  lease writes a second instead of 100);
- kube-controller-manager: ``--node-monitor-grace-period`` well above the renewal interval, so a
  renewal that runs late on a busy machine does not mark a Node NotReady, and client QPS 100
  (burst 200) instead of 20, so the Deployment and ReplicaSet controllers create 10 pods per
  node in minutes, not tens of minutes;
- kube-scheduler: client QPS 100 (burst 200) instead of 50, for the same reason.
None of these touch the manager; they are the cluster a 1,000-node production cluster has
(real kubelets renew their own leases, and the control plane has more than two cores).

Side effects: the processes ``ControlPlane`` starts.
"""

from __future__ import annotations

import time

from nodewright.devenv.components import grant_kwok, prepare_components
from nodewright.devenv.controlplane import COMPONENTS, ControlPlane, free_port

__all__ = ["CLUSTER_SETTINGS", "LEASE_SECONDS", "ScaleControlPlane", "with_settings"]

LEASE_SECONDS = 120
NODE_MONITOR_GRACE_SECONDS = 240
CLUSTER_SETTINGS: dict[str, dict[str, str]] = {
    "kwok": {"--node-lease-duration-seconds": str(LEASE_SECONDS)},
    "kube-controller-manager": {
        "--node-monitor-grace-period": f"{NODE_MONITOR_GRACE_SECONDS}s",
        "--kube-api-qps": "100",
        "--kube-api-burst": "200",
    },
    "kube-scheduler": {"--kube-api-qps": "100", "--kube-api-burst": "200"},
}
"""Component -> flag -> value, replacing the flag where ``components`` already sets it."""


def with_settings(name: str, arguments: list[str]) -> list[str]:
    """Pure: ``arguments`` of component ``name`` with ``CLUSTER_SETTINGS`` applied."""
    settings = CLUSTER_SETTINGS.get(name, {})
    kept = [a for a in arguments if a.split("=", 1)[0] not in settings]
    return kept + [f"{flag}={value}" for flag, value in settings.items()]


class ScaleControlPlane(ControlPlane):
    """``ControlPlane`` whose components start with ``CLUSTER_SETTINGS``."""

    def _start_components(self, deadline: float) -> None:
        assert self._binaries is not None
        assert self.ca is not None
        assert self._binaries.components is not None, "build the control plane's components first"

        ports = {name: free_port() for name in COMPONENTS}
        components = prepare_components(self.work_dir, self.server, self.ca, self._binaries.components, ports)
        admin = self.admin_ssl_context()
        grant_kwok(self.server, admin, timeout=max(deadline - time.monotonic(), 1.0))
        for component in components:
            arguments = with_settings(component.name, component.arguments)
            self.component_processes[component.name] = self._spawn(component.name, arguments)
        for component in components:
            self._wait_healthy(component, admin, deadline)
