"""acn.azure.com/v1alpha1 (Azure CNS wire-compatible): ClusterSubnetState."""

from nodewright.api.base import Resource

RESOURCES: tuple[type[Resource], ...] = ()

__all__ = ["RESOURCES"]
