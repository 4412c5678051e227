"""api: the CRD models, a package per group and version (``aadpodidentity/v1``,
``acn/v1alpha``, ``nodewright/v1alpha1`` as they land). Imports nothing internal.

``RESOURCES`` lists every top-level kind; ``make manifests`` generates config/crd from it.
"""

from nodewright.api.aadpodidentity import v1 as aadpodidentity_v1
from nodewright.api.acn import v1alpha as acn_v1alpha
from nodewright.api.acn import v1alpha1 as acn_v1alpha1
from nodewright.api.base import Model, PrinterColumn, Resource, ValidationError, field
from nodewright.api.meta import Condition, ObjectReference
from nodewright.api.nodewright import v1alpha1 as nodewright_v1alpha1

RESOURCES: tuple[type[Resource], ...] = (
    *aadpodidentity_v1.RESOURCES,
    *acn_v1alpha.RESOURCES,
    *acn_v1alpha1.RESOURCES,
    *nodewright_v1alpha1.RESOURCES,
)

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
