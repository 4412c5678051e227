"""informers: the read side, objects mirrored from watches into indexed in-memory stores.

Owns the reflector and its store (``informer``; what a store keeps of an object is
``transforms``'s), the shared ``Cache`` that hands one informer per kind and selector to every
controller (``cache``), the record of a controller's own writes the cache may not show yet
(``recent_writes``) and the view that lays them over the shared stores for that controller
(``cache_view``: read your own writes). Built on ``kube``'s client; it decides nothing about
what to reconcile.
"""

__all__: list[str] = []
