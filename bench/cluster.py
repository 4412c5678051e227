"""Which cluster a reconciler benchmark runs on: the kubeconfig it was given, or else a private
local control plane for the duration of the run (started and stopped here)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from nodewright.devenv import ControlPlane

__all__ = ["cluster_kubeconfig"]


@contextlib.contextmanager
def cluster_kubeconfig(path: str | None) -> Iterator[str]:
    """Yield ``path`` when given, else the kubeconfig of a private control plane."""
    if path:
        yield path
        return
    with ControlPlane() as plane:
        yield str(plane.kubeconfig)
