"""acn.azure.com/v1alpha (Azure CNS wire-compatible): NodeNetworkConfig."""

from nodewright.api.base import Resource

RESOURCES: tuple[type[Resource], ...] = ()

__all__ = ["RESOURCES"]
