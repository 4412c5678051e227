"""Our merge patches of NodeNetworkConfigs.

Owns ``ConfigWrites``: merge patches of a NodeNetworkConfig (metadata, spec, status) through the
controller's own client (``builder.client``), whose answers the controller's cache view
(``builder.cache``) lays over the informer's copy, so that a pass before the watch catches up
decides from our last write, not the cache's older copy (#962). Side effects: Kubernetes patches.
"""

from __future__ import annotations

from typing import Any

from nodewright.controllers.node_network_config.resources import NODE_NETWORK_CONFIG
from nodewright.runtime import Client

__all__ = ["ConfigWrites"]

Object = dict[str, Any]


class ConfigWrites:
    """Patches our NodeNetworkConfigs and remembers the answers (see the module docstring)."""

    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace

    def patch(self, name: str, body: Object, subresource: str | None = None) -> Object:
        """Merge-patch our NodeNetworkConfig (side effect). Spec (on the demand side) and status
        are ours alone, so no resourceVersion precondition: a stale cache cannot make it fail."""
        return self._client.patch(NODE_NETWORK_CONFIG, name, body, self._namespace, subresource=subresource)
