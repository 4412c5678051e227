"""api: the CRD models, a package per group and version (``aadpodidentity/v1``,
``acn/v1alpha``, ``nodewright/v1alpha1`` as they land). Imports nothing internal.

``RESOURCES`` lists every top-level kind; ``make manifests`` generates config/crd from it.
"""

from nodewright.api.base import Model, PrinterColumn, Resource, ValidationError, field
from nodewright.api.meta import Condition, ObjectReference

RESOURCES: tuple[type[Resource], ...] = ()

__all__ = [
    "RESOURCES",
    "Condition",
    "Model",
    "ObjectReference",
    "PrinterColumn",
    "Resource",
    "ValidationError",
    "field",
]
