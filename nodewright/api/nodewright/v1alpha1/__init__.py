"""nodewright.io/v1alpha1: NodeImage, ScalingGroup, PendingNode, AutoscalingStrategy."""

from nodewright.api.base import Resource

RESOURCES: tuple[type[Resource], ...] = ()

__all__ = ["RESOURCES"]
