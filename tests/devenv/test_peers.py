"""The files an unmodified peer (aad-pod-identity's MIC) is given for one run: go-autorest's
AzureStackCloud environment and ``azure.json``, pointing at this run's emulator and tenant, whose
Entra endpoint answers the v1 token request adal derives from them; and upstream-shaped CRDs."""

from __future__ import annotations

import json
import ssl
import stat
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from nodewright.cloud.emulator import DEFAULT_SUBSCRIPTION, ArmEmulator
from nodewright.devenv import ControlPlane
from nodewright.devenv.peers import (
    AZURE_STACK_CLOUD,
    PeerCloud,
    install_upstream_pod_identity_crds,
    peer_process_environment,
    upstream_pod_identity_crds,
    write_peer_cloud_files,
)
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind

ASSIGNED = Kind("aadpodidentity.k8s.io/v1", "AzureAssignedIdentity", "azureassignedidentities")


def peer_cloud(emulator: ArmEmulator) -> PeerCloud:
    return PeerCloud(
        endpoint=emulator.endpoint,
        tenant_id=emulator.state.tenant_id,
        subscription_id=DEFAULT_SUBSCRIPTION,
        client_id="0f6e1a52-3c1b-4e0f-9a77-0c4d7c1b2a11",
        client_secret="mic-secret",
        resource_group="rg-nodes",
    )


def test_the_files_point_adal_at_this_runs_emulator_and_tenant(
    arm_emulator: ArmEmulator, tmp_path: Path
) -> None:
    """The environment names the emulator as ARM and Entra (go-autorest's JSON keys), azure.json
    names the tenant, subscription and service principal (aad-pod-identity's keys, readable by its
    owner only), and the token request adal builds from them (Entra endpoint + tenant +
    ``/oauth2/token``, resource = ARM endpoint) is granted by the emulator."""
    cloud = peer_cloud(arm_emulator)
    arm_emulator.entra.register_application(cloud.client_id, cloud.client_secret)
    files = write_peer_cloud_files(tmp_path / "mic", cloud)

    environment = json.loads(files.environment_file.read_text())
    config = json.loads(files.azure_json.read_text())
    assert environment["name"] == AZURE_STACK_CLOUD
    assert environment["resourceManagerEndpoint"] == arm_emulator.endpoint + "/"
    assert environment["activeDirectoryEndpoint"] == arm_emulator.endpoint + "/"
    assert config == {
        "cloud": AZURE_STACK_CLOUD,
        "tenantId": arm_emulator.state.tenant_id,
        "subscriptionId": DEFAULT_SUBSCRIPTION,
        "aadClientId": cloud.client_id,
        "aadClientSecret": cloud.client_secret,
        "resourceGroup": "rg-nodes",
        "vmType": "vmss",
        "useManagedIdentityExtension": False,
    }
    assert stat.S_IMODE(files.azure_json.stat().st_mode) == 0o600

    token_url = urllib.parse.urljoin(
        environment["activeDirectoryEndpoint"], f"{config['tenantId']}/oauth2/token"
    )
    form = {
        "grant_type": "client_credentials",
        "client_id": config["aadClientId"],
        "client_secret": config["aadClientSecret"],
        "resource": environment["resourceManagerEndpoint"],
    }
    request = urllib.request.Request(token_url, data=urllib.parse.urlencode(form).encode(), method="POST")  # noqa: S310 - https, our loopback
    context = ssl.create_default_context(cafile=str(arm_emulator.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=10) as response:  # noqa: S310 - our loopback
        assert json.loads(response.read())["resource"] == environment["resourceManagerEndpoint"]

    process = peer_process_environment(files, arm_emulator.ca_file, "mic-system", {"PATH": "/usr/bin"})
    assert process == {
        "PATH": "/usr/bin",
        "AZURE_ENVIRONMENT_FILEPATH": str(files.environment_file),
        "SSL_CERT_FILE": str(arm_emulator.ca_file),
        "MIC_POD_NAMESPACE": "mic-system",
    }


def test_upstream_crds_have_no_status_subresource() -> None:
    """The four aad-pod-identity CRDs, none with a status subresource (upstream v1.8.17's shape)."""
    names = {document["metadata"]["name"] for document in upstream_pod_identity_crds()}
    assert names == {
        "azureidentities.aadpodidentity.k8s.io",
        "azureidentitybindings.aadpodidentity.k8s.io",
        "azureassignedidentities.aadpodidentity.k8s.io",
        "azurepodidentityexceptions.aadpodidentity.k8s.io",
    }
    for document in upstream_pod_identity_crds():
        assert all("subresources" not in version for version in document["spec"]["versions"])


def test_mic_status_patch_through_the_main_resource_is_kept(
    control_plane_factory: Callable[..., ControlPlane],
) -> None:
    """With upstream's CRDs (on a private API server: the session's keeps ours), MIC's JSON patch
    of ``/status/status`` on the main resource lands; with our CRDs' status subresource the API
    server would ignore it."""
    kube_api = Client.from_kubeconfig(control_plane_factory().kubeconfig)
    namespace = "default"
    install_upstream_pod_identity_crds(kube_api)
    created = kube_api.create(
        ASSIGNED,
        {
            "metadata": {"name": "pod-ns-id", "namespace": namespace},
            "spec": {"pod": "pod", "podNamespace": namespace, "nodename": "node-0"},
            "status": {"status": "Created"},
        },
        namespace,
    )
    assert (created.get("status") or {}).get("status") == "Created"
    patch = [{"op": "replace", "path": "/status/status", "value": "Assigned"}]
    kube_api.patch(ASSIGNED, "pod-ns-id", patch, namespace, patch_type="json")
    assert kube_api.get(ASSIGNED, "pod-ns-id", namespace)["status"]["status"] == "Assigned"
