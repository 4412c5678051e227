"""Our writes to NodeNetworkConfigs, and reading through their answers.

Owns ``ConfigWrites``: merge patches of a NodeNetworkConfig (metadata, spec, status) and the
``RecentWrites`` of their answers (and of the spec writer's applies), which a pass reads through
(``newer``) so that a pass before the watch catches up decides from our last write, not the
cache's older copy (#962). The one place the reconciler touches ``RecentWrites``. Side effects:
Kubernetes patches.
"""

from __future__ import annotations

import copy
from typing import Any

from nodewright.controllers.node_network_config.resources import NODE_NETWORK_CONFIG
from nodewright.runtime.client import Client
from nodewright.runtime.recent_writes import RecentWrites

__all__ = ["ConfigWrites"]

Object = dict[str, Any]


class ConfigWrites:
    """Patches our NodeNetworkConfigs and remembers the answers (see the module docstring)."""

    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace
        self._written = RecentWrites()  # our writes' answers, until the cache shows them

    def patch(self, name: str, body: Object, subresource: str | None = None) -> Object:
        """Merge-patch our NodeNetworkConfig (side effect). Spec (on the demand side) and status
        are ours alone, so no resourceVersion precondition: a stale cache cannot make it fail.
        The answer is remembered (a copy: callers may change theirs) for the next passes."""
        stored = self._client.patch(NODE_NETWORK_CONFIG, name, body, self._namespace, subresource=subresource)
        self.remember(stored)
        return stored

    def remember(self, stored: Object) -> None:
        """Keep a write's answer (a copy) until the cache shows it."""
        self._written.remember(copy.deepcopy(stored))

    def newer(self, cached: Object) -> Object:
        """A copy of ``cached``, or of our last write's answer when that is newer."""
        return copy.deepcopy(self._written.newer(cached))
