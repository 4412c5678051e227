"""config/rbac is least privilege and sufficient: the roles grant no wildcard and no Secret, and a
manager holding nothing but the ServiceAccount token bound to them does its work on a real API
server with RBAC authorization on."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodewright.cloud.emulator import ArmEmulator
from nodewright.controllers.main import REGISTRY
from nodewright.controllers.node_image.resources import NODE_IMAGE, SCALING_GROUP
from nodewright.devenv.crds import install_crds
from nodewright.runtime import errors
from nodewright.runtime.client import Client
from nodewright.runtime.config import parse_config
from nodewright.runtime.kinds import Kind
from nodewright.runtime.manager import Manager
from tests.conftest import Cluster
from tests.controllers.identity.helpers import World, wait_for, world_for
from tests.runtime.manager_helpers import RunningManager

PROJECT = Path(__file__).resolve().parents[2]
KUBECTL = Path(os.environ.get("NODEWRIGHT_CACHE", Path.home() / ".cache" / "nodewright")) / "bin" / "kubectl"
SYSTEM_NAMESPACE = "nodewright-system"
SERVICE_ACCOUNT = "nodewright-manager"
RBAC_KINDS = {
    "ServiceAccount": Kind("v1", "ServiceAccount", "serviceaccounts"),
    "Role": Kind("rbac.authorization.k8s.io/v1", "Role", "roles"),
    "RoleBinding": Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    "ClusterRole": Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False),
    "ClusterRoleBinding": Kind(
        "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
    ),
}
NAMESPACE_KIND = Kind("v1", "Namespace", "namespaces", namespaced=False)


def rendered() -> list[dict[str, Any]]:
    """What `kubectl kustomize config/default` renders (the deployable set)."""
    output = subprocess.run(
        [str(KUBECTL), "kustomize", str(PROJECT / "config" / "default")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [document for document in yaml.safe_load_all(output) if document]


def test_roles_grant_no_wildcard_and_no_secret() -> None:
    """Every rule names its groups, resources and verbs; nothing reads or writes Secrets."""
    rules = [
        (document["metadata"]["name"], rule)
        for document in rendered()
        if document["kind"] in ("ClusterRole", "Role")
        for rule in document["rules"]
    ]
    assert rules
    for role, rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"{role} uses a wildcard in {field}: {rule}"
        assert "secrets" not in rule["resources"], f"{role} grants Secrets: {rule}"
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), f"{role}: {rule}"


def apply_rbac(admin: Client) -> None:
    """Create (or refresh) the namespace, ServiceAccount, roles and bindings of config/default."""
    with contextlib.suppress(errors.AlreadyExists):
        admin.create(NAMESPACE_KIND, {"metadata": {"name": SYSTEM_NAMESPACE}})
    for document in rendered():
        kind = RBAC_KINDS.get(document["kind"])
        if kind is None:
            continue
        namespace = document["metadata"].get("namespace")
        try:
            admin.create(kind, document, namespace)
        except errors.AlreadyExists:
            current = admin.get(kind, document["metadata"]["name"], namespace)
            document["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            admin.update(kind, document)


def service_account_kubeconfig(admin: Client, cluster: Cluster, directory: Path) -> Path:
    """A kubeconfig that authenticates only as the manager's ServiceAccount."""
    response = admin.request(
        "POST",
        f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": response.json()["status"]["token"]}
    path = directory / "service-account.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def restricted_manager(
    cluster: Cluster, arm_emulator: ArmEmulator, namespace: str, tmp_path: Path
) -> Iterator[tuple[World, Path]]:
    with world_for(cluster, arm_emulator, namespace) as world:
        apply_rbac(world.client)
        yield world, service_account_kubeconfig(world.client, cluster, tmp_path)


def test_the_service_account_cannot_read_secrets(restricted_manager: tuple[World, Path]) -> None:
    """The token really is restricted: a Secret read is Forbidden."""
    _, kubeconfig = restricted_manager
    with pytest.raises(errors.Forbidden):
        Client.from_kubeconfig(kubeconfig).list(Kind("v1", "Secret", "secrets"), SYSTEM_NAMESPACE)


NODE_NETWORK_CONFIG = Kind("acn.azure.com/v1alpha", "NodeNetworkConfig", "nodenetworkconfigs")
GALLERY = "/CommunityGalleries/nodewright-rbac/images/node/versions"


def test_every_reconciler_works_under_the_generated_roles(restricted_manager: tuple[World, Path]) -> None:
    """With only the generated roles, the manager wins its Lease, assigns an identity to a scale
    set, fills the node's NodeNetworkConfig pool with NIC IP configurations, and rolls another
    scale set's node to a new image (scale out, drain, delete)."""
    world, kubeconfig = restricted_manager
    install_crds(world.client)
    group = world.resource_group("rbac")
    web = world.identity(group, "web")
    scale_set = world.scale_set(group, "pool", capacity=1)
    rolled = world.emulator.estate.add_scale_set(
        group,
        f"roll{world.suffix}",
        subnet_id=world.subnet_of(group),
        capacity=1,
        image={"id": f"{GALLERY}/1.0.0"},
    )
    world.start_nodes()
    node = world.nodes_of(scale_set)[0]
    old_node = world.nodes_of(rolled)[0]
    image_name = f"rbac-{world.suffix}"
    world.client.create(NODE_IMAGE, {"metadata": {"name": image_name}, "spec": {"image": f"{GALLERY}/2.0.0"}})
    world.client.create(
        SCALING_GROUP,
        {
            "metadata": {"name": image_name},
            "spec": {"groupID": rolled, "nodeImage": image_name, "role": "Worker"},
        },
    )
    world.azure_identity("web", web, world.client_id_of(web))
    world.binding("web-binding", "web", "web")
    world.pod("web-0", node, "web")
    cloud = world.cloud_options()
    data = {
        "metrics": {"bindAddress": "0"},
        "health": {"bindAddress": "0"},
        "leaderElection": {
            "enabled": True,
            "namespace": SYSTEM_NAMESPACE,
            "name": f"rbac-{world.namespace}",
            "leaseDuration": 3,
            "renewDeadline": 2,
            "retryPeriod": 0.5,
        },
        "cacheSyncTimeout": 20,
        "gracefulShutdownTimeout": 5,
        "reconcilers": {
            "identity-assignment": {"options": {"cloud": cloud}},
            "node-network-config": {
                "options": {
                    "cloud": cloud,
                    "namespace": world.namespace,
                    "nodeSelector": f"kubernetes.io/hostname={node}",
                }
            },
            "node-image": {
                "options": {
                    "cloud": cloud,
                    "nodeLabelSelector": f"kubernetes.azure.com/agentpool=roll{world.suffix}",
                }
            },
        },
    }
    manager = Manager(parse_config(data, "test"), kubeconfig=str(kubeconfig))
    assert manager.setup_reconcilers(REGISTRY) == ["identity-assignment", "node-network-config", "node-image"]
    running = RunningManager(manager)

    def pool_filled() -> bool:
        try:
            config = world.client.get(NODE_NETWORK_CONFIG, node, world.namespace)
        except errors.NotFound:
            return False
        requested = (config.get("spec") or {}).get("requestedIPCount", 0)
        status = config.get("status") or {}
        assigned = sum(len(c.get("ipAssignments") or []) for c in status.get("networkContainers") or [])
        return bool(requested) and assigned >= requested

    try:
        wait_for(
            lambda: web.lower() in world.identities_on(scale_set),
            timeout=60,
            message="identity on the scale set",
        )
        wait_for(
            lambda: [a.status.status for a in world.assigned()] == ["Assigned"],
            message="AzureAssignedIdentity Assigned",
        )
        wait_for(pool_filled, timeout=60, message="NodeNetworkConfig pool filled from the NIC")

        def rolled_out() -> bool:
            status = world.client.get(NODE_IMAGE, image_name).get("status") or {}
            nodes = world.nodes_of(rolled)
            return status.get("upToDateNodes") == status.get("totalNodes") == 1 and old_node not in nodes

        wait_for(rolled_out, timeout=120, message="the scale set's node replaced by one on the new image")
        assert running.error is None
        assert manager.is_leader()
    finally:
        running.stop()
        with contextlib.suppress(errors.NotFound):
            world.client.patch(NODE_NETWORK_CONFIG, node, {"metadata": {"finalizers": None}}, world.namespace)
        for kind in (SCALING_GROUP, NODE_IMAGE):
            world.client.delete(kind, image_name, ignore_not_found=True)
