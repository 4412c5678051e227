"""A stand-in for Azure CNS in NodeSubnet mode (v1.6.48), the real consumer of NIC secondary IPs,
for tests, benchmarks and ``make run``; true to CNS on every point where it differs from an
optimistic reading (docs/ipam.md, "Simulating CNS NodeSubnet", maps each to CNS's source).

Owns ``NodeSubnetConsumer``: one CNS per selected Node, from the moment the Node exists.

- **NMAgent.** Each CNS fetches its node's interfaces from a ``LaggedNMAgent`` (ARM's state as
  it was ``nmagent_lag`` seconds ago; ``cns_nodesubnet_nmagent``) on CNS's schedule
  (``FetchSchedule``: at start, then 4 s, doubling to 1,024 s while the answer stays the same);
  a failed fetch changes nothing; a fetch can hang for good (no timeout): that node's pool is
  then frozen. An answer with no interfaces is cached but applies nothing.
- **The pool.** Each answer handed on becomes an update of CNS's IP state (``CnsNodeState``),
  refused as a whole when it drops an Assigned address; a refused update's dropped addresses
  stay Available for good (stranded) and its new ones wait for the next different answer.
- **CNI ADD/DEL, cluster-wide.** Every pod bound to a served node (any namespace, not host
  network, not being deleted, not finished, no address yet) is an ADD: it gets any Available
  address, written to ``status.podIP``/``podIPs`` as the CNI does, or waits (``starved_since``);
  nothing is served before CNS's first successful update (no CNI config yet). A pod that is gone
  or finished is a DEL: its address becomes Available. "Assigned" is this bookkeeping alone,
  never read back from pod status.
- **Restart** (``restart(node)``): memory lost, endpoint state kept (``CnsNodeState.restart``).
- **What it counts.** ``stale_handouts``: addresses handed out that ARM no longer had on the NIC
  at that moment (such a pod has no working network); ``refused_updates()``; ``stranded(node)``.

``sync_once()`` is one pass; ``start``/``stop`` run passes in a thread.
Side effects: pod status patches through the runtime Client; reads of the emulator's state.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodewright.devenv.cns_nodesubnet_nmagent import (
    DEFAULT_NMAGENT_LAG_SECONDS,
    AnswerSource,
    Interfaces,
    LaggedNMAgent,
    NMAgentUnavailableError,
)
from nodewright.devenv.cns_nodesubnet_state import (
    MAX_FETCH_INTERVAL_SECONDS,
    MIN_FETCH_INTERVAL_SECONDS,
    CnsNodeState,
    FetchSchedule,
    apply_fetch,
)
from nodewright.devenv.periodic import PeriodicThread
from nodewright.runtime import errors
from nodewright.runtime.kube.client import Client
from nodewright.runtime.kube.kinds import NODE, POD
from nodewright.runtime.observe.logs import get_logger

__all__ = ["FetchHungError", "NodeSubnetConsumer"]

log = get_logger("nodewright.devenv.cns_nodesubnet")
Object = dict[str, Any]
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class FetchHungError(Exception):
    """Raised by an NMAgent stand-in to say the fetch never returns (CNS sets no timeout)."""


@dataclass
class _NodeCns:
    schedule: FetchSchedule
    state: CnsNodeState = field(default_factory=CnsNodeState)
    hung: bool = False


def pod_key(pod: Object) -> str:
    """``namespace/name``: how the stand-in's figures name a pod."""
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


class NodeSubnetConsumer:
    """Plays CNS NodeSubnet on every Node matching ``node_selector`` (module docstring)."""

    def __init__(
        self,
        client: Client,
        answers: AnswerSource,
        *,
        node_selector: str = "",
        nmagent_lag: float = DEFAULT_NMAGENT_LAG_SECONDS,
        interval: float = 0.05,
        minimum: float = MIN_FETCH_INTERVAL_SECONDS,
        maximum: float = MAX_FETCH_INTERVAL_SECONDS,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.nmagent = LaggedNMAgent(answers, lag=nmagent_lag, sample_seconds=min(0.2, interval * 4))
        self._node_selector = node_selector or None
        self.interval = interval
        self._minimum, self._maximum = minimum, max(minimum, maximum)
        self._clock = clock
        self._random = random.Random(seed)  # noqa: S311 - which free address CNS takes: no secret
        self._nodes: dict[str, _NodeCns] = {}
        self.first_seen: dict[str, float] = {}
        self.assigned_at: dict[str, float] = {}
        self.starved_since: dict[str, float] = {}
        self.stale_handouts = 0
        self.fetches = 0
        self.errors: list[BaseException] = []
        self._loop = PeriodicThread(
            "cns-nodesubnet", self.sync_once, lambda: self.interval, on_error=self.errors.append
        )

    # -- what tests, benchmarks and the demo read -------------------------------------------------

    def starvation(self) -> dict[str, float]:
        """Pods that found no free IP at some pass -> how long until they got one (inf: never)."""
        # Copies first: the sync thread may add entries while a reader iterates.
        assigned, starved = dict(self.assigned_at), dict(self.starved_since)
        return {n: assigned.get(n, float("inf")) - s for n, s in starved.items()}

    def refused_updates(self) -> int:
        """Updates CNS refused because an address it had Assigned was missing from the answer."""
        return sum(cns.state.refused_updates for cns in self._nodes.values())

    def known(self, node: str) -> set[str]:
        """Every address CNS holds for ``node`` (Available or Assigned)."""
        cns = self._nodes.get(node)
        return set(cns.state.addresses) if cns else set()

    def assigned(self, node: str) -> dict[str, str]:
        """``namespace/name`` -> address: the pods CNS has Assigned an address on ``node``."""
        cns = self._nodes.get(node)
        return {key.split("|", 1)[1]: a for key, a in cns.state.endpoints.items()} if cns else {}

    def stranded(self, node: str) -> set[str]:
        """Addresses on ``node`` that no later update can delete (see ``CnsNodeState``)."""
        cns = self._nodes.get(node)
        return cns.state.stranded() if cns else set()

    def node_state(self, node: str) -> CnsNodeState | None:
        cns = self._nodes.get(node)
        return cns.state if cns else None

    def schedule(self, node: str) -> FetchSchedule | None:
        cns = self._nodes.get(node)
        return cns.schedule if cns else None

    # -- running ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def restart(self, node: str) -> None:
        """CNS on ``node`` restarts: it keeps only its endpoint state and fetches again at once."""
        cns = self._nodes.get(node)
        if cns is not None:
            cns.state.restart()
            cns.schedule = FetchSchedule(
                self._minimum, self._maximum, self._minimum, next_fetch=self._clock()
            )
            cns.hung = False

    def sync_once(self) -> int:
        """One pass: start CNS on new nodes, run the fetches that are due, then CNI DEL for pods
        gone and ADD for pods waiting; returns how many pods got an address."""
        now = self._clock()
        self.nmagent.sample(now)
        for node in self._client.list(NODE, label_selector=self._node_selector).items:
            name = str(node["metadata"]["name"])
            cns = self._nodes.setdefault(name, _NodeCns(self._new_schedule(now)))
            if not cns.hung and now >= cns.schedule.next_fetch:
                self._fetch(name, cns, now)
        by_node: dict[str, list[Object]] = {}
        for pod in self._client.list(POD).items:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name in self._nodes and not (pod.get("spec") or {}).get("hostNetwork"):
                by_node.setdefault(str(node_name), []).append(pod)
        given = 0
        for name, cns in self._nodes.items():
            pods = by_node.get(name, [])
            self._cni_delete(cns.state, pods)
            given += self._cni_add(name, cns.state, pods, now)
        return given

    def _new_schedule(self, now: float) -> FetchSchedule:
        return FetchSchedule(self._minimum, self._maximum, self._minimum, next_fetch=now)

    def _fetch(self, node: str, cns: _NodeCns, now: float) -> None:
        """One fetch from NMAgent and, when the schedule hands it on, one update of the pool."""
        self.fetches += 1
        answer: Interfaces | None
        try:
            answer = self.nmagent.answer(node, now)
        except FetchHungError:
            cns.hung = True
            log.info("Fetch from NMAgent hung; the IP pool stays as it is", node=node)
            return
        except NMAgentUnavailableError:
            answer = None
        if apply_fetch(cns.schedule, cns.state, answer, now) == "refused":
            log.info(
                "Refused an IP update: an assigned IP was missing from NMAgent's answer",
                node=node,
                stranded=len(cns.state.stranded()),
            )

    def _cni_delete(self, state: CnsNodeState, pods: list[Object]) -> None:
        """CNI DEL for every endpoint whose pod is gone or finished."""
        live = {
            f"{p['metadata'].get('uid', '')}|{pod_key(p)}"
            for p in pods
            if (p.get("status") or {}).get("phase") not in FINISHED_PHASES
        }
        for key in [k for k in state.endpoints if k not in live]:
            state.release(key)

    def _cni_add(self, node: str, state: CnsNodeState, pods: list[Object], now: float) -> int:
        """CNI ADD for every pod waiting for an address; returns how many got one."""
        given = 0
        arm_now: set[str] | None = None
        for pod in pods:
            key = f"{pod['metadata'].get('uid', '')}|{pod_key(pod)}"
            status = pod.get("status") or {}
            if key in state.endpoints or status.get("podIP") or status.get("phase") in FINISHED_PHASES:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            name = pod_key(pod)
            self.first_seen.setdefault(name, now)
            address = state.assign(key, self._random.choice)
            if address is None:
                self.starved_since.setdefault(name, now)
                continue
            if arm_now is None:
                arm_now = self._arm_now(node)
            if address not in arm_now:
                self.stale_handouts += 1
            if self._write_address(pod, address):
                self.assigned_at[name] = self._clock()
                given += 1
            else:
                state.release(key)
        return given

    def _arm_now(self, node: str) -> set[str]:
        """The secondary addresses ARM holds for ``node`` right now (not NMAgent's lagged view)."""
        self.nmagent.sample(self._clock(), force=True)
        return self.nmagent.current(node)

    def _write_address(self, pod: Object, address: str) -> bool:
        """Write the address into the pod's status as the CNI does; False if the pod is gone."""
        with contextlib.suppress(errors.NotFound):
            self._client.patch(
                POD,
                pod["metadata"]["name"],
                {"status": {"podIP": address, "podIPs": [{"ip": address}]}},
                pod["metadata"].get("namespace"),
                subresource="status",
            )
            return True
        return False
