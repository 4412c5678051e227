"""The kopf contender: the Widget handler written the way kopf is meant to be used.

``@kopf.on.resume``/``on.create``/``on.update`` handlers (kopf's change detection, which keeps
its last-handled state in an annotation) put ``observedGeneration`` and a ``Ready`` condition
into the patch that kopf applies to the status subresource. Event posting is switched off
(the other contenders post no Events); everything else keeps kopf's defaults. Run with
``python -m bench.contenders.kopf_widget --kubeconfig K --namespace NS``: standalone (no
peering), one namespace. On SIGTERM kopf stops and this prints one JSON line with counters.

Side effects: network I/O to the API server; logs to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
import threading
from typing import Any

import kopf

from bench.workload import WIDGET_GROUP, WIDGET_PLURAL, ready_status

counters = {"reconciles": 0, "patches": 0}
_lock = threading.Lock()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False
    settings.watching.server_timeout = 600


@kopf.on.resume(WIDGET_GROUP, "v1alpha1", WIDGET_PLURAL)
@kopf.on.create(WIDGET_GROUP, "v1alpha1", WIDGET_PLURAL)
@kopf.on.update(WIDGET_GROUP, "v1alpha1", WIDGET_PLURAL, field="spec")
def reconcile(meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    with _lock:
        counters["reconciles"] += 1
    generation = int(meta.get("generation", 0))
    conditions = status.get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if status.get("observedGeneration") == generation and ready:
        return
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    desired = ready_status(generation, now)["status"]
    patch.status["observedGeneration"] = desired["observedGeneration"]
    patch.status["conditions"] = desired["conditions"]
    with _lock:
        counters["patches"] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args(argv)
    os.environ["KUBECONFIG"] = args.kubeconfig
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    kopf.run(standalone=True, namespaces=[args.namespace], clusterwide=False)
    print(json.dumps(counters), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
