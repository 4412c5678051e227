"""Kubernetes resource kinds as the runtime addresses them.

Owns ``Kind``: the (apiVersion, kind, plural, namespaced) quadruple that tells the client and
the informers which REST path serves a resource, plus the built-in kinds the runtime itself
uses. CRD kinds are declared by ``nodewright.api`` models and turned into ``Kind`` values by the
controllers layer, so this module knows nothing of our custom resources.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CONFIG_MAP",
    "EVENT",
    "LEASE",
    "NAMESPACE",
    "NODE",
    "POD",
    "POD_DISRUPTION_BUDGET",
    "SECRET",
    "Kind",
]


@dataclass(frozen=True, slots=True)
class Kind:
    """One resource type served by the API server."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection, or of one object when ``name`` is given."""
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base = f"{base}/namespaces/{namespace}"
        base = f"{base}/{self.plural}"
        return f"{base}/{name}" if name else base

    def __str__(self) -> str:
        return f"{self.kind}.{self.api_version}"


POD = Kind("v1", "Pod", "pods")
NODE = Kind("v1", "Node", "nodes", namespaced=False)
NAMESPACE = Kind("v1", "Namespace", "namespaces", namespaced=False)
CONFIG_MAP = Kind("v1", "ConfigMap", "configmaps")
SECRET = Kind("v1", "Secret", "secrets")
EVENT = Kind("v1", "Event", "events")
LEASE = Kind("coordination.k8s.io/v1", "Lease", "leases")
POD_DISRUPTION_BUDGET = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
