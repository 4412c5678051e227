"""Pure rules about targets (the VMs and scale sets identities live on): each node's target, what
each target needs, what existing AzureAssignedIdentities record there, the delta to send
(``identity_diff``, aad-pod-identity's ``generateIdentityAssignmentDiff`` with nodewright's
ownership rules), which identities ARM refused recently and when to try them again (exponential
backoff, capped), drift repair (add only) and the status each assignment gets afterwards.

No I/O; see ``decisions`` for the rules' rationale. ``pass_plan`` puts a pass's values through them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    AzureAssignedIdentity,
    IdentityType,
)
from nodewright.cloud.errors import CloudError, ThrottledError, is_terminal
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ScaleSetInstanceId,
    parse_provider_id,
)
from nodewright.controllers.identity.decisions import (
    AssignmentKey,
    AssignmentPolicy,
    DesiredAssignment,
    IdentityTarget,
    NodeInfo,
    Problem,
    identity_resource_key,
)
from nodewright.runtime import format_time

__all__ = [
    "TARGET_UPDATE_FAILED",
    "AssignmentOutcome",
    "AssignmentRecord",
    "IdentityDiff",
    "IdentityNeed",
    "Rejection",
    "assignment_outcome",
    "drift_repairs",
    "identities_to_attempt",
    "identity_diff",
    "keeps_confirmed",
    "needs_by_target",
    "next_attempt_in",
    "node_targets",
    "note_rejection",
    "owned_by_nodewright",
    "retry_delay",
    "target_failure",
    "target_of_provider_id",
    "update_throttled",
]


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

    def confirmed_on(self, target: str) -> bool:
        """Whether the object was Assigned on ``target`` (its identity seen there)."""
        return self.target == target.lower() and self.status == ASSIGNED_STATUS_ASSIGNED


def keeps_confirmed(
    own: AssignmentRecord | None, target: str, landed: frozenset[str] | None, target_gone: bool
) -> bool:
    """Whether an object keeps its status untouched this pass: it was Assigned on ``target`` and
    what the target holds is unknown (``landed`` None: the re-read after a failure was refused).
    Writing Created over it would make its release keep the identity on the target for good
    ("never confirmed Assigned")."""
    return landed is None and not target_gone and own is not None and own.confirmed_on(target)


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


@dataclass(frozen=True)
class Rejection:
    """ARM refused to add an identity to a target: what it said, how many times in a row, and when
    the identity may be sent again (exponential backoff, see ``note_rejection``)."""

    code: str
    message: str
    attempts: int
    retry_at: datetime

    @property
    def reason(self) -> str:
        """The Assigned condition's reason: IdentityNotFound when the identity does not exist in
        Azure, else IdentityRejected (no permission to assign it, or any other refusal)."""
        text = self.message.lower()
        if "was not found" in text or "does not exist" in text or "notfound" in self.code.lower():
            return "IdentityNotFound"
        return "IdentityRejected"

    def describe(self) -> str:
        """The condition message: ARM's words, the attempt count and the next attempt."""
        when = format_time(self.retry_at)
        return f"{self.code}: {self.message} (attempt {self.attempts}; next attempt after {when})"


def retry_delay(attempts: int, first: timedelta, cap: timedelta) -> timedelta:
    """``first`` x 2^(attempts - 1), at most ``cap``: 1, 2, 4 ... x first, then cap for good."""
    if attempts <= 1:
        return min(first, cap)
    delay: timedelta = first * float(2 ** min(attempts - 1, 32))
    return min(cap, delay)


def note_rejection(
    previous: Rejection | None, code: str, message: str, now: datetime, *, first: timedelta, cap: timedelta
) -> Rejection:
    """The record after one more refusal of the same identity on the same target."""
    attempts = (previous.attempts if previous is not None else 0) + 1
    return Rejection(code, message, attempts, now + retry_delay(attempts, first, cap))


def identities_to_attempt(
    to_add: Iterable[str], rejections: Mapping[str, Rejection], now: datetime
) -> tuple[frozenset[str], frozenset[str]]:
    """Split the identities to add into those to send now and those ARM refused whose next attempt
    has not come (held back, so a known-bad identity costs no failing PATCH per pass)."""
    attempt: set[str] = set()
    held: set[str] = set()
    for key in to_add:
        rejection = rejections.get(key.lower())
        if rejection is not None and now < rejection.retry_at:
            held.add(key.lower())
        else:
            attempt.add(key.lower())
    return frozenset(attempt), frozenset(held)


def next_attempt_in(held: Iterable[str], rejections: Mapping[str, Rejection], now: datetime) -> float | None:
    """Seconds until the first held identity may be sent again (None when none is held)."""
    times = [rejections[key].retry_at for key in held if key in rejections]
    if not times:
        return None
    return max(0.0, (min(times) - now).total_seconds())


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
    rejections: Mapping[str, Rejection] | None = None,
    held: frozenset[str] = frozenset(),
    node_exists: bool = True,
    failure: str = "",
) -> AssignmentOutcome:
    """Decide one assignment's status from what actually landed (re-read after any failure).

    ``landed``: the identities on the target after the update (None when even the re-read
    failed). ``attempted``: what this pass asked ARM to add. ``owned``: nodewright already owned
    the identity there (this assignment's own record, or another's, see
    ``owned_by_nodewright``). ``rejections``: ARM's refusals on this target (with attempt counts
    and next attempt). ``held``: identities not sent because their next attempt has not come.
    ``node_exists``: whether the pod's node exists (it matters only without a target).
    ``failure``: why the whole update failed (``target_failure``), for each identity not on it.
    Only an identity actually on the target is Assigned (NMI serves tokens only then); it is
    nodewright's to remove later if this pass added it or nodewright owned it already. Service
    principals (types 1 and 2) need nothing on the VM and are Assigned at once, as MIC did.
    Every other outcome is Created with a reason and a message saying why.
    """
    if desired.identity_type is not IdentityType.USER_ASSIGNED_MSI:
        message = "a service principal needs nothing on the node"
        return AssignmentOutcome(ASSIGNED_STATUS_ASSIGNED, "", False, "NothingToAssign", message)
    if target is None:
        return _without_target(desired, node_exists)
    key = desired.resource_key
    if landed is not None and key in landed:
        return AssignmentOutcome(
            ASSIGNED_STATUS_ASSIGNED, target.key, key in attempted or owned, "Assigned", f"on {target}"
        )
    rejection = (rejections or {}).get(key)
    if rejection is not None and (key in held or key in attempted):
        return AssignmentOutcome(
            ASSIGNED_STATUS_CREATED, target.key, owned, rejection.reason, rejection.describe()
        )
    if key in held:
        return AssignmentOutcome(
            ASSIGNED_STATUS_CREATED,
            target.key,
            owned,
            "IdentityRejected",
            "ARM rejected this identity recently; it is retried later, the others are not held up",
        )
    if failure:
        return AssignmentOutcome(ASSIGNED_STATUS_CREATED, target.key, owned, TARGET_UPDATE_FAILED, failure)
    if landed is None:
        return AssignmentOutcome(
            ASSIGNED_STATUS_CREATED, target.key, owned, "AssignmentFailed", f"could not read {target} back"
        )
    return AssignmentOutcome(
        ASSIGNED_STATUS_CREATED, target.key, owned, "AssignmentFailed", f"not on {target} after the update"
    )


def _without_target(desired: DesiredAssignment, node_exists: bool) -> AssignmentOutcome:
    if not node_exists:
        return AssignmentOutcome(
            ASSIGNED_STATUS_CREATED, "", False, "NodeNotFound", f"node {desired.node_name} does not exist"
        )
    return AssignmentOutcome(
        ASSIGNED_STATUS_CREATED,
        "",
        False,
        "NodeNotResolvable",
        f"node {desired.node_name} has no Azure VM or scale set in its providerID",
    )


TARGET_UPDATE_FAILED = "TargetUpdateFailed"
"""An assignment's reason when its VM or scale set's update failed as a whole: reported once per
binding and pass (``AssignedIdentityWriter.announce_target_failure``), not once per pod."""


def target_failure(error: Exception | None) -> str:
    """What a failed target update says to every assignment waiting on it ("" when nothing
    failed). Identities ARM refused by name keep their own reason (``rejections`` come first).
    The text names ARM's error code only, so it stays the same while the failure lasts (the
    retries behind a backoff are not news); for a terminal answer (``is_terminal``: a limit, a
    quota, an invalid request, which only a change elsewhere fixes) also ARM's message, which
    says what to change and stays the same too."""
    if error is None:
        return ""
    if isinstance(error, CloudError):
        code = error.code or (f"HTTP {error.status_code}" if error.status_code else type(error).__name__)
    else:
        code = type(error).__name__
    cause = getattr(error, "cause", error)
    if isinstance(cause, CloudError) and is_terminal(cause):
        return f"updating the target failed ({code}: {cause.message[:300]}); retried with backoff"
    return f"updating the target failed ({code}); retried with backoff"


def update_throttled(error: Exception | None) -> bool:
    """Whether a target update failed on a 429 (``ComputeService`` wraps it with what it re-read
    afterwards: the 429 is the ``cause``). ARM says when to come back; the next pass reads
    again whatever did land."""
    cause = getattr(error, "cause", error)
    return isinstance(cause, ThrottledError)
