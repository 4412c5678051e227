"""process: one manager process, from its config file to its last controller stopped.

Owns the ``Manager`` (``manager``), the services it scopes to itself for its plug-ins
(``services``), and what it runs on: the typed config (``config``), the
reconciler plug-in registry (``registry``), declared RBAC rules and the start-time check that
they are granted (``rbac``, ``permissions``), leader election on a Lease and the server-side
fence's start check (``leaderelection``, ``server_fence``), and ``/metrics`` served behind the
API server's authentication and authorization (``metrics_server``, ``metrics_auth``). The top
layer of the runtime: it may use every other subpackage, and none uses it.
"""

__all__: list[str] = []
