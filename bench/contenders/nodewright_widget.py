"""The nodewright contender: a Widget reconciler on nodewright's Manager and builder.

It reads the Widget from the shared cache and, unless its status already says
``observedGeneration == generation`` and ``Ready=True``, merge-patches the status subresource
through ``Client.patch`` — the same write every contender makes. The manager runs with no
metrics or health servers and no leader election, watching one namespace. On SIGTERM it
drains, stops and prints one JSON line with its counters.

Side effects: network I/O to the API server; logs to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import threading

from bench.workload import WIDGET_API_VERSION, WIDGET_PLURAL, is_converged, ready_status
from nodewright.runtime import errors
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.informers.cache import Cache
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.observe.logs import configure
from nodewright.runtime.process.config import HealthConfig, LeaderElectionConfig, ManagerConfig, MetricsConfig
from nodewright.runtime.process.manager import Manager

WIDGET = Kind(WIDGET_API_VERSION, "Widget", WIDGET_PLURAL)


class WidgetReconciler:
    """Sets observedGeneration and Ready=True on every Widget whose status lags."""

    def __init__(self, cache: Cache, client: Client) -> None:
        self.cache = cache
        self.client = client
        self.reconciles = 0
        self.patches = 0
        self._lock = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        with self._lock:
            self.reconciles += 1
        try:
            widget = self.cache.get(WIDGET, request.name, request.namespace)
        except errors.NotFound:
            return Result()
        if is_converged(widget):
            return Result()
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = ready_status(int(widget["metadata"].get("generation", 0)), now)
        try:
            self.client.patch(
                WIDGET, request.name, body, request.namespace, patch_type="merge", subresource="status"
            )
        except errors.NotFound:
            return Result()
        with self._lock:
            self.patches += 1
        return Result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)

    configure(args.log_level, "json")
    config = ManagerConfig(
        metrics=MetricsConfig(bind_address="0"),
        health=HealthConfig(bind_address="0"),
        leader_election=LeaderElectionConfig(enabled=False),
    )
    manager = Manager(config, kubeconfig=args.kubeconfig)
    reconciler = WidgetReconciler(manager.cache, manager.client)
    (
        manager.controller("widget")
        .for_(WIDGET, namespace=args.namespace)
        .with_options(max_concurrent_reconciles=args.workers)
        .complete(reconciler)
    )
    manager.run()
    print(json.dumps({"reconciles": reconciler.reconciles, "patches": reconciler.patches}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
