"""charts/nodewright gives the objects config/default gives: `helm template` with the default
values equals `kubectl kustomize config/default`, enabling reconcilers in the values binds their
roles as the components do, `helm lint` is clean, and `helm install` into the real API server
creates those objects."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import Kind
from nodewright.runtime.process.server_fence import (
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING,
)
from tests.config.test_flowcontrol import FLOW_SCHEMA
from tests.config.test_rbac import ALL_RECONCILERS, RBAC_KINDS, SYSTEM_NAMESPACE, rendered
from tests.conftest import Cluster

PROJECT = Path(__file__).resolve().parents[2]
CHART = PROJECT / "charts" / "nodewright"
BIN = Path(os.environ.get("NODEWRIGHT_CACHE", Path.home() / ".cache" / "nodewright")) / "bin"
HELM = BIN / "helm"
HASH_SUFFIX = re.compile(r"-[a-z0-9]{10}$")
FENCE_KINDS = {kind.kind: kind for kind in (VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING)}


def helm(*arguments: str, kubeconfig: Path | None = None) -> str:
    environment = {**os.environ, **({"KUBECONFIG": str(kubeconfig)} if kubeconfig else {})}
    result = subprocess.run(
        [str(HELM), *arguments], capture_output=True, text=True, timeout=180, env=environment, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def template(*values: str) -> list[dict[str, Any]]:
    output = helm(
        "template", "nodewright", str(CHART), "--namespace", SYSTEM_NAMESPACE, "--include-crds", *values
    )
    return [document for document in yaml.safe_load_all(output) if document]


def normalized(documents: list[dict[str, Any]]) -> dict[tuple[str, str, str], Any]:
    """Objects by (kind, namespace, name) with what legitimately differs taken out: the
    ConfigMap's hash suffix (kustomize) and the config checksum annotation (helm); the config
    file compared as data; the Namespace object (helm install --create-namespace makes it)."""
    objects: dict[tuple[str, str, str], Any] = {}
    for document in documents:
        if document["kind"] == "Namespace":
            continue
        metadata = document["metadata"]
        if document["kind"] == "ConfigMap":
            metadata["name"] = HASH_SUFFIX.sub("", metadata["name"])
            document["data"] = {key: yaml.safe_load(text) for key, text in document["data"].items()}
        if document["kind"] == "Deployment":
            pod = document["spec"]["template"]
            (pod["metadata"].get("annotations") or {}).pop("checksum/config", None)
            if not pod["metadata"].get("annotations"):
                pod["metadata"].pop("annotations", None)
            for volume in pod["spec"]["volumes"]:
                if "configMap" in volume:
                    volume["configMap"]["name"] = HASH_SUFFIX.sub("", volume["configMap"]["name"])
        objects[(document["kind"], metadata.get("namespace", ""), metadata["name"])] = document
    return objects


def test_helm_lint_is_clean() -> None:
    """`helm lint --strict` reports nothing."""
    output = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in output
    assert "[WARNING]" not in output, output
    assert "[ERROR]" not in output, output


def test_default_values_give_the_objects_of_config_default() -> None:
    """Same kinds, names, namespaces and contents as `kubectl kustomize config/default`."""
    chart, kustomize = normalized(template()), normalized(rendered())
    assert sorted(chart) == sorted(kustomize)
    for key, document in kustomize.items():
        assert chart[key] == document, key


def test_enabling_reconcilers_in_values_binds_their_roles_as_the_components_do() -> None:
    """Every reconciler enabled in the values: the same RBAC objects as config/default with
    every component, the node-network-config Role in kube-system included."""
    config = yaml.safe_load((PROJECT / "config" / "manager" / "config.yaml").read_text())
    for name in ALL_RECONCILERS:
        config["reconcilers"].setdefault(name, {"options": {}})
    chart = normalized(template("--set-json", f"config={json.dumps(config)}"))
    kustomize = normalized(rendered(ALL_RECONCILERS))
    rbac = {key: value for key, value in kustomize.items() if key[0] in RBAC_KINDS}
    assert {key: chart[key] for key in rbac} == rbac
    assert ("Role", "kube-system", "nodewright-reconciler-node-network-config") in chart
    disabled = {**config, "reconcilers": {**config["reconcilers"], "node-image": {"enabled": False}}}
    names = {key[2] for key in normalized(template("--set-json", f"config={json.dumps(disabled)}"))}
    assert "nodewright-reconciler-node-image" not in names
    assert "nodewright-reconciler-node-network-config" in names


def test_helm_install_creates_the_objects_of_config_default(cluster: Cluster) -> None:
    """`helm install` into the real API server creates every object config/default renders
    (CRDs aside, which other tests installed already), with the same RBAC rules."""
    admin = Client.from_kubeconfig(cluster.kubeconfig)
    expected = normalized(rendered())
    for kind, _, name in expected:  # a previous kubectl apply owns them
        if kind in ("ClusterRole", "ClusterRoleBinding"):
            admin.delete(RBAC_KINDS[kind], name, ignore_not_found=True)
    release_namespace = "nodewright-helm"
    helm("install", "nodewright", str(CHART), "--namespace", release_namespace, "--create-namespace",
         "--wait=false", kubeconfig=cluster.kubeconfig)  # fmt: skip
    try:
        for (kind, namespace, name), document in expected.items():
            if kind == "CustomResourceDefinition":
                continue
            where = release_namespace if namespace == SYSTEM_NAMESPACE else namespace
            plural = {"ConfigMap": "configmaps", "Service": "services", "Deployment": "deployments"}
            resource = (
                RBAC_KINDS.get(kind)
                or FENCE_KINDS.get(kind)
                or (FLOW_SCHEMA if kind == "FlowSchema" else None)
                or Kind(document["apiVersion"], kind, plural[kind])
            )
            live = admin.get(resource, name, where or None)  # raises NotFound if missing
            if kind in ("ClusterRole", "Role"):
                assert live["rules"] == document["rules"], name
    finally:
        helm("uninstall", "nodewright", "--namespace", release_namespace, kubeconfig=cluster.kubeconfig)
        with contextlib.suppress(errors.NotFound):
            admin.delete(Kind("v1", "Namespace", "namespaces", namespaced=False), release_namespace)
