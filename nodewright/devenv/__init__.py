"""The local environment: a real control plane (etcd + kube-apiserver) on loopback, used by the
test fixtures and by ``make run``. Sits on top beside ``controllers``; nothing imports it at
production run time.

``ControlPlane`` and its neighbours are imported on first use, not with the package: importing
``controlplane`` brings in the cloud layer and the Azure SDK (seconds on a loaded machine), and
``python -m nodewright.devenv up`` must lock its work directory before that (``worklock``).
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from nodewright.devenv.controlplane import ControlPlane, ControlPlaneError, find_binaries

__all__ = ["ControlPlane", "ControlPlaneError", "find_binaries"]


def __getattr__(name: str) -> typing.Any:
    """The public names of ``controlplane``, imported when first asked for (PEP 562) and kept in
    the package from then on."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("nodewright.devenv.controlplane"), name)
    globals()[name] = value
    return value
