"""Installing our CRDs into a cluster and waiting until they are served: used by the local demo
and by tests. Side effects: API writes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

from nodewright.api import RESOURCES, Resource
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind

__all__ = ["CUSTOM_RESOURCE_DEFINITION", "install_crd_documents", "install_crds"]

CUSTOM_RESOURCE_DEFINITION = Kind(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False
)


def install_crds(
    client: Client, resources: Iterable[type[Resource]] = RESOURCES, timeout: float = 60.0
) -> None:
    """Create each resource's CRD (refreshing its spec if it exists) and wait until Established."""
    install_crd_documents(client, [resource.custom_resource_definition() for resource in resources], timeout)


def install_crd_documents(client: Client, documents: Iterable[dict[str, Any]], timeout: float = 60.0) -> None:
    """Create each CRD document (refreshing its spec if it exists) and wait until Established."""
    wanted = list(documents)
    for crd in wanted:
        try:
            client.create(CUSTOM_RESOURCE_DEFINITION, crd)
        except errors.AlreadyExists:
            with contextlib.suppress(errors.Conflict):
                client.patch(CUSTOM_RESOURCE_DEFINITION, crd["metadata"]["name"], {"spec": crd["spec"]})
    deadline = time.monotonic() + timeout
    for crd in wanted:
        name = crd["metadata"]["name"]
        while True:
            conditions = (client.get(CUSTOM_RESOURCE_DEFINITION, name).get("status") or {}).get(
                "conditions"
            ) or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} was not established in time")
            time.sleep(0.2)
