"""config/rbac is least privilege and sufficient: the roles grant no wildcard and no Secret, and a
manager holding nothing but the ServiceAccount token bound to them does its work on a real API
server with RBAC authorization on."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodewright.cloud.emulator import ArmEmulator
from nodewright.controllers.main import BUILT_IN_RECONCILERS, REGISTRY
from nodewright.controllers.node_image.resources import NODE_IMAGE, SCALING_GROUP
from nodewright.devenv.crds import install_crds
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.process.config import parse_config
from nodewright.runtime.process.manager import Manager
from tests.conftest import Cluster
from tests.controllers.identity.helpers import World, world_for
from tests.runtime.manager_helpers import RunningManager
from tests.waiting import eventually

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


DEFAULT = PROJECT / "config" / "default"
COMPONENTS = PROJECT / "config" / "rbac" / "reconcilers"
ALL_RECONCILERS = ("identity-assignment", "node-network-config", "node-image")


def kustomize(directory: Path) -> list[dict[str, Any]]:
    output = subprocess.run(
        [str(KUBECTL), "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(directory)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [document for document in yaml.safe_load_all(output) if document]


def rendered(reconcilers: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """What `kubectl kustomize config/default` renders (the deployable set); with
    ``reconcilers``, config/default with exactly those reconcilers' role components."""
    if reconcilers is None:
        return kustomize(DEFAULT)
    kustomization = yaml.safe_load((DEFAULT / "kustomization.yaml").read_text())
    with tempfile.TemporaryDirectory() as directory:

        def relative(path: Path) -> str:  # kustomize roots cannot be absolute
            return os.path.relpath(path.resolve(), directory)

        kustomization["resources"] = [relative(DEFAULT / path) for path in kustomization["resources"]]
        kustomization["transformers"] = [relative(DEFAULT / path) for path in kustomization["transformers"]]
        kustomization["components"] = [relative(COMPONENTS / name) for name in reconcilers]
        (Path(directory) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return kustomize(Path(directory))


def enabled_in_manager_config() -> set[str]:
    config = yaml.safe_load((PROJECT / "config" / "manager" / "config.yaml").read_text())
    return {name for name, reconciler in config["reconcilers"].items() if reconciler.get("enabled", True)}


def test_default_binds_exactly_the_reconcilers_the_manager_config_enables() -> None:
    """config/default's components are the roles of the reconcilers config/manager enables: no
    role for a disabled reconciler, none missing for an enabled one."""
    kustomization = yaml.safe_load((DEFAULT / "kustomization.yaml").read_text())
    components = {Path(path).name for path in kustomization.get("components") or []}
    assert components == enabled_in_manager_config()
    bound = {
        document["roleRef"]["name"]
        for document in rendered()
        if document["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert {name for name in bound if "reconciler-" in name} == {
        f"nodewright-reconciler-{name}" for name in enabled_in_manager_config()
    }
    assert {path.name for path in COMPONENTS.iterdir()} == {plugin.name for plugin in BUILT_IN_RECONCILERS}


def test_node_network_configs_are_granted_in_kube_system_only() -> None:
    """NodeNetworkConfigs and ClusterSubnetStates live in kube-system: a Role there grants them,
    no ClusterRole does; the Lease Role is in the manager's namespace."""
    documents = rendered(ALL_RECONCILERS)
    for document in documents:
        groups = {group for rule in document.get("rules") or [] for group in rule.get("apiGroups") or []}
        if "acn.azure.com" in groups:
            assert document["kind"] == "Role", document
            assert document["metadata"]["namespace"] == "kube-system"
        if document["kind"] in ("Role", "RoleBinding") and "leader-election" in document["metadata"]["name"]:
            assert document["metadata"]["namespace"] == SYSTEM_NAMESPACE
        if document["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert document["subjects"] == [
                {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SYSTEM_NAMESPACE}
            ]
    assert {d["kind"] for d in documents if d["metadata"]["name"] == "nodewright-metrics-reader"} == {
        "ClusterRole"
    }


def test_roles_grant_no_wildcard_and_no_secret() -> None:
    """Every rule names its groups, resources and verbs (every reconciler's roles included);
    nothing reads or writes Secrets; the one non-resource rule is `get /metrics`."""
    rules = [
        (document["metadata"]["name"], rule)
        for document in rendered(ALL_RECONCILERS)
        if document["kind"] in ("ClusterRole", "Role")
        for rule in document["rules"]
    ]
    assert rules
    for role, rule in rules:
        if "nonResourceURLs" in rule:
            assert (role, rule) == (
                "nodewright-metrics-reader",
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
            )
            continue
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"{role} uses a wildcard in {field}: {rule}"
        assert "secrets" not in rule["resources"], f"{role} grants Secrets: {rule}"
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), f"{role}: {rule}"


def apply_rbac(admin: Client, reconcilers: tuple[str, ...] | None = None) -> None:
    """Create (or refresh) the namespace, ServiceAccount, roles and bindings of config/default
    (with exactly ``reconcilers``' roles when given), and remove the bindings of the others."""
    with contextlib.suppress(errors.AlreadyExists):
        admin.create(NAMESPACE_KIND, {"metadata": {"name": SYSTEM_NAMESPACE}})
    documents = rendered(reconcilers)
    names = {document["metadata"]["name"] for document in documents}
    for name in ALL_RECONCILERS:
        binding = f"nodewright-reconciler-{name}"
        if binding not in names:
            admin.delete(RBAC_KINDS["ClusterRoleBinding"], binding, ignore_not_found=True)
            admin.delete(RBAC_KINDS["RoleBinding"], binding, "kube-system", ignore_not_found=True)
    for document in documents:
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
        apply_rbac(world.client, ALL_RECONCILERS)
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
                    "namespace": "kube-system",  # where the generated Role grants NodeNetworkConfigs
                    "nodeSelector": f"kubernetes.io/hostname={node}",
                    "demandFromPods": True,  # nodewright as the node agent: it writes the spec too
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
            config = world.client.get(NODE_NETWORK_CONFIG, node, "kube-system")
        except errors.NotFound:
            return False
        requested = (config.get("spec") or {}).get("requestedIPCount", 0)
        status = config.get("status") or {}
        assigned = sum(len(c.get("ipAssignments") or []) for c in status.get("networkContainers") or [])
        return bool(requested) and assigned >= requested

    try:
        eventually(
            lambda: web.lower() in world.identities_on(scale_set),
            timeout=60,
            message="identity on the scale set",
        )
        eventually(
            lambda: [a.status.status for a in world.assigned()] == ["Assigned"],
            message="AzureAssignedIdentity Assigned",
        )
        eventually(pool_filled, timeout=60, message="NodeNetworkConfig pool filled from the NIC")

        def rolled_out() -> bool:
            status = world.client.get(NODE_IMAGE, image_name).get("status") or {}
            nodes = world.nodes_of(rolled)
            return status.get("upToDateNodes") == status.get("totalNodes") == 1 and old_node not in nodes

        eventually(rolled_out, timeout=120, message="the scale set's node replaced by one on the new image")
        assert running.error is None
        assert manager.is_leader()
    finally:
        running.stop()
        with contextlib.suppress(errors.NotFound):
            world.client.patch(NODE_NETWORK_CONFIG, node, {"metadata": {"finalizers": None}}, "kube-system")
            world.client.delete(NODE_NETWORK_CONFIG, node, "kube-system", ignore_not_found=True)
        for kind in (SCALING_GROUP, NODE_IMAGE):
            world.client.delete(kind, image_name, ignore_not_found=True)


def test_a_reconciler_whose_role_is_not_bound_fails_at_start(
    cluster: Cluster, arm_emulator: ArmEmulator, namespace: str, tmp_path: Path
) -> None:
    """With only identity assignment's role bound (as config/default ships), a manager that
    also enables node-image exits 1 at start naming the reconciler and what it cannot do."""
    with world_for(cluster, arm_emulator, namespace) as world:
        apply_rbac(world.client, ("identity-assignment",))
        kubeconfig = service_account_kubeconfig(world.client, cluster, tmp_path)
        cloud = world.cloud_options()
        config = {
            "metrics": {"bindAddress": "127.0.0.1:0"},
            "health": {"bindAddress": "127.0.0.1:0"},
            "leaderElection": {"namespace": SYSTEM_NAMESPACE, "name": f"unbound-{world.namespace}"},
            "reconcilers": {
                "identity-assignment": {"options": {"cloud": cloud}},
                "node-image": {"options": {"cloud": cloud, "nodeLabelSelector": "pool=none"}},
            },
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        result = subprocess.run(
            [sys.executable, "-m", "nodewright.controllers.main", "run", "--config", str(path)],
            cwd=PROJECT,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1, result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("nodewright: missing permissions: reconciler node-image"), last_line
    assert "delete nodes" in last_line
    assert "create pods/eviction" in last_line
    assert "identity-assignment" not in last_line
    assert "the runtime" not in last_line
