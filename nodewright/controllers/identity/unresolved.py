"""The identity pass for pods whose node is missing or names no Azure VM or scale set (the
``UNRESOLVED_PODS`` key): such pods get their AzureAssignedIdentities (so NMI and users see them)
with a condition saying why nothing can be assigned, and a Warning Event; a pod whose node is
missing is retried on a backoff and its objects collected after ``missingNodeAttempts``
(``lifecycle``). MIC's objects whose node is gone are deleted, as MIC did.

Owns ``UnresolvedPass`` (read, step the node waits, plan, write, report) and ``NodeWaits`` (each
waiting pod's backoff, in memory). Side effects: Kubernetes writes through
``AssignedIdentityWriter`` and Events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from nodewright.api.aadpodidentity.v1 import AzureAssignedIdentity
from nodewright.controllers.identity.assigned_writes import AssignedIdentityWriter
from nodewright.controllers.identity.decisions import (
    EVENT_BINDING_APPLY_ERROR,
    AssignmentPolicy,
    DesiredAssignment,
    NodeInfo,
    PodInfo,
    assignment_changes,
)
from nodewright.controllers.identity.lifecycle import NodeWait, next_wait_in, node_wait_step
from nodewright.controllers.identity.pass_plan import MIN_REQUEUE, plan_unresolved_records
from nodewright.controllers.identity.reading import (
    IdentityStores,
    parse_assigned,
    parse_bindings,
    parse_identities,
)
from nodewright.controllers.identity.validation import validate
from nodewright.controllers.identity.watches import ASSIGNED_TARGET_INDEX, target_key_of_node, with_kind
from nodewright.runtime import EventRecorder, Result, get_logger

__all__ = ["NodeWaits", "UnresolvedPass", "UnresolvedView", "read_unresolved"]

log = get_logger(__name__)


@dataclass(frozen=True)
class UnresolvedView:
    """Active labelled pods on nodes that are missing or name no Azure target, the nodes that
    exist among theirs, and the objects recorded on no target whose node is missing or has none."""

    pods: list[PodInfo]
    node_infos: dict[str, NodeInfo]
    existing_here: list[AzureAssignedIdentity]


def read_unresolved(stores: IdentityStores) -> UnresolvedView:
    pods: list[PodInfo] = []
    node_infos: dict[str, NodeInfo] = {}
    for pod in stores.pods.store.list():
        info = PodInfo.from_object(pod)
        if not info.is_active or not info.binding_label:
            continue
        node = stores.nodes.store.get(info.node_name)
        if node is not None:
            node_infos[info.node_name] = NodeInfo.from_object(node)
            if target_key_of_node(node):
                continue
        pods.append(info)
    candidates = parse_assigned(stores.assigned.store.by_index(ASSIGNED_TARGET_INDEX, ""))
    existing_here = [
        a for a in candidates if not target_key_of_node(stores.nodes.store.get(a.spec.node_name) or {})
    ]
    return UnresolvedView(pods, node_infos, existing_here)


class NodeWaits:
    """One ``NodeWait`` per pod waiting for its node (thread-safe)."""

    def __init__(self, policy: AssignmentPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._waits: dict[tuple[str, str, str], NodeWait] = {}

    def step(
        self, pods: list[PodInfo], node_infos: Mapping[str, NodeInfo], now: datetime
    ) -> tuple[list[PodInfo], list[tuple[PodInfo, int]]]:
        """Advance each waiting pod's backoff. Returns the pods whose node is missing and that
        waited through all their attempts (their objects are collected), and those among them
        that ran out just now, with their attempts (to report once)."""
        first, cap = self.policy.rejected_identity_first_retry, self.policy.rejected_identity_retry
        limit = self.policy.missing_node_attempts
        waiting = {(p.namespace, p.name, p.node_name): p for p in pods if p.node_name not in node_infos}
        exhausted: list[PodInfo] = []
        newly: list[tuple[PodInfo, int]] = []
        with self._lock:
            for stale in set(self._waits) - set(waiting):
                del self._waits[stale]
            for wait_key, pod in waiting.items():
                previous = self._waits.get(wait_key)
                wait = node_wait_step(previous, now, first, cap)
                self._waits[wait_key] = wait
                if wait.exhausted(limit):
                    exhausted.append(pod)
                    if previous is None or not previous.exhausted(limit):
                        newly.append((pod, wait.attempts - 1))
        return exhausted, newly

    def next_in(self, now: datetime) -> float | None:
        """Seconds until the next attempt of any pod still waiting (None when none waits)."""
        with self._lock:
            return next_wait_in(self._waits.values(), now, self.policy.missing_node_attempts)


class UnresolvedPass:
    """The ``UNRESOLVED_PODS`` pass (see the module docstring)."""

    def __init__(
        self,
        stores: IdentityStores,
        writer: AssignedIdentityWriter,
        recorder: EventRecorder,
        policy: AssignmentPolicy,
        clock: Callable[[], datetime],
    ) -> None:
        self.stores = stores
        self.writer = writer
        self.recorder = recorder
        self.policy = policy
        self.clock = clock
        self.waits = NodeWaits(policy)

    def run(self) -> Result:
        view = read_unresolved(self.stores)
        exhausted, collected = self.waits.step(view.pods, view.node_infos, self.clock())
        for pod, attempts in collected:
            self._report_collected(pod, attempts)
        gone = {(p.namespace, p.name) for p in exhausted}
        kept = [p for p in view.pods if (p.namespace, p.name) not in gone]
        desired, names_in_use = self.stores.plan_desired(
            kept, view.existing_here, force_namespaced=self.policy.force_namespaced
        )
        changes = assignment_changes(desired, view.existing_here, names_in_use=names_in_use)
        self.writer.write_intents(changes, "", frozenset(), [])
        self.writer.write_records(plan_unresolved_records(changes, view.node_infos))
        self._report_unresolved(desired, kept, view.node_infos)
        retry = self.waits.next_in(self.clock())
        return Result(requeue_after=max(MIN_REQUEUE, retry)) if retry is not None else Result()

    def _pod_event(self, namespace: str, name: str, reason: str, message: str) -> None:
        pod_object = self.stores.pods.store.get(f"{namespace}/{name}")
        if pod_object is not None:
            self.recorder.event(with_kind(pod_object, "v1", "Pod"), "Warning", reason, message)

    def _report_collected(self, pod: PodInfo, attempts: int) -> None:
        log.warning(
            "Collected AzureAssignedIdentity of pod on missing node", pod=f"{pod.namespace}/{pod.name}"
        )
        message = (
            f"Node {pod.node_name} does not exist after {attempts} attempts; "
            "the pod's AzureAssignedIdentity is collected until the node appears"
        )
        self._pod_event(pod.namespace, pod.name, "NodeNotFound", message)

    def _report_unresolved(
        self, desired: list[DesiredAssignment], pods: list[PodInfo], node_infos: Mapping[str, NodeInfo]
    ) -> None:
        """A Warning Event on each matched pod that cannot get its identity, saying why."""
        matched = {(d.key.pod_namespace, d.key.pod_name) for d in desired}
        identities = parse_identities(self.stores.identities.store.list())
        bindings = parse_bindings(self.stores.bindings.store.list())
        matched_pods = [p for p in pods if (p.namespace, p.name) in matched]
        for problem in validate(identities, bindings, matched_pods, node_infos):
            if problem.kind == "Pod":
                self._pod_event(problem.namespace, problem.name, EVENT_BINDING_APPLY_ERROR, problem.message)
