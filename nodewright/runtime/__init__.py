"""runtime: a controller-runtime for Python.

Knows Kubernetes in general and nothing of Azure or our custom resources. Public surface is
re-exported here as modules land.
"""

from nodewright.runtime.kinds import Kind
from nodewright.runtime.reconcile import Reconciler, Request, Result, TerminalError

__all__ = ["Kind", "Reconciler", "Request", "Result", "TerminalError"]
