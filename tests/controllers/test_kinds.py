"""kind_of: the runtime Kind of a CRD model carries the model's API version, kind, plural and scope."""

from __future__ import annotations

from nodewright.api.aadpodidentity.v1 import AzureIdentity
from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.nodewright.v1alpha1 import NodeImage
from nodewright.controllers.kinds import kind_of
from nodewright.runtime.kube.kinds import Kind


def test_kind_of_copies_the_model_class_variables() -> None:
    """Cluster-scoped and namespaced models alike, across the three API groups."""
    assert kind_of(NodeImage) == Kind("nodewright.io/v1alpha1", "NodeImage", "nodeimages", False)
    assert kind_of(AzureIdentity) == Kind(
        "aadpodidentity.k8s.io/v1", "AzureIdentity", "azureidentities", True
    )
    assert kind_of(NodeNetworkConfig) == Kind(
        "acn.azure.com/v1alpha", "NodeNetworkConfig", "nodenetworkconfigs", True
    )
