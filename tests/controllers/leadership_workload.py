"""The workload of the leadership fault tests, run by real manager processes (config ``module:``).

Every ConfigMap labelled ``fence-workload`` in ``options.namespace`` is reconciled again and
again (every ``options.periodSeconds``): a value ``api`` patches the ConfigMap itself, a value
``arm`` tags the scale set ``options.scaleSet`` through the real Azure SDK (the manager's Cloud,
so the manager's write fence guards it). A value ``api-unfenced`` patches the
ConfigMap through a client that skips this process's fence (its own connections and an
always-open fence, which still reports the server's refusals): a stand-in for every write that
slips past the client-side fence, so that only the server-side fence stands in its way. API and
ARM writes are kept in separate objects so that a worker stuck on an unreachable API server does
not stop the ARM writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from azure.mgmt.compute.models import VirtualMachineScaleSetUpdate

from nodewright.controllers.cloud_access import clouds_of
from nodewright.runtime.control.reconcile import Request, Result
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.fence import WriteFence
from nodewright.runtime.kube.kinds import CONFIG_MAP
from nodewright.runtime.process.manager import Manager

LABEL = "fence-workload"


def setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """Wire the controller (side effect: registers it with ``manager``)."""
    namespace = str(options["namespace"])
    group, scale_set = str(options["resourceGroup"]), str(options["scaleSet"])
    period = float(options.get("periodSeconds", 0.1))
    scale_sets = clouds_of(manager).from_options(options).clients.compute.virtual_machine_scale_sets
    config_maps = manager.cache.informer(CONFIG_MAP, namespace=namespace, label_selector=LABEL)
    me = f"{os.getpid()}"
    unfenced = Client(
        manager.client.with_own_connections().transport, fence=WriteFence.always_open(manager.metrics)
    )

    def reconcile(request: Request) -> Result:
        config_map = config_maps.store.get(request.key)
        if config_map is None:
            return Result()
        stamp = f"{me}-{time.time():.3f}"
        if config_map["metadata"]["labels"][LABEL] == "arm":
            update = VirtualMachineScaleSetUpdate(tags={request.name: stamp})
            scale_sets.begin_update(group, scale_set, update).result()
        else:
            client = unfenced if config_map["metadata"]["labels"][LABEL] == "api-unfenced" else manager.client
            client.patch(CONFIG_MAP, request.name, {"data": {"stamp": stamp}}, request.namespace)
        return Result(requeue_after=period)

    workers = int(options.get("workers", 4))
    (
        manager.controller("fence-workload")
        .for_(CONFIG_MAP, namespace=namespace, label_selector=LABEL)
        .with_options(max_concurrent_reconciles=workers)
        .complete(reconcile)
    )
