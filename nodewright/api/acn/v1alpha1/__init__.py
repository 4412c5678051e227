"""acn.azure.com/v1alpha1, wire-compatible with Azure CNS: ClusterSubnetState.

One object per subnet (usually in kube-system, named after the subnet). The control plane writes
whether the subnet is exhausted; a node that reads ``exhausted: true`` shrinks its scaler to a
batch of one. Field for field as azure-container-networking's
``crd/clustersubnetstate/api/v1alpha1`` type: status only, both fields always written and
required by the CRD. Imports nothing internal but the model base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nodewright.api.base import Model, PrinterColumn, Resource, field

__all__ = ["RESOURCES", "ClusterSubnetState", "ClusterSubnetStateStatus"]


@dataclass(kw_only=True)
class ClusterSubnetStateStatus(Model):
    """Whether the subnet is exhausted, and when that was last decided (a timestamp string)."""

    exhausted: bool = field(omit_empty=False)
    timestamp: str = field(omit_empty=False)


@dataclass(kw_only=True)
class ClusterSubnetState(Resource):
    """The state of one subnet as the control plane sees it."""

    API_VERSION: ClassVar[str] = "acn.azure.com/v1alpha1"
    KIND: ClassVar[str] = "ClusterSubnetState"
    PLURAL: ClassVar[str] = "clustersubnetstates"
    NAMESPACED: ClassVar[bool] = True
    STATUS_SUBRESOURCE: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Exhausted", ".status.exhausted"),
        PrinterColumn("Updated", ".status.timestamp"),
    )

    status: ClusterSubnetStateStatus | None = None


RESOURCES: tuple[type[Resource], ...] = (ClusterSubnetState,)
