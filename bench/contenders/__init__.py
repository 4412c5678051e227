"""The Python programs under test, each started by the harness as its own process.

``nodewright_widget`` and ``kopf_widget`` reconcile Widgets with a framework,
``raw_ceiling`` sends the same status patches with plain threads and no framework,
``nodewright_cache`` fills a nodewright informer with Pods for the memory benchmark. The Go
peers live in ``bench/peers``.
"""
