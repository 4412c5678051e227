"""The bridge from our CRD models to the runtime: ``kind_of`` builds the runtime ``Kind`` of an
``api`` model from its class variables (API version, kind, plural, namespaced).

It lives in ``controllers`` because it needs both ``api`` and ``runtime``, which may not import
each other; each reconciler package builds the ``Kind`` values it watches with it. Pure; no I/O.
"""

from __future__ import annotations

from nodewright.api.base import Resource
from nodewright.runtime import Kind

__all__ = ["kind_of"]


def kind_of(model: type[Resource]) -> Kind:
    """The runtime ``Kind`` of a CRD model."""
    return Kind(model.API_VERSION, model.KIND, model.PLURAL, model.NAMESPACED)
