"""Pure decisions of identity assignment: which pods get which Azure identities, which
AzureAssignedIdentity objects should exist, which user-assigned identities to add to and remove
from each VM or scale set, what to say about bad input, and when to look identities up again.

No I/O: plain data in, plain data out, so every rule is table-tested. This module holds the
inputs, matching, naming and the AzureAssignedIdentity changes; its neighbours hold the rest:
``targets`` (targets, the delta, ownership, retries, outcomes), ``validation`` (bad input),
``identity_info_rules`` (clientId lookups) and ``conditions``. The reconcilers in this package
read the cluster and the cloud, call these functions and write what they return.

The rules follow aad-pod-identity v1.8's MIC, with these deliberate differences (each fixes a
complaint its users filed, numbers are aad-pod-identity issues):

- Targets come from each node's providerID, parsed case-insensitively, resource group included
  (#690, #855, #1246 came from a configured resource group). Nodes of one scale set are one
  target, so one update per scale set (#676, #988, #1139 throttling) and the in-use check covers
  every node of the scale set (#198).
- Identity IDs are compared lowercased, so two spellings never reach ARM in one request (#556)
  nor look like two identities.
- Ownership: nodewright removes an identity from a target only if an AzureAssignedIdentity of
  its own recorded it as Assigned there *and* recorded that nodewright added it
  (``status.addedByNodewright``): the identity was absent before nodewright's update, or another
  of nodewright's assignments on that target had added it. An identity that was already on the
  VM (kubelet identity, one added by hand or by another tool) is used but never removed. MIC
  removed whatever it had marked Assigned, pre-existing or not. Objects MIC wrote carry no
  target; ``AssignmentPolicy.remove_unmarked_assignments`` opts in to MIC's behaviour for them.
- Besides MIC's rules (type 0 only, not immutable by clientID, not in use by another pod with
  the same clientID on the target), an identity is in use when another pod needs the same
  resource ID (an AzureIdentity with a stale clientID, #521, no longer hides that use); the
  immutable list and the manager's own identity match by clientID or resource ID.
- One bad identity is isolated: an invalid resourceID excludes only that identity (#515,
  #1192); an identity ARM rejected is not retried on every pass (``identities_to_attempt``).
- Repair only adds (#633, #1308): ``drift_repairs`` re-adds identities recorded as Assigned that
  vanished from the target and never removes anything.
- AzureAssignedIdentity names are MIC's ``<pod>-<podNamespace>-<identity>`` when that is a valid,
  unique name. MIC sent longer names to the API server, which refused them (422) on every sync,
  so the pod never got its identity; and two assignments could collide (pod ``a-b`` in namespace
  ``c`` and pod ``a`` in namespace ``b-c``). Those get a truncated name with a hash suffix.
  Existing objects are matched by what they describe (pod, identity), never by name.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    CONDITION_WORKLOAD_IDENTITY_MIGRATION,
    MIGRATION_CUT_OVER,
    NODE_NAME_LABEL,
    POD_LABEL,
    WORKLOAD_IDENTITY_LABEL,
    AzureAssignedIdentity,
    AzureAssignedIdentitySpec,
    AzureIdentity,
    AzureIdentityBinding,
    AzureIdentitySpec,
    EmbeddedAzureIdentity,
    EmbeddedAzureIdentityBinding,
    IdentityType,
)
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ScaleSetId,
    VirtualMachineId,
    parse_user_assigned_identity_id,
)

__all__ = [
    "DEFAULT_ASSIGNED_IDENTITY_NAMESPACE",
    "EVENT_BINDING_APPLIED",
    "EVENT_BINDING_APPLY_ERROR",
    "EVENT_BINDING_REMOVED",
    "EVENT_BINDING_REMOVE_ERROR",
    "MAX_NAME_LENGTH",
    "AssignmentChanges",
    "AssignmentKey",
    "AssignmentPolicy",
    "DesiredAssignment",
    "IdentityTarget",
    "Match",
    "NodeInfo",
    "PodInfo",
    "Problem",
    "assigned_identity_name",
    "assigned_identity_namespace",
    "assignment_changes",
    "assignment_key_of",
    "desired_assignments",
    "identity_key",
    "identity_resource_key",
    "is_namespaced_identity",
    "kept_and_new",
    "match_pods",
    "usable_identities",
]

DEFAULT_ASSIGNED_IDENTITY_NAMESPACE = "default"
"""Where MIC put AzureAssignedIdentities of identities that are not namespaced."""
MAX_NAME_LENGTH = 253
"""An object name is a DNS-1123 subdomain: at most 253 characters."""
_NAME_HASH_LENGTH = 10

EVENT_BINDING_APPLIED = "binding applied"
EVENT_BINDING_APPLY_ERROR = "binding apply error"
EVENT_BINDING_REMOVED = "binding removed"
EVENT_BINDING_REMOVE_ERROR = "binding remove error"
"""Event reasons as MIC spelt them, on the AzureIdentityBinding."""

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

IdentityTarget = VirtualMachineId | ScaleSetId
"""What identities are assigned to: a VM (standalone or flexible scale-set member) or a uniform
scale set (all of its instances at once)."""


# --- Inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodInfo:
    """What the decisions need of a pod."""

    namespace: str
    name: str
    node_name: str = ""
    phase: str = ""
    binding_label: str = ""
    workload_identity: bool = False
    """Labelled ``azure.workload.identity/use: "true"``."""

    @classmethod
    def from_object(cls, pod: Mapping[str, Any]) -> PodInfo:
        """From a core/v1 Pod as the API server returns it."""
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        return cls(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            node_name=str((pod.get("spec") or {}).get("nodeName") or ""),
            phase=str((pod.get("status") or {}).get("phase") or ""),
            binding_label=str(labels.get(POD_LABEL) or ""),
            workload_identity=str(labels.get(WORKLOAD_IDENTITY_LABEL) or "").lower() == "true",
        )

    @property
    def is_active(self) -> bool:
        """Scheduled and not finished. A terminating pod still runs and may still need tokens."""
        return bool(self.node_name) and self.phase not in _FINISHED_PHASES


@dataclass(frozen=True)
class NodeInfo:
    """What the decisions need of a node."""

    name: str
    provider_id: str = ""

    @classmethod
    def from_object(cls, node: Mapping[str, Any]) -> NodeInfo:
        """From a core/v1 Node as the API server returns it."""
        return cls(
            name=str((node.get("metadata") or {}).get("name", "")),
            provider_id=str((node.get("spec") or {}).get("providerID") or ""),
        )


@dataclass(frozen=True)
class AssignmentPolicy:
    """Configuration that changes decisions.

    ``immutable_identities``: client IDs or resource IDs (any case) never removed from a target
    (MIC's immutable list, by clientID; resource IDs accepted too). ``manager_identities``: the
    identity nodewright itself runs as (client ID and/or resource ID), never removed either.
    ``remove_unmarked_assignments``: treat Assigned objects MIC wrote (they carry no nodewright
    record) as added by the manager, as MIC did; off by default. An identity ARM refused is sent
    again after ``rejected_identity_first_retry``, doubling up to ``rejected_identity_retry``. A pod
    on a node that does not exist keeps its AzureAssignedIdentity (condition NodeNotFound) for
    ``missing_node_attempts`` passes on the same backoff; then the object is collected.
    """

    force_namespaced: bool = False
    immutable_identities: frozenset[str] = frozenset()
    manager_identities: frozenset[str] = frozenset()
    remove_unmarked_assignments: bool = False
    rejected_identity_retry: timedelta = timedelta(minutes=10)
    rejected_identity_first_retry: timedelta = timedelta(seconds=5)
    missing_node_attempts: int = 6

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "immutable_identities", frozenset(value.lower() for value in self.immutable_identities)
        )
        object.__setattr__(
            self, "manager_identities", frozenset(value.lower() for value in self.manager_identities)
        )

    def protects(self, resource_key: str, client_id: str) -> str | None:
        """Why an identity must never be removed, or None."""
        names = {resource_key.lower(), client_id.lower()} - {""}
        if names & self.manager_identities:
            return "the identity nodewright runs as"
        if names & self.immutable_identities:
            return "immutable"
        return None


@dataclass(frozen=True)
class Problem:
    """Bad input found about one object, for its status and a Warning Event. Never raised."""

    kind: str
    namespace: str
    name: str
    reason: str
    message: str


# --- Identities and matching -----------------------------------------------------------------------


def identity_resource_key(identity: AzureIdentitySpec) -> str:
    """The lowercased resource ID of a user-assigned identity (type 0); "" for other types.

    Raises ``InvalidResourceIdError`` when a type-0 resourceID does not match
    ``(?i)/subscriptions/.+/resourcegroups/.+/providers/Microsoft.ManagedIdentity/userAssignedIdentities/.+``.
    """
    if identity.identity_type is not IdentityType.USER_ASSIGNED_MSI:
        return ""
    return parse_user_assigned_identity_id(identity.resource_id).key


def is_namespaced_identity(identity: AzureIdentity, force_namespaced: bool) -> bool:
    """Whether the identity only serves pods and bindings of its own namespace."""
    return force_namespaced or identity.is_namespaced


def identity_key(identity: AzureIdentity) -> tuple[str, str]:
    return (identity.namespace, identity.name)


def usable_identities(identities: Iterable[AzureIdentity]) -> dict[tuple[str, str], AzureIdentity]:
    """The identities that can be assigned, by (namespace, name): type-0 identities with a
    malformed resourceID are left out (MIC ignored them too), the others stay usable."""
    usable: dict[tuple[str, str], AzureIdentity] = {}
    for identity in identities:
        try:
            identity_resource_key(identity.spec)
        except InvalidResourceIdError:
            continue
        usable[identity_key(identity)] = identity
    return usable


@dataclass(frozen=True)
class Match:
    """A pod that gets an identity through a binding."""

    pod: PodInfo
    binding: AzureIdentityBinding
    identity: AzureIdentity


def match_pods(
    pods: Iterable[PodInfo],
    bindings: Iterable[AzureIdentityBinding],
    identities: Iterable[AzureIdentity],
    *,
    force_namespaced: bool = False,
) -> list[Match]:
    """Active pods x bindings whose selector equals the pod's ``aadpodidbinding`` label exactly x
    the identity the binding names in the binding's own namespace.

    A namespaced identity (annotation, or ``force_namespaced``) matches only when pod, binding and
    identity share a namespace; otherwise a binding matches pods of every namespace, as in MIC.
    Pods not scheduled or finished, pods with an empty label, and identities ``usable_identities``
    leaves out never match, nor does a pod labelled for workload identity through a binding whose
    migration is cut over (``CONDITION_WORKLOAD_IDENTITY_MIGRATION``). A pod gets an identity
    once, through the first binding in (namespace, name) order. Sorted by pod, then identity.
    """
    by_selector: dict[str, list[AzureIdentityBinding]] = defaultdict(list)
    for binding in sorted(bindings, key=lambda b: (b.namespace, b.name)):
        if binding.spec.selector:
            by_selector[binding.spec.selector].append(binding)
    usable = usable_identities(identities)
    matches: dict[tuple[str, str, str, str], Match] = {}
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if not pod.is_active or not pod.binding_label:
            continue
        for binding in by_selector.get(pod.binding_label, ()):
            if pod.workload_identity and is_cut_over(binding):
                continue
            identity = usable.get((binding.namespace, binding.spec.azure_identity))
            if identity is None:
                continue
            if is_namespaced_identity(identity, force_namespaced) and not (
                identity.namespace == binding.namespace == pod.namespace
            ):
                continue
            key = (pod.namespace, pod.name, identity.namespace, identity.name)
            matches.setdefault(key, Match(pod=pod, binding=binding, identity=identity))
    return [matches[key] for key in sorted(matches)]


def is_cut_over(binding: AzureIdentityBinding) -> bool:
    """The binding's pods were switched to workload identity (its migration condition says so)."""
    return any(
        c.type == CONDITION_WORKLOAD_IDENTITY_MIGRATION
        and c.status == "True"
        and c.reason == MIGRATION_CUT_OVER
        for c in binding.status.conditions
    )


# --- Desired AzureAssignedIdentities ------------------------------------------------------------


@dataclass(frozen=True, order=True)
class AssignmentKey:
    """What an AzureAssignedIdentity describes: one pod's use of one identity."""

    pod_namespace: str
    pod_name: str
    identity_namespace: str
    identity_name: str


def assigned_identity_name(
    pod_name: str, pod_namespace: str, identity_name: str, *, unique_by: str = ""
) -> str:
    """MIC's name, ``<pod>-<podNamespace>-<identityName>``, when it fits in 253 characters and no
    ``unique_by`` is given; otherwise its first characters and a hash of the full name and
    ``unique_by``, still a valid DNS-1123 subdomain."""
    name = f"{pod_name}-{pod_namespace}-{identity_name}"
    if len(name) <= MAX_NAME_LENGTH and not unique_by:
        return name
    digest = hashlib.sha256(f"{name}\x00{unique_by}".encode()).hexdigest()[:_NAME_HASH_LENGTH]
    prefix = name[: MAX_NAME_LENGTH - _NAME_HASH_LENGTH - 1].rstrip("-.")
    return f"{prefix}-{digest}"


def assigned_identity_namespace(identity: AzureIdentity, force_namespaced: bool) -> str:
    """The identity's namespace when it is namespaced, else ``default`` (MIC's rule)."""
    if is_namespaced_identity(identity, force_namespaced):
        return identity.namespace
    return DEFAULT_ASSIGNED_IDENTITY_NAMESPACE


@dataclass(frozen=True)
class DesiredAssignment:
    """An AzureAssignedIdentity that should exist."""

    key: AssignmentKey
    name: str
    namespace: str
    node_name: str
    identity: AzureIdentity
    binding: AzureIdentityBinding

    @property
    def identity_type(self) -> IdentityType:
        return self.identity.spec.identity_type

    @property
    def resource_key(self) -> str:
        """The lowercased identity resource ID ("" unless type 0)."""
        return identity_resource_key(self.identity.spec)

    @property
    def client_id(self) -> str:
        return self.identity.spec.client_id.lower()

    def to_resource(self) -> AzureAssignedIdentity:
        """The object to create: MIC's shape (label nodename, MIC's finalizer, embedded identity and
        binding), status left for the status subresource."""
        return AzureAssignedIdentity(
            metadata={
                "name": self.name,
                "namespace": self.namespace,
                "labels": {NODE_NAME_LABEL: self.node_name},
                "finalizers": [ASSIGNED_IDENTITY_FINALIZER],
            },
            spec=AzureAssignedIdentitySpec(
                azure_identity_ref=EmbeddedAzureIdentity.of(self.identity),
                azure_binding_ref=EmbeddedAzureIdentityBinding.of(self.binding),
                pod=self.key.pod_name,
                pod_namespace=self.key.pod_namespace,
                node_name=self.node_name,
            ),
        )


def desired_assignments(
    matches: Iterable[Match],
    *,
    force_namespaced: bool = False,
    taken: Mapping[tuple[str, str], AssignmentKey] | None = None,
) -> list[DesiredAssignment]:
    """One AzureAssignedIdentity per match, in the namespace MIC would use, named as MIC named it
    unless that name is too long, or two matches would share it, or an existing object describing
    something else holds it (``taken``: (namespace, name) -> what that object describes); then
    the match gets a hashed name (see ``assigned_identity_name``)."""
    taken = taken or {}
    planned: list[tuple[AssignmentKey, str, Match]] = []
    for match in matches:
        key = AssignmentKey(
            match.pod.namespace, match.pod.name, match.identity.namespace, match.identity.name
        )
        namespace = assigned_identity_namespace(match.identity, force_namespaced)
        planned.append((key, namespace, match))
    plain_names: dict[tuple[str, str], set[AssignmentKey]] = defaultdict(set)
    for key, namespace, _ in planned:
        plain = assigned_identity_name(key.pod_name, key.pod_namespace, key.identity_name)
        plain_names[(namespace, plain)].add(key)
        holder = taken.get((namespace, plain))
        if holder is not None:
            plain_names[(namespace, plain)].add(holder)
    result: list[DesiredAssignment] = []
    for key, namespace, match in planned:
        plain = assigned_identity_name(key.pod_name, key.pod_namespace, key.identity_name)
        collides = len(plain_names[(namespace, plain)]) > 1
        name = assigned_identity_name(
            key.pod_name,
            key.pod_namespace,
            key.identity_name,
            unique_by=f"{key.identity_namespace}/{key.pod_namespace}/{key.pod_name}" if collides else "",
        )
        result.append(
            DesiredAssignment(
                key=key,
                name=name,
                namespace=namespace,
                node_name=match.pod.node_name,
                identity=match.identity,
                binding=match.binding,
            )
        )
    return sorted(result, key=lambda desired: desired.key)


def assignment_key_of(assigned: AzureAssignedIdentity) -> AssignmentKey | None:
    """What an existing AzureAssignedIdentity describes; None when it names no identity."""
    reference = assigned.spec.azure_identity_ref
    if reference is None or not reference.name:
        return None
    return AssignmentKey(assigned.spec.pod_namespace, assigned.spec.pod, reference.namespace, reference.name)


def _identity_essentials(spec: AzureIdentitySpec | None) -> tuple[Any, ...]:
    """The identity fields NMI acts on, normalised so MIC's Go noise does not count as a change."""
    if spec is None:
        return ()
    password = spec.client_password
    return (
        spec.identity_type,
        spec.resource_id.lower(),
        spec.client_id,
        (password.name, password.namespace) if password is not None else ("", ""),
        spec.tenant_id,
        tuple(spec.auxiliary_tenant_ids),
        spec.ad_resource_id,
        spec.ad_endpoint,
    )


def _is_deleting(assigned: AzureAssignedIdentity) -> bool:
    return bool(assigned.metadata.get("deletionTimestamp"))


def _needs_update(existing: AzureAssignedIdentity, desired: DesiredAssignment) -> bool:
    labels = existing.metadata.get("labels") or {}
    identity_ref = existing.spec.azure_identity_ref
    binding_ref = existing.spec.azure_binding_ref
    return (
        existing.spec.node_name != desired.node_name
        or labels.get(NODE_NAME_LABEL) != desired.node_name
        or identity_ref is None
        or _identity_essentials(identity_ref.spec) != _identity_essentials(desired.identity.spec)
        or binding_ref is None
        or (binding_ref.namespace, binding_ref.name) != (desired.binding.namespace, desired.binding.name)
        or binding_ref.spec.selector != desired.binding.spec.selector
    )


@dataclass(frozen=True)
class AssignmentChanges:
    """How the AzureAssignedIdentity objects must change.

    ``create``: desired ones with no object yet. ``update``: (object, desired) where the node,
    the identity NMI would read or the binding changed (the object is rewritten in place and its
    status starts again at Created). ``keep``: (object, desired) already right. ``release``:
    objects no longer desired (pod gone, binding or identity gone, the object is being deleted,
    or it lives in the wrong namespace since the identity became namespaced); their identity may
    be removed from its target, then the object deleted.
    ``waiting``: desired ones whose name is still held by an object being deleted (created on a
    later pass).
    """

    create: tuple[DesiredAssignment, ...] = ()
    update: tuple[tuple[AzureAssignedIdentity, DesiredAssignment], ...] = ()
    keep: tuple[tuple[AzureAssignedIdentity, DesiredAssignment], ...] = ()
    release: tuple[AzureAssignedIdentity, ...] = ()
    waiting: tuple[DesiredAssignment, ...] = ()


def assignment_changes(
    desired: Iterable[DesiredAssignment],
    existing: Iterable[AzureAssignedIdentity],
    *,
    names_in_use: Iterable[tuple[str, str]] = (),
) -> AssignmentChanges:
    """Match existing objects to desired assignments by what they describe (pod and identity),
    not by name, so renamed, MIC-written and hash-named objects are all recognised.

    ``names_in_use``: (namespace, name) of objects outside ``existing`` (another target's, for a
    pod that moved there); a desired assignment whose name one of them holds waits until the
    other target released it."""
    existing_by_key: dict[AssignmentKey, AzureAssignedIdentity] = {}
    release: list[AzureAssignedIdentity] = []
    held_names: set[tuple[str, str]] = set(names_in_use)
    for assigned in sorted(existing, key=lambda a: (a.namespace, a.name)):
        held_names.add((assigned.namespace, assigned.name))
        key = assignment_key_of(assigned)
        if key is None or _is_deleting(assigned) or key in existing_by_key:
            release.append(assigned)
            continue
        existing_by_key[key] = assigned
    create: list[DesiredAssignment] = []
    update: list[tuple[AzureAssignedIdentity, DesiredAssignment]] = []
    keep: list[tuple[AzureAssignedIdentity, DesiredAssignment]] = []
    waiting: list[DesiredAssignment] = []
    for wanted in desired:
        current = existing_by_key.pop(wanted.key, None)
        if current is not None and current.namespace != wanted.namespace:
            release.append(current)  # an object cannot change namespace: replace it
            current = None
        if current is None:
            if (wanted.namespace, wanted.name) in held_names:
                waiting.append(wanted)
            else:
                create.append(wanted)
        elif _needs_update(current, wanted):
            update.append((current, wanted))
        else:
            keep.append((current, wanted))
    release.extend(existing_by_key.values())
    return AssignmentChanges(
        create=tuple(create),
        update=tuple(update),
        keep=tuple(keep),
        release=tuple(release),
        waiting=tuple(waiting),
    )


def kept_and_new(changes: AssignmentChanges) -> list[tuple[AzureAssignedIdentity | None, DesiredAssignment]]:
    """The objects a pass records an outcome for: new ones (None) and the kept or rewritten ones."""
    pairs: list[tuple[AzureAssignedIdentity | None, DesiredAssignment]] = [(None, d) for d in changes.create]
    pairs.extend((obj, d) for obj, d in changes.update)
    pairs.extend((obj, d) for obj, d in changes.keep)
    return pairs
