"""The local environment: a real control plane (etcd + kube-apiserver) on loopback, used by the
test fixtures and by ``make run``. Sits on top beside ``controllers``; nothing imports it at
production run time.
"""

from nodewright.devenv.controlplane import ControlPlane, ControlPlaneError, find_binaries

__all__ = ["ControlPlane", "ControlPlaneError", "find_binaries"]
