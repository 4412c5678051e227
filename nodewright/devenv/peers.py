"""What an unmodified Azure peer (aad-pod-identity's MIC, built on go-autorest) needs to run
against the local ARM emulator and control plane, written for one run (the emulator's port and
tenant change every run):

- an AzureStackCloud environment file, the custom cloud go-autorest reads from
  ``AZURE_ENVIRONMENT_FILEPATH`` when the cloud's name is ``AzureStackCloud``: ARM and Entra both
  at the emulator's endpoint (with the trailing slash go-autorest's public clouds have, since adal
  resolves ``{tenant}/oauth2/token`` against the Entra endpoint);
- an ``azure.json``, the cloud-provider config MIC reads with ``--cloudconfig`` (a service
  principal's client ID and secret, registered with the emulator's v1 token route);
- the environment of the peer's process: those two, ``SSL_CERT_FILE`` (the emulator's CA, so Go's
  TLS trusts it) and ``MIC_POD_NAMESPACE``;
- aad-pod-identity's CRDs in upstream's shape: ours field for field, but with no status
  subresource, since MIC writes ``/status/status`` through the main resource.

Used by ``bench.identity --peer mic``; production never imports devenv. Side effects: the
writers write files, :func:`install_upstream_pod_identity_crds` writes CRDs to the API server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodewright.api.aadpodidentity.v1 import RESOURCES as POD_IDENTITY_RESOURCES
from nodewright.devenv.crds import install_crd_documents
from nodewright.runtime.kube.client import Client

__all__ = [
    "AZURE_STACK_CLOUD",
    "PeerCloud",
    "PeerCloudFiles",
    "azure_json",
    "azure_stack_environment",
    "install_upstream_pod_identity_crds",
    "peer_process_environment",
    "upstream_pod_identity_crds",
    "write_peer_cloud_files",
]

AZURE_STACK_CLOUD = "AzureStackCloud"
"""The cloud name that makes go-autorest read its environment from ``AZURE_ENVIRONMENT_FILEPATH``."""


@dataclass(frozen=True)
class PeerCloud:
    """The emulated cloud as one peer sees it: where ARM and Entra are, whose tenant and
    subscription, and the service principal it signs in as."""

    endpoint: str
    tenant_id: str
    subscription_id: str
    client_id: str
    client_secret: str
    resource_group: str
    vm_type: str = "vmss"


@dataclass(frozen=True)
class PeerCloudFiles:
    """The files :func:`write_peer_cloud_files` wrote."""

    environment_file: Path
    azure_json: Path


def azure_stack_environment(endpoint: str) -> dict[str, Any]:
    """go-autorest's ``Environment`` for the emulator at ``endpoint`` (``https://127.0.0.1:PORT``)."""
    base = endpoint.rstrip("/") + "/"
    return {
        "name": AZURE_STACK_CLOUD,
        "managementPortalURL": base,
        "publishSettingsURL": base,
        "serviceManagementEndpoint": base,
        "resourceManagerEndpoint": base,
        "activeDirectoryEndpoint": base,
        "galleryEndpoint": base,
        "keyVaultEndpoint": base,
        "graphEndpoint": base,
        "storageEndpointSuffix": "core.windows.net",
        "keyVaultDNSSuffix": "vault.azure.net",
        "serviceManagementVMDNSSuffix": "cloudapp.net",
        "resourceManagerVMDNSSuffix": "cloudapp.azure.com",
        "containerRegistryDNSSuffix": "azurecr.io",
        "tokenAudience": base,
        "resourceIdentifiers": {"graph": base, "keyVault": base},
    }


def azure_json(cloud: PeerCloud) -> dict[str, Any]:
    """The ``azure.json`` of a service principal in ``cloud`` (aad-pod-identity's ``AzureConfig``
    keys, as the cloud provider's config file spells them)."""
    return {
        "cloud": AZURE_STACK_CLOUD,
        "tenantId": cloud.tenant_id,
        "subscriptionId": cloud.subscription_id,
        "aadClientId": cloud.client_id,
        "aadClientSecret": cloud.client_secret,
        "resourceGroup": cloud.resource_group,
        "vmType": cloud.vm_type,
        "useManagedIdentityExtension": False,
    }


def write_peer_cloud_files(directory: Path, cloud: PeerCloud) -> PeerCloudFiles:
    """Write ``azure-stack-environment.json`` and ``azure.json`` into ``directory`` (created if
    missing; ``azure.json`` holds a secret, so it is readable by its owner only)."""
    directory.mkdir(parents=True, exist_ok=True)
    environment_file = directory / "azure-stack-environment.json"
    environment_file.write_text(json.dumps(azure_stack_environment(cloud.endpoint), indent=2) + "\n")
    config_file = directory / "azure.json"
    config_file.touch(mode=0o600)
    config_file.chmod(0o600)
    config_file.write_text(json.dumps(azure_json(cloud), indent=2) + "\n")
    return PeerCloudFiles(environment_file=environment_file, azure_json=config_file)


def peer_process_environment(
    files: PeerCloudFiles, ca_file: Path, namespace: str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a peer's process: ``base`` (default empty) plus the custom cloud's file,
    the emulator's CA and the namespace MIC runs in."""
    return {
        **(base or {}),
        "AZURE_ENVIRONMENT_FILEPATH": str(files.environment_file),
        "SSL_CERT_FILE": str(ca_file),
        "MIC_POD_NAMESPACE": namespace,
    }


def upstream_pod_identity_crds() -> list[dict[str, Any]]:
    """aad-pod-identity's four CRDs in upstream v1.8.17's shape: our schemas (field for field
    theirs), no status subresource, so a write of the main resource keeps its status."""
    documents = []
    for resource in POD_IDENTITY_RESOURCES:
        document = resource.custom_resource_definition()
        for version in document["spec"]["versions"]:
            version.pop("subresources", None)
        documents.append(document)
    return documents


def install_upstream_pod_identity_crds(client: Client, timeout: float = 60.0) -> None:
    """Install :func:`upstream_pod_identity_crds` (replacing the spec of CRDs that exist) and wait
    until each is Established. Side effect: API writes."""
    install_crd_documents(client, upstream_pod_identity_crds(), timeout)
