"""The read step of the identity assignment passes: the cached objects a pass reads
(``IdentityStores``), parsed into models (skipping, with a log line, any that fail validation);
``read_target``, one target's view (its nodes, their pods, the AzureAssignedIdentities recorded
there and what should exist, ``TargetView``); planning the desired AzureAssignedIdentities
around names other passes hold; and the typed target of a pass. Reads the informers' stores
only (no API calls); the plan is ``decisions``'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from nodewright.api.aadpodidentity.v1 import (
    POD_LABEL,
    AzureAssignedIdentity,
    AzureIdentity,
    AzureIdentityBinding,
)
from nodewright.api.base import Resource, ValidationError
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ScaleSetInstanceId,
    parse_machine_id,
    parse_scale_set_id,
)
from nodewright.controllers.identity.decisions import (
    AssignmentKey,
    DesiredAssignment,
    IdentityTarget,
    PodInfo,
    assigned_identity_name,
    assigned_identity_namespace,
    assignment_changes,
    assignment_key_of,
    desired_assignments,
    match_pods,
)
from nodewright.controllers.identity.intent import recorded_target, with_recorded_intent
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
)
from nodewright.controllers.identity.pass_view import TargetView
from nodewright.controllers.identity.targets import AssignmentRecord, target_of_provider_id
from nodewright.controllers.identity.watches import (
    ASSIGNED_NODE_INDEX,
    ASSIGNED_TARGET_INDEX,
    NODE_NAME_INDEX,
    TARGET_INDEX,
    with_kind,
)
from nodewright.runtime import NODE, POD, CacheView, InformerView, get_logger

__all__ = [
    "IdentityStores",
    "parse_assigned",
    "parse_bindings",
    "parse_identities",
    "plan_desired",
    "read_target",
    "typed_target",
]

log = get_logger(__name__)

ModelT = TypeVar("ModelT", bound=Resource)


def _parse(objects: Iterable[dict[str, Any]], model: type[ModelT], api_version: str) -> list[ModelT]:
    result: list[ModelT] = []
    for obj in objects:
        try:
            result.append(model.from_object(with_kind(obj, api_version, model.KIND)))
        except ValidationError as error:
            log.warning(
                "Skipped invalid object",
                kind=model.KIND,
                name=(obj.get("metadata") or {}).get("name"),
                error=str(error),
            )
    return result


def parse_identities(objects: Iterable[dict[str, Any]]) -> list[AzureIdentity]:
    return _parse(objects, AzureIdentity, AZURE_IDENTITY.api_version)


def parse_bindings(objects: Iterable[dict[str, Any]]) -> list[AzureIdentityBinding]:
    return _parse(objects, AzureIdentityBinding, AZURE_IDENTITY_BINDING.api_version)


def parse_assigned(objects: Iterable[dict[str, Any]]) -> list[AzureAssignedIdentity]:
    """The objects as the passes read them: a new object's creation-time intent counts as its
    status until a status is written (``intent``)."""
    return _parse(
        (with_recorded_intent(obj) for obj in objects),
        AzureAssignedIdentity,
        AZURE_ASSIGNED_IDENTITY.api_version,
    )


def plan_desired(
    pods: list[PodInfo],
    existing_here: list[AzureAssignedIdentity],
    identities: list[AzureIdentity],
    bindings: list[AzureIdentityBinding],
    assigned_by_key: Callable[[str], dict[str, Any] | None],
    *,
    force_namespaced: bool,
) -> tuple[list[DesiredAssignment], set[tuple[str, str]]]:
    """Desired assignments of ``pods``, named around objects other passes own (looked up by
    ``namespace/name``), and the names those objects hold."""
    matches = match_pods(pods, bindings, identities, force_namespaced=force_namespaced)
    here = {(a.namespace, a.name) for a in existing_here}
    taken: dict[tuple[str, str], AssignmentKey] = {}
    for match in matches:
        namespace = assigned_identity_namespace(match.identity, force_namespaced)
        name = assigned_identity_name(match.pod.name, match.pod.namespace, match.identity.name)
        if (namespace, name) in here:
            continue
        holder = assigned_by_key(f"{namespace}/{name}")
        if holder is not None:
            parsed = parse_assigned([holder])
            key = assignment_key_of(parsed[0]) if parsed else None
            if key is not None:
                taken[(namespace, name)] = key
    desired = desired_assignments(matches, force_namespaced=force_namespaced, taken=taken)
    in_use = {
        (wanted.namespace, wanted.name)
        for wanted in desired
        if (wanted.namespace, wanted.name) not in here
        and assigned_by_key(f"{wanted.namespace}/{wanted.name}") is not None
    }
    return desired, in_use


def typed_target(key: str, nodes: list[dict[str, Any]]) -> IdentityTarget:
    """The VM or scale set of a pass, from its nodes' providerIDs or else from its key."""
    for node in nodes:
        try:
            return target_of_provider_id(str(node["spec"]["providerID"]))
        except (KeyError, InvalidResourceIdError):
            continue
    if "/virtualmachinescalesets/" in key:
        return parse_scale_set_id(key)
    machine = parse_machine_id(key)
    return machine.scale_set if isinstance(machine, ScaleSetInstanceId) else machine


@dataclass(frozen=True)
class IdentityStores:
    """The cached objects the identity passes read, from the manager's shared cache."""

    nodes: InformerView
    pods: InformerView
    identities: InformerView
    bindings: InformerView
    assigned: InformerView

    @classmethod
    def of(cls, cache: CacheView) -> IdentityStores:
        return cls(
            nodes=cache.informer(NODE),
            pods=cache.informer(POD, label_selector=POD_LABEL),
            identities=cache.informer(AZURE_IDENTITY),
            bindings=cache.informer(AZURE_IDENTITY_BINDING),
            assigned=cache.informer(AZURE_ASSIGNED_IDENTITY),
        )

    def plan_desired(
        self, pods: list[PodInfo], existing_here: list[AzureAssignedIdentity], *, force_namespaced: bool
    ) -> tuple[list[DesiredAssignment], set[tuple[str, str]]]:
        """``plan_desired`` with the cached identities and bindings."""
        return plan_desired(
            pods,
            existing_here,
            parse_identities(self.identities.store.list()),
            parse_bindings(self.bindings.store.list()),
            self.assigned.store.get,
            force_namespaced=force_namespaced,
        )


def read_target(stores: IdentityStores, key: str, *, force_namespaced: bool) -> TargetView | None:
    """A target's nodes, their pods and the objects recorded there (read through the controller's
    cache view: as this process last wrote them while the watch is behind), and what should exist
    (None when the target has neither nodes nor objects)."""
    nodes = stores.nodes.store.by_index(TARGET_INDEX, key)
    node_names = {str(node["metadata"]["name"]) for node in nodes}
    pods = [
        PodInfo.from_object(pod)
        for name in sorted(node_names)
        for pod in stores.pods.store.by_index(NODE_NAME_INDEX, name)
    ]
    recorded = stores.assigned.store.by_index(ASSIGNED_TARGET_INDEX, key)
    unrecorded = [
        obj
        for name in node_names
        for obj in stores.assigned.store.by_index(ASSIGNED_NODE_INDEX, name)
        if not recorded_target(obj)
    ]
    existing_here = parse_assigned([*recorded, *unrecorded])
    if not nodes and not existing_here:
        return None
    desired, names_in_use = stores.plan_desired(pods, existing_here, force_namespaced=force_namespaced)
    changes = assignment_changes(desired, existing_here, names_in_use=names_in_use)
    return TargetView(
        key=key,
        target=typed_target(key, nodes),
        has_nodes=bool(nodes),
        desired=desired,
        changes=changes,
        records_here=[r for r in (AssignmentRecord.of(a, node_target=key) for a in existing_here) if r],
        released={(a.namespace, a.name): AssignmentRecord.of(a, node_target=key) for a in changes.release},
    )
