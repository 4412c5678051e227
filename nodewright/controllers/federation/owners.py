"""The cutover's writes on pod owners: the workloads whose pod template gets
``azure.workload.identity/use: "true"`` (so the pods they make next use workload identity), and
taking that back. A pod's owner is the Deployment behind its ReplicaSet, else its ReplicaSet,
StatefulSet or DaemonSet; other owners (Jobs, bare pods) cannot be relabelled and are reported.
Only owners marked ``MIGRATED_BY_ANNOTATION`` with the binding's key are ever unlabelled.

Side effects: GETs of ReplicaSets and workloads, merge patches of workloads.
"""

from __future__ import annotations

from typing import Any

from nodewright.controllers.federation.migration import MIGRATED_BY_ANNOTATION, WORKLOAD_IDENTITY_LABEL, Owner
from nodewright.runtime import Client, Kind, controller_of, errors, get_logger

__all__ = ["WORKLOAD_KINDS", "OwnerLabels"]

log = get_logger(__name__)

WORKLOAD_KINDS = {
    "Deployment": Kind("apps/v1", "Deployment", "deployments"),
    "ReplicaSet": Kind("apps/v1", "ReplicaSet", "replicasets"),
    "StatefulSet": Kind("apps/v1", "StatefulSet", "statefulsets"),
    "DaemonSet": Kind("apps/v1", "DaemonSet", "daemonsets"),
}


_REMEMBERED = 10_000
"""At most this many ReplicaSets' owners are remembered."""


def _pod_name(pod: dict[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def _labelled(pod_or_template: dict[str, Any]) -> bool:
    labels = (pod_or_template.get("metadata") or {}).get("labels") or {}
    return str(labels.get(WORKLOAD_IDENTITY_LABEL, "")).lower() == "true"


class OwnerLabels:
    """Labels and unlabels the templates of the pods' owners (see the module docstring)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._replica_set_owners: dict[str, Owner] = {}
        """ReplicaSet uid -> its owner (a ReplicaSet's controller never changes)."""

    def owner_of(self, pod: dict[str, Any]) -> Owner | None:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        reference = controller_of(pod)
        if reference is None or reference.get("kind") not in WORKLOAD_KINDS:
            return None
        if reference["kind"] != "ReplicaSet":
            return Owner(str(reference["kind"]), namespace, str(reference["name"]))
        uid = str(reference.get("uid") or "")
        if uid not in self._replica_set_owners:
            try:
                replica_set = self.client.get(WORKLOAD_KINDS["ReplicaSet"], str(reference["name"]), namespace)
            except errors.NotFound:
                return None
            above = controller_of(replica_set)
            if len(self._replica_set_owners) >= _REMEMBERED:
                self._replica_set_owners.clear()  # bounded: old ReplicaSets are gone anyway
            if above is not None and above.get("kind") == "Deployment":
                self._replica_set_owners[uid] = Owner("Deployment", namespace, str(above["name"]))
            else:
                self._replica_set_owners[uid] = Owner("ReplicaSet", namespace, str(reference["name"]))
        return self._replica_set_owners[uid]

    def cut_over(self, key: str, pods: list[dict[str, Any]]) -> tuple[list[Owner], list[str]]:
        """Label every owner's template; returns the owners not labelled (a write failed) and the
        pods without a labellable owner that lack the label themselves."""
        owners: set[Owner] = set()
        unowned: list[str] = []
        for pod in pods:
            owner = self.owner_of(pod)
            if owner is not None:
                owners.add(owner)
            elif not _labelled(pod):
                unowned.append(_pod_name(pod))
        failed = [owner for owner in sorted(owners) if not self._label(key, owner)]
        return failed, sorted(unowned)

    def undo(self, key: str, pods: list[dict[str, Any]]) -> None:
        """Unlabel the owners this binding's cutover labelled."""
        for owner in sorted({o for o in map(self.owner_of, pods) if o is not None}):
            try:
                workload = self.client.get(WORKLOAD_KINDS[owner.kind], owner.name, owner.namespace)
            except errors.NotFound:
                continue
            if ((workload.get("metadata") or {}).get("annotations") or {}).get(MIGRATED_BY_ANNOTATION) != key:
                continue
            body = {
                "metadata": {"annotations": {MIGRATED_BY_ANNOTATION: None}},
                "spec": {"template": {"metadata": {"labels": {WORKLOAD_IDENTITY_LABEL: None}}}},
            }
            self.client.patch(WORKLOAD_KINDS[owner.kind], owner.name, body, owner.namespace)
            log.info("Took back workload identity", owner=str(owner), binding=key)

    def _label(self, key: str, owner: Owner) -> bool:
        kind = WORKLOAD_KINDS[owner.kind]
        try:
            workload = self.client.get(kind, owner.name, owner.namespace)
            if _labelled((workload.get("spec") or {}).get("template") or {}):
                return True
            body = {
                "metadata": {"annotations": {MIGRATED_BY_ANNOTATION: key}},
                "spec": {"template": {"metadata": {"labels": {WORKLOAD_IDENTITY_LABEL: "true"}}}},
            }
            self.client.patch(kind, owner.name, body, owner.namespace)
        except errors.ApiError as error:
            log.info("Could not label for workload identity", owner=str(owner), error=str(error))
            return False
        log.info("Labelled for workload identity", owner=str(owner), binding=key)
        return True
