"""Pure decisions of identity assignment: which pods get which Azure identities, which
AzureAssignedIdentity objects should exist, which user-assigned identities to add to and remove
from each VM or scale set, what to say about bad input, and when to look identities up again.

No I/O: plain data in, plain data out, so every rule is table-tested. The reconcilers in this
package read the cluster (pods, nodes, the aadpodidentity.k8s.io objects) and the cloud
(``nodewright.cloud.compute`` / ``msi``), call these functions and write what they return.

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

import dataclasses
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    CONDITION_CLIENT_ID_CURRENT,
    CONDITION_RESOLVED,
    NODE_NAME_LABEL,
    POD_LABEL,
    AzureAssignedIdentity,
    AzureAssignedIdentitySpec,
    AzureIdentity,
    AzureIdentityBinding,
    AzureIdentitySpec,
    AzureIdentityStatus,
    EmbeddedAzureIdentity,
    EmbeddedAzureIdentityBinding,
    IdentityType,
)
from nodewright.api.meta import Condition
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ScaleSetId,
    ScaleSetInstanceId,
    VirtualMachineId,
    parse_provider_id,
    parse_user_assigned_identity_id,
)

__all__ = [
    "DEFAULT_ASSIGNED_IDENTITY_NAMESPACE",
    "EVENT_BINDING_APPLIED",
    "EVENT_BINDING_APPLY_ERROR",
    "EVENT_BINDING_REMOVED",
    "EVENT_BINDING_REMOVE_ERROR",
    "MAX_NAME_LENGTH",
    "RECHECK_INTERVAL",
    "RETRIEVAL_ERROR_LIMIT",
    "AssignmentChanges",
    "AssignmentKey",
    "AssignmentOutcome",
    "AssignmentPolicy",
    "AssignmentRecord",
    "ConditionStatus",
    "DesiredAssignment",
    "IdentityDiff",
    "IdentityLookup",
    "IdentityNeed",
    "IdentityTarget",
    "Match",
    "NodeInfo",
    "PodInfo",
    "Problem",
    "assigned_identity_name",
    "assigned_identity_namespace",
    "assignment_changes",
    "assignment_key_of",
    "assignment_outcome",
    "desired_assignments",
    "drift_repairs",
    "identities_to_attempt",
    "identity_diff",
    "identity_info_due",
    "identity_info_status",
    "identity_resource_key",
    "is_namespaced_identity",
    "match_pods",
    "needs_by_target",
    "next_recheck_time",
    "node_targets",
    "owned_by_nodewright",
    "target_of_provider_id",
    "truncate_retrieval_error",
    "usable_identities",
    "validate",
    "with_condition",
]

DEFAULT_ASSIGNED_IDENTITY_NAMESPACE = "default"
"""Where MIC put AzureAssignedIdentities of identities that are not namespaced."""
MAX_NAME_LENGTH = 253
"""An object name is a DNS-1123 subdomain: at most 253 characters."""
_NAME_HASH_LENGTH = 10

RECHECK_INTERVAL = timedelta(hours=12)
"""ARO-HCP rechecks an identity's clientId/principalId every 12 h x (1 + 0.5 x jitter)."""
RETRIEVAL_ERROR_LIMIT = 1024
"""ARO-HCP keeps the first 1024 characters of a lookup error."""

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
    record) as added by the manager, as MIC did; off by default.
    """

    force_namespaced: bool = False
    immutable_identities: frozenset[str] = frozenset()
    manager_identities: frozenset[str] = frozenset()
    remove_unmarked_assignments: bool = False
    rejected_identity_retry: timedelta = timedelta(minutes=10)

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


def _identity_key(identity: AzureIdentity) -> tuple[str, str]:
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
        usable[_identity_key(identity)] = identity
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
    leaves out never match. A pod gets an identity once, through the first binding in
    (namespace, name) order. Sorted by pod, then identity.
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


# --- Targets ------------------------------------------------------------------------------------------


def target_of_provider_id(provider_id: str) -> IdentityTarget:
    """The VM or scale set a node's identities live on: a uniform scale-set instance's scale set,
    else the VM itself. Raises ``InvalidResourceIdError`` for anything else."""
    machine = parse_provider_id(provider_id)
    if isinstance(machine, ScaleSetInstanceId):
        return machine.scale_set
    return machine


def node_targets(nodes: Iterable[NodeInfo]) -> tuple[dict[str, IdentityTarget], list[Problem]]:
    """Each node's target by node name, and a problem for each node that has none."""
    targets: dict[str, IdentityTarget] = {}
    problems: list[Problem] = []
    for node in nodes:
        if not node.provider_id:
            problems.append(
                Problem(
                    "Node", "", node.name, "NodeWithoutProviderID", f"Node {node.name} has no spec.providerID"
                )
            )
            continue
        try:
            targets[node.name] = target_of_provider_id(node.provider_id)
        except InvalidResourceIdError as error:
            problems.append(Problem("Node", "", node.name, "InvalidProviderID", str(error)))
    return targets, problems


@dataclass(frozen=True)
class IdentityNeed:
    """A pod on a target that needs a user-assigned identity there."""

    resource_key: str
    client_id: str = ""
    assignment: AssignmentKey | None = None


def needs_by_target(
    desired: Iterable[DesiredAssignment], targets: Mapping[str, IdentityTarget]
) -> dict[str, list[IdentityNeed]]:
    """The type-0 identities each target must carry, keyed by the target's lowercased ARM ID.
    Nodes of one scale set share a key, so their pods' needs are consolidated; pods on nodes with
    no target are left out (``validate`` reports them)."""
    result: dict[str, list[IdentityNeed]] = defaultdict(list)
    for wanted in desired:
        target = targets.get(wanted.node_name)
        if target is None or wanted.identity_type is not IdentityType.USER_ASSIGNED_MSI:
            continue
        result[target.key].append(IdentityNeed(wanted.resource_key, wanted.client_id, wanted.key))
    return dict(result)


# --- What is on a target, and what may be removed ---------------------------------------------


@dataclass(frozen=True)
class AssignmentRecord:
    """What an existing AzureAssignedIdentity says about its identity on its target."""

    target: str
    resource_key: str
    client_id: str
    identity_type: IdentityType
    status: str
    added_by_nodewright: bool
    marked: bool

    @classmethod
    def of(cls, assigned: AzureAssignedIdentity, node_target: str = "") -> AssignmentRecord | None:
        """The record of an object; ``node_target`` (the key of its node's target) stands in for
        objects without ``status.target`` (MIC's). None when the object names no valid identity."""
        reference = assigned.spec.azure_identity_ref
        if reference is None:
            return None
        try:
            resource_key = identity_resource_key(reference.spec)
        except InvalidResourceIdError:
            return None
        return cls(
            target=(assigned.status.target or node_target).lower(),
            resource_key=resource_key,
            client_id=reference.spec.client_id.lower(),
            identity_type=reference.spec.identity_type,
            status=assigned.status.status,
            added_by_nodewright=assigned.status.added_by_nodewright,
            marked=bool(assigned.status.target),
        )


def owned_by_nodewright(records: Iterable[AssignmentRecord], target: str, resource_key: str) -> bool:
    """Whether some record shows nodewright added ``resource_key`` to ``target`` and it is still
    Assigned there (the ownership a new assignment of the same identity inherits)."""
    return any(
        record.target == target.lower()
        and record.resource_key == resource_key
        and record.status == ASSIGNED_STATUS_ASSIGNED
        and record.added_by_nodewright
        for record in records
    )


@dataclass(frozen=True)
class IdentityDiff:
    """One target's delta: resource IDs (lowercased) to add and to remove, and for each released
    identity that stays, why."""

    to_add: frozenset[str] = frozenset()
    to_remove: frozenset[str] = frozenset()
    retained: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        """Nothing to send: no request at all (the cheapest way not to be throttled)."""
        return not self.to_add and not self.to_remove


def identity_diff(
    current: Iterable[str],
    needs: Iterable[IdentityNeed],
    released: Iterable[AssignmentRecord] = (),
    policy: AssignmentPolicy | None = None,
) -> IdentityDiff:
    """What to add to and remove from one VM or scale set (aad-pod-identity's
    ``generateIdentityAssignmentDiff``, with the rules of the module docstring).

    ``current``: the identity IDs on the target (any case). ``needs``: every identity pods on the
    target need (all nodes of a scale set). ``released``: records of assignments on this target
    that are going away. An identity is removed only if it is on the target, released by a record
    that is Assigned, of type 0, added by nodewright (or unmarked, with
    ``remove_unmarked_assignments``), not protected by the policy, and no need on the target has
    the same resource ID or clientID. Identities nobody released are never removed.
    """
    policy = policy or AssignmentPolicy()
    present = {identity_id.lower() for identity_id in current}
    need_list = list(needs)
    needed_resources = {need.resource_key for need in need_list if need.resource_key}
    needed_clients = {need.client_id for need in need_list if need.client_id}
    to_remove: set[str] = set()
    retained: dict[str, str] = {}
    for record in released:
        key = record.resource_key
        reason = _retention_reason(record, present, needed_resources, needed_clients, policy)
        if reason is None:
            to_remove.add(key)
        elif key not in to_remove:
            retained.setdefault(key, reason)
    for key in to_remove:
        retained.pop(key, None)
    return IdentityDiff(
        to_add=frozenset(needed_resources - present), to_remove=frozenset(to_remove), retained=retained
    )


def _retention_reason(
    record: AssignmentRecord,
    present: set[str],
    needed_resources: set[str],
    needed_clients: set[str],
    policy: AssignmentPolicy,
) -> str | None:
    if record.identity_type is not IdentityType.USER_ASSIGNED_MSI:
        return "not a user-assigned identity"
    if record.resource_key not in present:
        return "not on the target"
    if record.resource_key in needed_resources or (record.client_id and record.client_id in needed_clients):
        return "in use by another pod on the target"
    if record.status != ASSIGNED_STATUS_ASSIGNED:
        return "never confirmed Assigned"
    protected = policy.protects(record.resource_key, record.client_id)
    if protected is not None:
        return protected
    if not record.added_by_nodewright and not (policy.remove_unmarked_assignments and not record.marked):
        return "not added by nodewright"
    return None


def identities_to_attempt(
    to_add: Iterable[str], rejected_at: Mapping[str, datetime], now: datetime, retry_after: timedelta
) -> tuple[frozenset[str], frozenset[str]]:
    """Split the identities to add into those to send now and those ARM rejected less than
    ``retry_after`` ago (held back so a known-bad identity costs no failing PATCH per pass)."""
    attempt: set[str] = set()
    held: set[str] = set()
    for key in to_add:
        rejected = rejected_at.get(key.lower())
        if rejected is not None and now < rejected + retry_after:
            held.add(key.lower())
        else:
            attempt.add(key.lower())
    return frozenset(attempt), frozenset(held)


def drift_repairs(current: Iterable[str], records: Iterable[AssignmentRecord], target: str) -> frozenset[str]:
    """Identities recorded as Assigned on ``target`` that are no longer there (removed out of band,
    or lost by a scale-set model update): to be re-added. Repair never removes anything."""
    present = {identity_id.lower() for identity_id in current}
    return frozenset(
        record.resource_key
        for record in records
        if record.target == target.lower()
        and record.status == ASSIGNED_STATUS_ASSIGNED
        and record.identity_type is IdentityType.USER_ASSIGNED_MSI
        and record.resource_key not in present
    )


@dataclass(frozen=True)
class AssignmentOutcome:
    """The status an AzureAssignedIdentity gets after its target was updated: upstream's state,
    the target, whether nodewright owns the identity there, and the Assigned condition."""

    status: str
    target: str
    added_by_nodewright: bool
    reason: str
    message: str

    @property
    def assigned(self) -> bool:
        return self.status == ASSIGNED_STATUS_ASSIGNED


def assignment_outcome(
    desired: DesiredAssignment,
    target: IdentityTarget | None,
    landed: frozenset[str] | None,
    *,
    attempted: frozenset[str] = frozenset(),
    owned: bool = False,
    rejections: Mapping[str, str] | None = None,
    held: frozenset[str] = frozenset(),
) -> AssignmentOutcome:
    """Decide one assignment's status from what actually landed (re-read after any failure).

    ``landed``: the identities on the target after the update (None when even the re-read
    failed). ``attempted``: what this pass asked ARM to add. ``owned``: nodewright already owned
    the identity there (this assignment's own record, or another's, see
    ``owned_by_nodewright``). ``rejections``: identities ARM refused, with its message. ``held``:
    identities not sent because ARM refused them recently. Only an identity actually on the
    target is Assigned (NMI serves tokens only then); it is nodewright's to remove later if this
    pass added it or nodewright owned it already. Service principals (types 1 and 2) need nothing
    on the VM and are Assigned at once, as MIC did.
    """
    if desired.identity_type is not IdentityType.USER_ASSIGNED_MSI:
        return AssignmentOutcome(
            ASSIGNED_STATUS_ASSIGNED,
            "",
            False,
            "NothingToAssign",
            "a service principal needs nothing on the node",
        )
    if target is None:
        return AssignmentOutcome(
            ASSIGNED_STATUS_CREATED,
            "",
            False,
            "NodeNotResolvable",
            f"node {desired.node_name} has no Azure VM or scale set in its providerID",
        )
    key = desired.resource_key
    refused = (rejections or {}).get(key)
    if refused is not None:
        return AssignmentOutcome(ASSIGNED_STATUS_CREATED, target.key, owned, "IdentityRejected", refused)
    if key in held:
        return AssignmentOutcome(
            ASSIGNED_STATUS_CREATED,
            target.key,
            owned,
            "IdentityRejected",
            "ARM rejected this identity recently; it is retried later, the others are not held up",
        )
    if landed is None:
        return AssignmentOutcome(
            ASSIGNED_STATUS_CREATED, target.key, owned, "AssignmentFailed", f"could not read {target} back"
        )
    if key in landed:
        return AssignmentOutcome(
            ASSIGNED_STATUS_ASSIGNED, target.key, key in attempted or owned, "Assigned", f"on {target}"
        )
    return AssignmentOutcome(
        ASSIGNED_STATUS_CREATED, target.key, owned, "AssignmentFailed", f"not on {target} after the update"
    )


# --- Validation -----------------------------------------------------------------------------------


def validate(
    identities: Iterable[AzureIdentity],
    bindings: Iterable[AzureIdentityBinding],
    matched_pods: Iterable[PodInfo] = (),
    nodes: Mapping[str, NodeInfo] | None = None,
) -> list[Problem]:
    """Bad input, one problem per object, each with a reason and a message that names the fix:
    malformed type-0 resourceIDs, bindings to a missing or invalid identity, matched pods on a
    node that does not exist or has no usable providerID. Sorted by kind, namespace, name."""
    problems: list[Problem] = []
    identity_list = list(identities)
    known = {_identity_key(identity): identity for identity in identity_list}
    usable = usable_identities(identity_list)
    for identity in identity_list:
        if _identity_key(identity) in usable:
            continue
        detail = (
            "spec.resourceID is empty"
            if not identity.spec.resource_id
            else f"spec.resourceID {identity.spec.resource_id!r} is not a user-assigned identity ID"
        )
        problems.append(
            Problem(
                "AzureIdentity",
                identity.namespace,
                identity.name,
                "InvalidResourceID",
                f"{detail}; expected /subscriptions/<id>/resourcegroups/<group>/providers/"
                "Microsoft.ManagedIdentity/userAssignedIdentities/<name>",
            )
        )
    for binding in bindings:
        wanted = (binding.namespace, binding.spec.azure_identity)
        if wanted in usable:
            continue
        if wanted in known:
            problems.append(
                Problem(
                    "AzureIdentityBinding",
                    binding.namespace,
                    binding.name,
                    "IdentityInvalid",
                    f"AzureIdentity {binding.namespace}/{binding.spec.azure_identity} is invalid "
                    "(see its events)",
                )
            )
        else:
            problems.append(
                Problem(
                    "AzureIdentityBinding",
                    binding.namespace,
                    binding.name,
                    "IdentityNotFound",
                    f"AzureIdentity {binding.spec.azure_identity!r} does not exist "
                    f"in namespace {binding.namespace}",
                )
            )
    if nodes is not None:
        for pod in matched_pods:
            node = nodes.get(pod.node_name)
            if node is None:
                problems.append(
                    Problem(
                        "Pod", pod.namespace, pod.name, "NodeNotFound", f"Node {pod.node_name} does not exist"
                    )
                )
                continue
            try:
                target_of_provider_id(node.provider_id)
            except InvalidResourceIdError:
                reason = "NodeWithoutProviderID" if not node.provider_id else "InvalidProviderID"
                problems.append(
                    Problem(
                        "Pod",
                        pod.namespace,
                        pod.name,
                        reason,
                        f"Node {node.name} has no Azure VM or scale set in spec.providerID "
                        f"({node.provider_id or 'empty'}); its identities cannot be assigned",
                    )
                )
    return sorted(
        problems, key=lambda problem: (problem.kind, problem.namespace, problem.name, problem.reason)
    )


# --- Identity info (clientId / principalId from Azure) ---------------------------------------------


def _format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def truncate_retrieval_error(message: str) -> str:
    """The first 1024 characters of a lookup error (ARO-HCP's RetrievalError)."""
    return message[:RETRIEVAL_ERROR_LIMIT]


def next_recheck_time(now: datetime, jitter: float) -> datetime:
    """now + 12 h x (1 + 0.5 x jitter), jitter in [0, 1): identities recreated in Azure are
    noticed within a day, and lookups of many identities spread out instead of bursting."""
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    return now + RECHECK_INTERVAL * (1 + 0.5 * jitter)


def identity_info_due(identity: AzureIdentity, now: datetime) -> bool:
    """Whether to look the identity up in Azure now: type 0 only; when the spec changed since the
    last lookup, when no recheck time is set (never looked up, or the last lookup failed), or
    when the recheck time has come."""
    if identity.spec.identity_type is not IdentityType.USER_ASSIGNED_MSI:
        return False
    status = identity.status
    if status.observed_generation != int(identity.metadata.get("generation") or 0):
        return True
    recheck = _parse_time(status.next_recheck_time)
    return recheck is None or now >= recheck


ConditionStatus = Literal["True", "False", "Unknown"]
_LOOKUP_REASONS = {"not_found": "NotFound", "failed": "RetrievalFailed", "invalid": "InvalidResourceID"}


@dataclass(frozen=True)
class IdentityLookup:
    """The outcome of one GET of a user-assigned identity: found (with its IDs), not found,
    failed (any other error), or invalid (the resourceID could not even be parsed)."""

    outcome: Literal["found", "not_found", "failed", "invalid"]
    client_id: str = ""
    principal_id: str = ""
    error: str = ""


def with_condition(
    conditions: Sequence[Condition],
    condition_type: str,
    *,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    observed_generation: int | None = None,
) -> list[Condition]:
    """A copy of ``conditions`` with one condition set; its lastTransitionTime moves only when its
    status changes (apimachinery's SetStatusCondition)."""
    result: list[Condition] = []
    found = False
    for condition in conditions:
        if condition.type != condition_type:
            result.append(condition)
            continue
        found = True
        transition = condition.last_transition_time if condition.status == status else _format_time(now)
        result.append(
            Condition(
                type=condition_type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=transition,
                observed_generation=observed_generation,
            )
        )
    if not found:
        result.append(
            Condition(
                type=condition_type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=_format_time(now),
                observed_generation=observed_generation,
            )
        )
    return result


def identity_info_status(
    identity: AzureIdentity, lookup: IdentityLookup, now: datetime, jitter: float
) -> AzureIdentityStatus:
    """The AzureIdentity status after a lookup (ARO-HCP's rules, plus the #521 condition).

    Found: clientID and principalID set, error cleared, next recheck in 12-18 h. Any error:
    both IDs cleared (never left stale) and the first 1024 characters of the error kept. Not
    found is not fatal (the identity may be created later): recheck at the usual interval.
    Other failures leave the recheck time unset, so the next pass retries (with the controller's
    backoff). Invalid resourceID: no recheck until the spec changes. ``ClientIDCurrent`` is False
    when spec.clientID is not the identity's real clientId (or is not set), Unknown while the
    real one is not known. Upstream's fields are kept as they were.
    """
    generation = int(identity.metadata.get("generation") or 0)
    old = identity.status
    conditions = list(old.conditions)

    def set_condition(condition_type: str, status: ConditionStatus, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = with_condition(
            conditions,
            condition_type,
            status=status,
            reason=reason,
            message=message,
            now=now,
            observed_generation=generation,
        )

    client_id = principal_id = retrieval_error = next_recheck = ""
    if lookup.outcome == "found":
        client_id, principal_id = lookup.client_id, lookup.principal_id
        next_recheck = _format_time(next_recheck_time(now, jitter))
        set_condition(CONDITION_RESOLVED, "True", "Found", "clientId and principalId read from Azure")
    else:
        retrieval_error = truncate_retrieval_error(lookup.error or lookup.outcome)
        if lookup.outcome == "not_found":
            next_recheck = _format_time(next_recheck_time(now, jitter))
        set_condition(CONDITION_RESOLVED, "False", _LOOKUP_REASONS[lookup.outcome], retrieval_error)
    spec_client_id = identity.spec.client_id
    if not client_id:
        set_condition(
            CONDITION_CLIENT_ID_CURRENT,
            "Unknown",
            "NotResolved",
            "the identity's clientId in Azure is not known",
        )
    elif not spec_client_id:
        set_condition(
            CONDITION_CLIENT_ID_CURRENT,
            "False",
            "NotSet",
            f"spec.clientID is empty; the identity's clientId is {client_id}",
        )
    elif spec_client_id.lower() != client_id.lower():
        set_condition(
            CONDITION_CLIENT_ID_CURRENT,
            "False",
            "Differs",
            f"spec.clientID {spec_client_id} differs from the identity's clientId {client_id} in Azure "
            "(was it deleted and recreated under the same name?); token requests for the old one fail",
        )
    else:
        set_condition(CONDITION_CLIENT_ID_CURRENT, "True", "Matches", "spec.clientID is current")
    return AzureIdentityStatus(
        metadata=old.metadata,
        available_replicas=old.available_replicas,
        client_id=client_id,
        principal_id=principal_id,
        retrieval_error=retrieval_error,
        next_recheck_time=next_recheck,
        observed_generation=generation,
        conditions=conditions,
    )
