"""What the API server committed, in its order, for tests that must know what a controller saw
when it wrote: ``History`` records every version of one kind's objects from a watch, and
``hand_overs`` reads from the Node and PendingNode histories whether each donor's heir was Ready
when the donor was handed to its Leave PendingNode."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nodewright.controllers.node_image.grouping import HEIR_ANNOTATION
from nodewright.controllers.node_image.resources import PENDING_NODE
from nodewright.runtime.kube.kinds import NODE, Kind
from nodewright.runtime.kube.objects import condition_is_true as node_ready
from tests.controllers.node_image.support import RolloutBench

__all__ = ["History", "hand_overs", "readiness", "recording"]


class History(threading.Thread):
    """Every version of one kind's objects, each with its resourceVersion, from a watch opened
    before the rollout starts. The local etcd numbers all writes in one sequence, so versions of
    Nodes and PendingNodes can be put in the order the API server committed them: what a
    sampler cannot do when a donor leaves within one sample of its heir turning Ready."""

    def __init__(self, bench: RolloutBench, kind: Kind) -> None:
        super().__init__(daemon=True, name=f"history-{kind.plural}")
        listed = bench.client.list(kind)
        self.versions: list[tuple[int, dict[str, Any]]] = [
            (int(item["metadata"]["resourceVersion"]), item) for item in listed.items
        ]
        self.added: list[tuple[int, dict[str, Any]]] = []
        self._stream = bench.client.watch(
            kind, resource_version=listed.resource_version, timeout_seconds=900, allow_bookmarks=False
        )

    def run(self) -> None:
        for event in self._stream:
            entry = (int(event.object["metadata"]["resourceVersion"]), event.object)
            self.versions.append(entry)
            if event.type == "ADDED":
                self.added.append(entry)

    def at(self, name: str, version: int) -> dict[str, Any] | None:
        """The object ``name`` as it stood just before ``version`` was written."""
        before = [obj for rv, obj in self.versions if rv < version and obj["metadata"]["name"] == name]
        return before[-1] if before else None

    def stop(self) -> None:
        self._stream.close()
        self.join(5)


@contextmanager
def recording(bench: RolloutBench) -> Iterator[tuple[History, History]]:
    """The Node and PendingNode histories, recording from now until the block ends."""
    histories = (History(bench, NODE), History(bench, PENDING_NODE))
    for history in histories:
        history.start()
    try:
        yield histories
    finally:
        for history in histories:
            history.stop()


def hand_overs(nodes: History, pending_nodes: History, donors: set[str]) -> dict[str, str]:
    """Each donor in ``donors`` handed to a Leave PendingNode while it had a heir, with the
    heir's Ready condition at that moment (``Ready``, or what it was instead)."""
    found: dict[str, str] = {}
    for version, record in pending_nodes.added:
        donor = nodes.at(record["spec"]["nodeName"], version)
        if record["spec"]["goal"] != "Leave" or donor is None or donor["metadata"]["name"] not in donors:
            continue
        heir = (donor["metadata"].get("annotations") or {}).get(HEIR_ANNOTATION)
        if heir is not None:
            found[donor["metadata"]["name"]] = readiness(nodes.at(heir, version))
    return found


def readiness(node: dict[str, Any] | None) -> str:
    """``Ready``, or the Node's Ready condition as a failure message shows it."""
    if node is None:
        return "no Node"
    if node_ready(node):
        return "Ready"
    conditions = [c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"]
    return f"{node['metadata']['name']} Ready={conditions[0]['status'] if conditions else 'absent'}"
