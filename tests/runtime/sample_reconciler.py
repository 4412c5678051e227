"""A sample reconciler: the whole extension story in one module plus one config entry.

    reconcilers:
      sample: {module: tests.runtime.sample_reconciler, options: {greeting: hello}}

It writes ``options.greeting`` into ``data.greeting`` of every ConfigMap labelled ``sample=yes``
and counts those writes on its manager's /metrics (``sample_greetings_written_total``). All it
uses comes from ``manager``: its controller's client and cache view, and the metrics (and
``manager.services`` for anything its plug-ins share); nothing lives at module level.
"""

from collections.abc import Mapping
from typing import Any

from nodewright.runtime import CONFIG_MAP, Manager, ReconcilerPlugin, Request, Result

SELECTOR = "sample=yes"


def setup(manager: Manager, options: Mapping[str, Any]) -> None:
    """Wire the controller: reconcile labelled ConfigMaps (side effect: registers it)."""
    greeting = str(options.get("greeting", "hello"))
    # 1. A controller: its client records our writes, its cache view shows them until the watch does.
    builder = manager.controller("sample")
    config_maps = builder.cache.informer(CONFIG_MAP, label_selector=SELECTOR)
    meter = manager.metrics.provider.get_meter("sample")
    written = meter.create_counter("sample_greetings_written", description="Greetings written")

    # 2. One pass: read from the cache, decide, write only what differs (level-based).
    def reconcile(request: Request) -> Result:
        config_map = config_maps.store.get(request.key)
        if config_map is None:  # deleted: nothing to do
            return Result()
        if (config_map.get("data") or {}).get("greeting") != greeting:
            body = {"data": {"greeting": greeting}}
            builder.client.patch(CONFIG_MAP, request.name, body, request.namespace)
            written.add(1)
        return Result()

    # 3. What wakes it: labelled ConfigMaps; then it starts with the manager.
    builder.for_(CONFIG_MAP, label_selector=SELECTOR).complete(reconcile)


PLUGIN = ReconcilerPlugin("sample", setup)
