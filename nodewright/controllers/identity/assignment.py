"""The identity assignment reconciler: one pass per VM or scale set (the *target*), level-based.

A pass reads, from the shared cache, the target's nodes, the labelled pods on them, every
AzureIdentity and AzureIdentityBinding, and the AzureAssignedIdentities recorded on the target;
asks ``decisions`` what should exist; reads the target's identities from ARM (one GET); writes
new and changed AzureAssignedIdentities (status Created, with the target and the ownership
intent recorded *before* the PATCH so a crash cannot leak an identity); sends one delta PATCH
for the target (150 per request, rejected identities isolated, by ``ComputeService``); then
records what actually landed (Assigned only when the identity is on the target), removes
finalizers and deletes the objects whose identity is released. Events as MIC's: "binding
applied", "binding apply error", "binding removed", "binding remove error".

Requests are keyed by the target's lowercased ARM ID (not a Kubernetes object), so every watch
maps: a pod or node to its node's target, an identity or binding to the targets of the pods it
matches, an assigned identity to its recorded target. One more request, ``UNRESOLVED``, handles
pods on nodes that name no Azure VM or scale set, and assigned identities left by MIC on nodes
that are gone. Watches filter out status-only churn (node heartbeats, our own status writes), so
ARM is read only when something relevant changed, and every ``repairInterval`` per target (the
drift repair of aad-pod-identity #633 / #1308). A burst of changes to one target is batched
(``ChangeBatcher``: ``batchWindow`` of quiet, at most ``batchMaxDelay``) so it costs one PATCH;
the pass's Kubernetes writes run ``writeConcurrency`` at a time.

Side effects: Kubernetes writes through the runtime ``Client``, Events, ARM calls through the
``IdentityCompute`` protocol (``ComputeService`` in production).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Protocol

from nodewright.api.aadpodidentity.v1 import (
    ASSIGNED_IDENTITY_FINALIZER,
    ASSIGNED_STATUS_ASSIGNED,
    ASSIGNED_STATUS_CREATED,
    CONDITION_ASSIGNED,
    NODE_NAME_LABEL,
    POD_LABEL,
    AzureAssignedIdentity,
    AzureIdentity,
    AzureIdentityBinding,
    IdentityType,
)
from nodewright.api.base import ValidationError
from nodewright.cloud.compute import IdentityUpdateIncompleteError
from nodewright.cloud.errors import CloudError, NotFoundError
from nodewright.cloud.models import IdentityRejection, IdentityUpdateResult, ResourceIdentities
from nodewright.cloud.resource_ids import (
    InvalidResourceIdError,
    ScaleSetInstanceId,
    parse_machine_id,
    parse_scale_set_id,
)
from nodewright.controllers.identity.conditions import (
    with_condition,
)
from nodewright.controllers.identity.decisions import (
    EVENT_BINDING_APPLIED,
    EVENT_BINDING_APPLY_ERROR,
    EVENT_BINDING_REMOVE_ERROR,
    EVENT_BINDING_REMOVED,
    AssignmentKey,
    DesiredAssignment,
    IdentityTarget,
    NodeInfo,
    PodInfo,
    assigned_identity_name,
    assigned_identity_namespace,
    assignment_changes,
    assignment_key_of,
    desired_assignments,
    match_pods,
)
from nodewright.controllers.identity.options import (
    AZURE_ASSIGNED_IDENTITY,
    AZURE_IDENTITY,
    AZURE_IDENTITY_BINDING,
    IdentityOptions,
)
from nodewright.controllers.identity.targets import (
    AssignmentOutcome,
    AssignmentRecord,
    IdentityNeed,
    assignment_outcome,
    drift_repairs,
    identities_to_attempt,
    identity_diff,
    owned_by_nodewright,
    target_of_provider_id,
)
from nodewright.controllers.identity.validation import (
    validate,
)
from nodewright.runtime import errors
from nodewright.runtime.cache import Cache
from nodewright.runtime.client import Client
from nodewright.runtime.events import EventRecorder
from nodewright.runtime.kinds import NODE, POD
from nodewright.runtime.logs import get_logger
from nodewright.runtime.predicates import Predicate, predicate
from nodewright.runtime.reconcile import Request, Result

__all__ = [
    "ASSIGNED_NODE_INDEX",
    "ASSIGNED_POD_INDEX",
    "ASSIGNED_TARGET_INDEX",
    "BINDING_LABEL_INDEX",
    "NODE_NAME_INDEX",
    "NO_EVENTS",
    "TARGET_INDEX",
    "UNRESOLVED",
    "ChangeBatcher",
    "IdentityAssignmentReconciler",
    "IdentityCompute",
    "node_relevant_change",
    "pod_relevant_change",
    "spec_or_deletion_change",
]

log = get_logger(__name__)

UNRESOLVED = Request("", "unresolved")
"""Pods on nodes without an Azure target, and MIC's objects whose node is gone."""

TARGET_INDEX = "identity.target"
"""Nodes by the lowercased ARM ID of their target ("" when they have none)."""
NODE_NAME_INDEX = "spec.nodeName"
BINDING_LABEL_INDEX = "aadpodidbinding"
ASSIGNED_TARGET_INDEX = "status.target"
"""AzureAssignedIdentities by recorded target ("" when none is recorded, as MIC wrote them)."""
ASSIGNED_NODE_INDEX = "spec.nodename"
ASSIGNED_POD_INDEX = "spec.pod"
"""AzureAssignedIdentities by ``<podNamespace>/<pod>``."""


class IdentityCompute(Protocol):
    """The cloud operations this reconciler needs (``ComputeService`` provides them)."""

    def get_identities(self, target: IdentityTarget) -> ResourceIdentities: ...

    def update_identities(
        self, target: IdentityTarget, add: Iterable[str] = (), remove: Iterable[str] = ()
    ) -> IdentityUpdateResult: ...


# --- indexes, predicates, map functions ---------------------------------------------------------


def _target_key_of_node(node: Mapping[str, Any]) -> str:
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    if not provider_id:
        return ""
    try:
        return target_of_provider_id(provider_id).key
    except InvalidResourceIdError:
        return ""


def node_target_index(node: dict[str, Any]) -> list[str]:
    return [_target_key_of_node(node)]


def pod_node_index(pod: dict[str, Any]) -> list[str]:
    node_name = (pod.get("spec") or {}).get("nodeName")
    return [str(node_name)] if node_name else []


def pod_binding_label_index(pod: dict[str, Any]) -> list[str]:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(POD_LABEL)
    return [str(value)] if value else []


def assigned_target_index(assigned: dict[str, Any]) -> list[str]:
    return [str((assigned.get("status") or {}).get("target") or "").lower()]


def assigned_node_index(assigned: dict[str, Any]) -> list[str]:
    node_name = (assigned.get("spec") or {}).get("nodename")
    return [str(node_name)] if node_name else []


def assigned_pod_index(assigned: dict[str, Any]) -> list[str]:
    spec = assigned.get("spec") or {}
    return [f"{spec.get('podNamespace', '')}/{spec.get('pod', '')}"]


def _pod_facts(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    info = PodInfo.from_object(pod)
    return (info.node_name, info.is_active, info.binding_label)


def pod_relevant_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A pod update matters only when its node, its label or whether it runs changed."""
    return _pod_facts(old) != _pod_facts(new)


def node_relevant_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A node update matters only when its providerID changed (not heartbeats or conditions)."""
    return (old.get("spec") or {}).get("providerID") != (new.get("spec") or {}).get("providerID")


def spec_or_deletion_change(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Spec edits (generation) and deletion requests, not status writes (ours or anyone's)."""
    old_metadata, new_metadata = old.get("metadata") or {}, new.get("metadata") or {}
    return old_metadata.get("generation") != new_metadata.get("generation") or bool(
        new_metadata.get("deletionTimestamp")
    ) != bool(old_metadata.get("deletionTimestamp"))


def _never(*_: dict[str, Any]) -> bool:
    return False


NO_EVENTS: Predicate = predicate(create=_never, update=_never, delete=_never, generic=_never)
"""For the builder's ``for_``: this controller's requests are targets, all produced by maps."""


def _now() -> datetime:
    return datetime.now(UTC)


def _with_kind(obj: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    return {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}


class ChangeBatcher:
    """Collects a burst of changes per request so that it lands in one pass (and one PATCH):
    a pass waits until no event came for ``window`` seconds, but never longer than ``max_delay``
    after the first event of the burst. A pass with no pending burst (a periodic one) goes at
    once. Thread-safe: informer threads note, workers wait."""

    def __init__(
        self, window: float, max_delay: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.window = window
        self.max_delay = max_delay
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._first: dict[Request, float] = {}
        self._last: dict[Request, float] = {}

    def note(self, requests: Iterable[Request]) -> None:
        now = self.monotonic()
        with self._lock:
            for request in requests:
                self._first.setdefault(request, now)
                self._last[request] = now

    def wait(self, request: Request) -> float:
        """Seconds to wait before this pass; 0 means go now (and the burst is consumed)."""
        now = self.monotonic()
        with self._lock:
            first = self._first.get(request)
            if first is None:
                return 0.0
            wait = min(self._last[request] + self.window, first + self.max_delay) - now
            if wait > 0:
                return wait
            del self._first[request]
            del self._last[request]
            return 0.0


class IdentityAssignmentReconciler:
    """Drives each VM and scale set to carry exactly the identities its pods need (see the module
    docstring). One worker per target at a time (the work queue guarantees it); targets run in
    parallel up to the controller's ``max_concurrent_reconciles``."""

    def __init__(
        self,
        client: Client,
        cache: Cache,
        compute: IdentityCompute,
        recorder: EventRecorder,
        options: IdentityOptions,
        *,
        clock: Callable[[], datetime] = _now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.cache = cache
        self.compute = compute
        self.recorder = recorder
        self.options = options
        self.policy = options.policy
        self.clock = clock
        self.nodes = cache.informer(NODE)
        self.pods = cache.informer(POD, label_selector=POD_LABEL)
        self.identities = cache.informer(AZURE_IDENTITY)
        self.bindings = cache.informer(AZURE_IDENTITY_BINDING)
        self.assigned = cache.informer(AZURE_ASSIGNED_IDENTITY)
        self._rejected_lock = threading.Lock()
        self._rejected_at: dict[str, dict[str, datetime]] = {}
        self.batcher = ChangeBatcher(options.batch_window, options.batch_max_delay, monotonic)

    def add_indexers(self) -> None:
        """Indexes the passes and map functions read (call before the cache starts)."""
        self.nodes.add_indexer(TARGET_INDEX, node_target_index)
        self.pods.add_indexer(NODE_NAME_INDEX, pod_node_index)
        self.pods.add_indexer(BINDING_LABEL_INDEX, pod_binding_label_index)
        self.assigned.add_indexer(ASSIGNED_TARGET_INDEX, assigned_target_index)
        self.assigned.add_indexer(ASSIGNED_NODE_INDEX, assigned_node_index)
        self.assigned.add_indexer(ASSIGNED_POD_INDEX, assigned_pod_index)

    # --- map functions --------------------------------------------------------------------------

    def _target_request_of_node(self, node_name: str) -> Request:
        node = self.nodes.store.get(node_name)
        key = _target_key_of_node(node) if node is not None else ""
        return Request("", key) if key else UNRESOLVED

    def requests_for_pod(self, pod: dict[str, Any]) -> list[Request]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        return [self._target_request_of_node(str(node_name))] if node_name else []

    def requests_for_node(self, node: dict[str, Any]) -> list[Request]:
        key = _target_key_of_node(node)
        return [Request("", key) if key else UNRESOLVED]

    def _requests_for_selectors(self, selectors: Iterable[str]) -> list[Request]:
        requests: dict[Request, None] = {}
        for selector in selectors:
            if not selector:
                continue
            for pod in self.pods.store.by_index(BINDING_LABEL_INDEX, selector):
                for request in self.requests_for_pod(pod):
                    requests.setdefault(request, None)
        return list(requests)

    def requests_for_binding(self, binding: dict[str, Any]) -> list[Request]:
        return self._requests_for_selectors([str((binding.get("spec") or {}).get("selector") or "")])

    def requests_for_identity(self, identity: dict[str, Any]) -> list[Request]:
        metadata = identity.get("metadata") or {}
        selectors = [
            str((binding.get("spec") or {}).get("selector") or "")
            for binding in self.bindings.store.list()
            if (binding.get("metadata") or {}).get("namespace") == metadata.get("namespace")
            and (binding.get("spec") or {}).get("azureIdentity") == metadata.get("name")
        ]
        return self._requests_for_selectors(selectors)

    def requests_for_assigned(self, assigned: dict[str, Any]) -> list[Request]:
        requests: dict[Request, None] = {}
        target = str((assigned.get("status") or {}).get("target") or "").lower()
        if target:
            requests.setdefault(Request("", target), None)
        spec = assigned.get("spec") or {}
        if spec.get("nodename"):
            requests.setdefault(self._target_request_of_node(str(spec["nodename"])), None)
        pod = self.pods.store.get(f"{spec.get('podNamespace', '')}/{spec.get('pod', '')}")
        if pod is not None:
            for request in self.requests_for_pod(pod):
                requests.setdefault(request, None)
        return list(requests)

    # --- the pass ---------------------------------------------------------------------------------

    def noted(
        self, map_function: Callable[[dict[str, Any]], list[Request]]
    ) -> Callable[[dict[str, Any]], list[Request]]:
        """``map_function``, telling the batcher when each target saw an event."""

        def mapped(obj: dict[str, Any]) -> list[Request]:
            requests = map_function(obj)
            self.batcher.note(requests)
            return requests

        return mapped

    def reconcile(self, request: Request) -> Result:
        wait = self.batcher.wait(request)
        if wait > 0:
            return Result(requeue_after=wait)
        if request == UNRESOLVED:
            return self._reconcile_unresolved()
        return self._reconcile_target(request.name)

    def _read_identities_and_bindings(self) -> tuple[list[AzureIdentity], list[AzureIdentityBinding]]:
        identities: list[AzureIdentity] = []
        for obj in self.identities.store.list():
            try:
                identities.append(
                    AzureIdentity.from_object(_with_kind(obj, AZURE_IDENTITY.api_version, "AzureIdentity"))
                )
            except ValidationError as error:
                log.warning(
                    "Skipped invalid AzureIdentity",
                    name=(obj.get("metadata") or {}).get("name"),
                    error=str(error),
                )
        bindings: list[AzureIdentityBinding] = []
        for obj in self.bindings.store.list():
            try:
                bindings.append(
                    AzureIdentityBinding.from_object(
                        _with_kind(obj, AZURE_IDENTITY_BINDING.api_version, "AzureIdentityBinding")
                    )
                )
            except ValidationError as error:
                log.warning(
                    "Skipped invalid AzureIdentityBinding",
                    name=(obj.get("metadata") or {}).get("name"),
                    error=str(error),
                )
        return identities, bindings

    @staticmethod
    def _assigned_of(objects: Iterable[dict[str, Any]]) -> list[AzureAssignedIdentity]:
        result: list[AzureAssignedIdentity] = []
        for obj in objects:
            try:
                result.append(
                    AzureAssignedIdentity.from_object(
                        _with_kind(obj, AZURE_ASSIGNED_IDENTITY.api_version, "AzureAssignedIdentity")
                    )
                )
            except ValidationError as error:
                log.warning(
                    "Skipped invalid AzureAssignedIdentity",
                    name=(obj.get("metadata") or {}).get("name"),
                    error=str(error),
                )
        return result

    def _plan_desired(
        self, pods: list[PodInfo], existing_here: list[AzureAssignedIdentity]
    ) -> tuple[list[DesiredAssignment], set[tuple[str, str]]]:
        """Desired assignments of ``pods``, named around objects other passes own, and the names
        those objects hold."""
        identities, bindings = self._read_identities_and_bindings()
        matches = match_pods(pods, bindings, identities, force_namespaced=self.policy.force_namespaced)
        here = {(a.namespace, a.name) for a in existing_here}
        taken: dict[tuple[str, str], AssignmentKey] = {}
        for match in matches:
            namespace = assigned_identity_namespace(match.identity, self.policy.force_namespaced)
            name = assigned_identity_name(match.pod.name, match.pod.namespace, match.identity.name)
            if (namespace, name) in here:
                continue
            holder = self.assigned.store.get(f"{namespace}/{name}")
            if holder is not None:
                parsed = self._assigned_of([holder])
                key = assignment_key_of(parsed[0]) if parsed else None
                if key is not None:
                    taken[(namespace, name)] = key
        desired = desired_assignments(matches, force_namespaced=self.policy.force_namespaced, taken=taken)
        in_use = {
            (wanted.namespace, wanted.name)
            for wanted in desired
            if (wanted.namespace, wanted.name) not in here
            and self.assigned.store.get(f"{wanted.namespace}/{wanted.name}") is not None
        }
        return desired, in_use

    def _typed_target(self, key: str, nodes: list[dict[str, Any]]) -> IdentityTarget:
        for node in nodes:
            try:
                return target_of_provider_id(str(node["spec"]["providerID"]))
            except (KeyError, InvalidResourceIdError):
                continue
        if "/virtualmachinescalesets/" in key:
            return parse_scale_set_id(key)
        machine = parse_machine_id(key)
        return machine.scale_set if isinstance(machine, ScaleSetInstanceId) else machine

    def _reconcile_target(self, key: str) -> Result:
        nodes = self.nodes.store.by_index(TARGET_INDEX, key)
        node_names = {str(node["metadata"]["name"]) for node in nodes}
        target = self._typed_target(key, nodes)
        pods = [
            PodInfo.from_object(pod)
            for name in sorted(node_names)
            for pod in self.pods.store.by_index(NODE_NAME_INDEX, name)
        ]
        recorded = self.assigned.store.by_index(ASSIGNED_TARGET_INDEX, key)
        unrecorded = [
            obj
            for name in node_names
            for obj in self.assigned.store.by_index(ASSIGNED_NODE_INDEX, name)
            if not (obj.get("status") or {}).get("target")
        ]
        existing_here = self._assigned_of([*recorded, *unrecorded])
        if not nodes and not existing_here:
            return Result()
        desired, names_in_use = self._plan_desired(pods, existing_here)
        changes = assignment_changes(desired, existing_here, names_in_use=names_in_use)
        records_here = [r for r in (AssignmentRecord.of(a, node_target=key) for a in existing_here) if r]
        released = {(a.namespace, a.name): AssignmentRecord.of(a, node_target=key) for a in changes.release}
        needs = [
            IdentityNeed(wanted.resource_key, wanted.client_id, wanted.key)
            for wanted in desired
            if wanted.identity_type is IdentityType.USER_ASSIGNED_MSI
        ]
        touches_cloud = bool(needs) or any(
            record is not None and record.identity_type is IdentityType.USER_ASSIGNED_MSI
            for record in released.values()
        )
        now = self.clock()
        failure: Exception | None = None
        landed: frozenset[str] | None = frozenset()
        attempt: frozenset[str] = frozenset()
        held: frozenset[str] = frozenset()
        rejections: dict[str, str] = {}
        retained: Mapping[str, str] = {}
        target_gone = False
        current: frozenset[str] = frozenset()
        if touches_cloud:
            try:
                current = self.compute.get_identities(target).user_assigned
            except NotFoundError:
                target_gone = True
                log.info("Found target gone from Azure", target=key)
            diff = identity_diff(current, needs, [r for r in released.values() if r is not None], self.policy)
            retained = diff.retained
            attempt, held = identities_to_attempt(
                diff.to_add, self._rejections_of(key), now, self.policy.rejected_identity_retry
            )
            if target_gone:
                attempt = frozenset()
            repairs = drift_repairs(current, records_here, key) & attempt
            if repairs:
                log.info("Re-added identities removed out of band", target=key, identities=sorted(repairs))
            self._write_intents(changes, key, attempt, records_here)
            landed = current
            if (attempt or diff.to_remove) and not target_gone:
                try:
                    result = self.compute.update_identities(target, add=attempt, remove=diff.to_remove)
                    landed = result.identities.user_assigned
                    rejections = self._note_rejections(key, result.rejected, now)
                    log.info(
                        "Updated identities",
                        target=key,
                        added=sorted(attempt & landed),
                        removed=sorted(diff.to_remove - landed),
                        rejected=sorted(rejections),
                        requests=result.requests,
                    )
                except IdentityUpdateIncompleteError as error:
                    landed = error.identities.user_assigned if error.identities is not None else None
                    rejections = self._note_rejections(key, error.rejected, now)
                    failure = error
                except CloudError as error:
                    landed = None
                    failure = error
        else:
            self._write_intents(changes, key, attempt, records_here)

        def decide(pair: tuple[AzureAssignedIdentity | None, DesiredAssignment]) -> None:
            assigned_object, wanted = pair
            own = (
                AssignmentRecord.of(assigned_object, node_target=key) if assigned_object is not None else None
            )
            outcome = assignment_outcome(
                wanted,
                target,
                None if target_gone else landed,
                attempted=attempt,
                owned=owned_by_nodewright(records_here, key, wanted.resource_key)
                or (own is not None and own.target == key and own.added_by_nodewright),
                rejections=rejections,
                held=held,
            )
            self._record_outcome(wanted, assigned_object, outcome)

        self._each(self._kept_and_new(changes), decide)
        self._each(
            changes.release,
            lambda assigned_object: self._finish_release(
                assigned_object,
                released[(assigned_object.namespace, assigned_object.name)],
                landed,
                retained,
                target_gone,
            ),
        )
        if failure is not None:
            raise failure
        if not nodes:
            return Result()
        return Result(requeue_after=self.options.repair_interval)

    def _rejections_of(self, key: str) -> dict[str, datetime]:
        with self._rejected_lock:
            return dict(self._rejected_at.get(key, {}))

    def _note_rejections(
        self, key: str, rejected: Iterable[IdentityRejection], now: datetime
    ) -> dict[str, str]:
        messages = {r.identity_id.lower(): f"{r.code}: {r.message}" for r in rejected}
        with self._rejected_lock:
            table = self._rejected_at.setdefault(key, {})
            for identity_id in messages:
                table[identity_id] = now
        return messages

    @staticmethod
    def _kept_and_new(changes: Any) -> list[tuple[AzureAssignedIdentity | None, DesiredAssignment]]:
        pairs: list[tuple[AzureAssignedIdentity | None, DesiredAssignment]] = [
            (None, d) for d in changes.create
        ]
        pairs.extend((obj, d) for obj, d in changes.update)
        pairs.extend((obj, d) for obj, d in changes.keep)
        return pairs

    # --- writes -----------------------------------------------------------------------------------

    def _write_intents(
        self, changes: Any, key: str, attempt: frozenset[str], records_here: list[AssignmentRecord]
    ) -> None:
        """Create new objects and rewrite changed ones before the PATCH, recording the target and
        whether nodewright is the one adding the identity (so a crash after the PATCH cannot
        leave an identity nodewright added without a record that lets it remove it later)."""
        self._each(changes.create, lambda wanted: self._create(wanted, key, attempt, records_here))
        self._each(changes.update, lambda pair: self._rewrite(pair[0], pair[1], key, attempt, records_here))
        self._each(changes.keep, lambda pair: self._note_target(pair[0], pair[1], key, attempt, records_here))

    def _each(self, items: Iterable[Any], function: Callable[[Any], None]) -> None:
        """Run ``function`` on every item, ``writeConcurrency`` at a time (MIC's createDeleteBatch);
        raises the first failure once all are done."""
        work = list(items)
        if len(work) <= 1 or self.options.write_concurrency <= 1:
            for item in work:
                function(item)
            return
        with ThreadPoolExecutor(max_workers=min(len(work), self.options.write_concurrency)) as pool:
            futures = [pool.submit(contextvars.copy_context().run, function, item) for item in work]
        failures = [future.exception() for future in futures if future.exception() is not None]
        if failures:
            raise failures[0]  # type: ignore[misc]

    def _create(
        self,
        wanted: DesiredAssignment,
        key: str,
        attempt: frozenset[str],
        records_here: list[AssignmentRecord],
    ) -> None:
        body = wanted.to_resource().to_object()
        try:
            created = self.client.create(AZURE_ASSIGNED_IDENTITY, body)
        except errors.AlreadyExists:
            log.info(
                "Found AzureAssignedIdentity already created", name=wanted.name, namespace=wanted.namespace
            )
            return
        self._patch_status(created, self._intent_status(wanted, key, attempt, records_here))
        log.info(
            "Created AzureAssignedIdentity",
            name=wanted.name,
            namespace=wanted.namespace,
            pod=f"{wanted.key.pod_namespace}/{wanted.key.pod_name}",
            node=wanted.node_name,
        )

    def _rewrite(
        self,
        assigned_object: AzureAssignedIdentity,
        wanted: DesiredAssignment,
        key: str,
        attempt: frozenset[str],
        records_here: list[AssignmentRecord],
    ) -> None:
        body = assigned_object.to_object()
        body["metadata"]["labels"] = {
            **(body["metadata"].get("labels") or {}),
            NODE_NAME_LABEL: wanted.node_name,
        }
        body["spec"] = wanted.to_resource().to_object()["spec"]
        body.pop("status", None)
        updated = self.client.update(AZURE_ASSIGNED_IDENTITY, body)  # Conflict: stale cache, retried
        self._patch_status(updated, self._intent_status(wanted, key, attempt, records_here))
        log.info(
            "Updated AzureAssignedIdentity",
            name=wanted.name,
            namespace=wanted.namespace,
            node=wanted.node_name,
        )

    def _note_target(
        self,
        assigned_object: AzureAssignedIdentity,
        wanted: DesiredAssignment,
        key: str,
        attempt: frozenset[str],
        records_here: list[AssignmentRecord],
    ) -> None:
        status = assigned_object.status
        intended = self._intent_status(wanted, key, attempt, records_here, previous=assigned_object)
        if status.target != intended["target"] or status.added_by_nodewright != intended["addedByNodewright"]:
            self._patch_status(
                assigned_object.to_object(),
                {"target": intended["target"], "addedByNodewright": intended["addedByNodewright"]},
            )

    def _intent_status(
        self,
        wanted: DesiredAssignment,
        key: str,
        attempt: frozenset[str],
        records_here: list[AssignmentRecord],
        previous: AzureAssignedIdentity | None = None,
    ) -> dict[str, Any]:
        if wanted.identity_type is not IdentityType.USER_ASSIGNED_MSI:
            return {
                "status": ASSIGNED_STATUS_CREATED,
                "availableReplicas": 1,
                "target": "",
                "addedByNodewright": False,
            }
        resource = wanted.resource_key
        added = resource in attempt or owned_by_nodewright(records_here, key, resource)
        if previous is not None and previous.status.target == key and previous.status.added_by_nodewright:
            added = True
        if (
            previous is not None
            and not previous.status.target
            and previous.status.status == ASSIGNED_STATUS_ASSIGNED
            and self.policy.remove_unmarked_assignments
        ):
            added = True  # adopting MIC's object: MIC would have removed it, as configured
        status = {"target": key, "addedByNodewright": added}
        if previous is None:
            status.update(status=ASSIGNED_STATUS_CREATED, availableReplicas=1)
        return status

    def _patch_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        try:
            self.client.patch(
                AZURE_ASSIGNED_IDENTITY,
                str(metadata["name"]),
                {"status": dict(status)},
                str(metadata.get("namespace") or ""),
                subresource="status",
            )
        except errors.NotFound:
            log.info(
                "Found AzureAssignedIdentity gone before its status was written", name=metadata.get("name")
            )

    def _binding_object(
        self, wanted_or_assigned: DesiredAssignment | AzureAssignedIdentity
    ) -> dict[str, Any] | None:
        if isinstance(wanted_or_assigned, DesiredAssignment):
            namespace, name = wanted_or_assigned.binding.namespace, wanted_or_assigned.binding.name
        else:
            reference = wanted_or_assigned.spec.azure_binding_ref
            if reference is None:
                return None
            namespace, name = reference.namespace, reference.name
        obj = self.bindings.store.get(f"{namespace}/{name}")
        return _with_kind(obj, AZURE_IDENTITY_BINDING.api_version, "AzureIdentityBinding") if obj else None

    def _record_outcome(
        self,
        wanted: DesiredAssignment,
        assigned_object: AzureAssignedIdentity | None,
        outcome: AssignmentOutcome,
    ) -> None:
        previous = assigned_object.status if assigned_object is not None else None
        previous_condition = next(
            (c for c in (previous.conditions if previous else []) if c.type == CONDITION_ASSIGNED), None
        )
        unchanged = (
            previous is not None
            and previous.status == outcome.status
            and previous.target == outcome.target
            and previous.added_by_nodewright == outcome.added_by_nodewright
            and previous_condition is not None
            and previous_condition.reason == outcome.reason
            and previous_condition.message == outcome.message
        )
        if unchanged:
            return
        conditions = with_condition(
            previous.conditions if previous else [],
            CONDITION_ASSIGNED,
            status="True" if outcome.assigned else "False",
            reason=outcome.reason,
            message=outcome.message,
            now=self.clock(),
        )
        status = {
            "status": outcome.status,
            "availableReplicas": 1,
            "target": outcome.target,
            "addedByNodewright": outcome.added_by_nodewright,
            "conditions": [c.to_dict() for c in conditions],
        }
        self._patch_status({"metadata": {"name": wanted.name, "namespace": wanted.namespace}}, status)
        binding = self._binding_object(wanted)
        pod = f"{wanted.key.pod_namespace}/{wanted.key.pod_name}"
        was_assigned = previous is not None and previous.status == ASSIGNED_STATUS_ASSIGNED
        if outcome.assigned and not was_assigned:
            log.info(
                "Assigned identity",
                identity=wanted.resource_key or wanted.key.identity_name,
                pod=pod,
                node=wanted.node_name,
            )
            if binding is not None:
                self.recorder.event(
                    binding,
                    "Normal",
                    EVENT_BINDING_APPLIED,
                    f"Binding {wanted.binding.name} applied on node {wanted.node_name} for pod {pod}",
                )
        elif not outcome.assigned and (
            previous_condition is None
            or previous_condition.reason != outcome.reason
            or previous_condition.message != outcome.message
        ):
            log.warning(
                "Failed to assign identity",
                identity=wanted.resource_key,
                pod=pod,
                reason=outcome.reason,
                detail=outcome.message,
            )
            if binding is not None:
                self.recorder.event(
                    binding,
                    "Warning",
                    EVENT_BINDING_APPLY_ERROR,
                    f"Applying binding {wanted.binding.name} on node {wanted.node_name} for pod {pod} "
                    f"failed: {outcome.reason}: {outcome.message}",
                )

    def _finish_release(
        self,
        assigned_object: AzureAssignedIdentity,
        record: AssignmentRecord | None,
        landed: frozenset[str] | None,
        retained: Mapping[str, str],
        target_gone: bool,
    ) -> None:
        """Delete a released object once its identity is off the target, or is not nodewright's
        to remove; otherwise keep it (and its record) for the next pass."""
        binding = self._binding_object(assigned_object)
        pod = f"{assigned_object.spec.pod_namespace}/{assigned_object.spec.pod}"
        done = (
            target_gone
            or record is None
            or record.identity_type is not IdentityType.USER_ASSIGNED_MSI
            or record.resource_key in retained
            or (landed is not None and record.resource_key not in landed)
        )
        if not done:
            log.warning("Failed to remove identity", identity=record.resource_key if record else "", pod=pod)
            if binding is not None:
                self.recorder.event(
                    binding,
                    "Warning",
                    EVENT_BINDING_REMOVE_ERROR,
                    f"Removing binding from node {assigned_object.spec.node_name} for pod {pod} "
                    "did not complete; retrying",
                )
            return
        self._delete(assigned_object)
        reason = retained.get(record.resource_key, "") if record is not None else ""
        log.info(
            "Released AzureAssignedIdentity",
            name=assigned_object.name,
            namespace=assigned_object.namespace,
            identity_kept=reason or None,
        )
        if binding is not None:
            kept = f" (identity kept on the node: {reason})" if reason else ""
            self.recorder.event(
                binding,
                "Normal",
                EVENT_BINDING_REMOVED,
                f"Binding {binding['metadata'].get('name')} removed from node "
                f"{assigned_object.spec.node_name} for pod {pod}{kept}",
            )

    def _delete(self, assigned_object: AzureAssignedIdentity) -> None:
        finalizers = list(assigned_object.metadata.get("finalizers") or [])
        if ASSIGNED_IDENTITY_FINALIZER in finalizers:
            index = finalizers.index(ASSIGNED_IDENTITY_FINALIZER)
            operations = [
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": ASSIGNED_IDENTITY_FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ]
            try:
                self.client.patch(
                    AZURE_ASSIGNED_IDENTITY,
                    assigned_object.name,
                    operations,
                    assigned_object.namespace,
                    patch_type="json",
                )
            except errors.NotFound:
                return
        if not assigned_object.metadata.get("deletionTimestamp"):
            self.client.delete(
                AZURE_ASSIGNED_IDENTITY,
                assigned_object.name,
                assigned_object.namespace,
                ignore_not_found=True,
            )

    # --- pods on nodes with no Azure target ---------------------------------------------------

    def _reconcile_unresolved(self) -> Result:
        """Pods on nodes that are missing or name no Azure VM or scale set get their objects (so
        NMI and users see them) with a condition saying why nothing can be assigned, and a
        Warning Event; MIC's objects whose node is gone are deleted, as MIC did."""
        unresolved_pods: list[PodInfo] = []
        node_infos: dict[str, NodeInfo] = {}
        for pod in self.pods.store.list():
            info = PodInfo.from_object(pod)
            if not info.is_active or not info.binding_label:
                continue
            node = self.nodes.store.get(info.node_name)
            if node is not None:
                node_infos[info.node_name] = NodeInfo.from_object(node)
                if _target_key_of_node(node):
                    continue
            unresolved_pods.append(info)
        candidates = self._assigned_of(self.assigned.store.by_index(ASSIGNED_TARGET_INDEX, ""))
        existing_here = [
            a
            for a in candidates
            if self.nodes.store.get(a.spec.node_name) is None
            or not _target_key_of_node(self.nodes.store.get(a.spec.node_name) or {})
        ]
        desired, names_in_use = self._plan_desired(unresolved_pods, existing_here)
        changes = assignment_changes(desired, existing_here, names_in_use=names_in_use)
        self._write_intents(changes, "", frozenset(), [])
        self._each(
            self._kept_and_new(changes),
            lambda pair: self._record_outcome(pair[1], pair[0], assignment_outcome(pair[1], None, None)),
        )
        matched = {(d.key.pod_namespace, d.key.pod_name) for d in desired}
        identities, bindings = self._read_identities_and_bindings()
        problems = validate(
            identities,
            bindings,
            [p for p in unresolved_pods if (p.namespace, p.name) in matched],
            node_infos,
        )
        for problem in problems:
            if problem.kind != "Pod":
                continue
            pod_object = self.pods.store.get(f"{problem.namespace}/{problem.name}")
            if pod_object is not None:
                self.recorder.event(
                    _with_kind(pod_object, "v1", "Pod"), "Warning", EVENT_BINDING_APPLY_ERROR, problem.message
                )
        self._each(
            changes.release,
            lambda assigned_object: self._finish_release(assigned_object, None, None, {}, False),
        )
        return Result()
