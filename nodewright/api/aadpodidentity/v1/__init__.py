"""aadpodidentity.k8s.io/v1, wire-compatible with aad-pod-identity v1.8: AzureIdentity,
AzureIdentityBinding, AzureAssignedIdentity, AzurePodIdentityException."""

from nodewright.api.base import Resource

RESOURCES: tuple[type[Resource], ...] = ()

__all__ = ["RESOURCES"]
