"""nodewright: a controller-runtime-style Python operator for Azure-backed Kubernetes nodes.

Packages, from the bottom up: ``runtime`` (the framework), ``api`` (CRD models), ``cloud``
(Azure SDK access and the local ARM emulator), ``ipam`` (pure IP-pool arithmetic), and on top
``controllers`` (the reconcilers and the composition root) and ``devenv`` (the local control
plane and node simulator used by tests and ``make run``).
"""

__version__ = "0.1.0.dev0"

__all__ = ["__version__"]
