"""AutoscalingStrategy: whether the cluster autoscaler runs, which Deployment it is, and the
extra arguments it gets.

Constellation's AutoscalingStrategy in our group ``nodewright.io``. The NodeImage reconciler
turns ``spec.enabled`` off while a rollout is in progress (new machines would otherwise race the
autoscaler) and puts back the value it found once the rollout is over; it keeps that value in the
``nodewright.io/autoscaling-enabled-before-rollout`` annotation so a restart does not lose it.
Cluster-scoped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nodewright.api.base import Model, PrinterColumn, Resource, field

__all__ = [
    "ENABLED_BEFORE_ROLLOUT_ANNOTATION",
    "AutoscalingStrategy",
    "AutoscalingStrategySpec",
    "AutoscalingStrategyStatus",
]

ENABLED_BEFORE_ROLLOUT_ANNOTATION = "nodewright.io/autoscaling-enabled-before-rollout"
"""On an AutoscalingStrategy: ``spec.enabled`` as it was before a rollout turned it off."""


@dataclass(kw_only=True)
class AutoscalingStrategySpec(Model):
    """Whether autoscaling should run and where the autoscaler Deployment is."""

    enabled: bool = field(omit_empty=False, description="Whether the cluster autoscaler should run.")
    deployment_name: str = field(description="The cluster autoscaler Deployment's name.")
    deployment_namespace: str = field(description="The cluster autoscaler Deployment's namespace.")
    autoscaler_extra_args: dict[str, str] = field(
        default_factory=dict,
        description="Extra command-line flags for the autoscaler, as flag name to value (without --).",
    )


@dataclass(kw_only=True)
class AutoscalingStrategyStatus(Model):
    """Whether the autoscaler actually runs."""

    enabled: bool = field(default=False, description="Whether the cluster autoscaler is running.")
    replicas: int = field(
        default=0, description="The autoscaler Deployment's replicas.", schema={"minimum": 0}
    )


@dataclass(kw_only=True)
class AutoscalingStrategy(Resource):
    """Whether and how the cluster autoscaler runs."""

    API_VERSION: ClassVar[str] = "nodewright.io/v1alpha1"
    KIND: ClassVar[str] = "AutoscalingStrategy"
    PLURAL: ClassVar[str] = "autoscalingstrategies"
    NAMESPACED: ClassVar[bool] = False
    CATEGORIES: ClassVar[tuple[str, ...]] = ("nodewright",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Enabled", ".spec.enabled", type="boolean", description="Whether it should run"),
        PrinterColumn("Running", ".status.enabled", type="boolean", description="Whether it runs"),
        PrinterColumn("Deployment", ".spec.deploymentName"),
        PrinterColumn("Namespace", ".spec.deploymentNamespace"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )

    spec: AutoscalingStrategySpec
    status: AutoscalingStrategyStatus = field(default_factory=AutoscalingStrategyStatus)
