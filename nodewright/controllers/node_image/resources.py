"""What the three node image reconcilers share: the runtime ``Kind`` of each nodewright.io CRD,
the checkpoint hook that names every write, the clock, controller references, and the
read-your-writes barrier.

The barrier exists because the NodeImage reconciler decides from the shared cache: if it ran again
before the cache had seen its own last writes (a Join PendingNode just created, a heir just
annotated) it would count too few extra nodes and exceed the surge. Each write records what the
cache must show; the reconcile does not end until it does. No I/O of its own beyond reading
informer stores; neighbours are ``node_image``, ``scaling_group`` and ``pending_node``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodewright.api.aadpodidentity.v1 import AzureAssignedIdentity
from nodewright.api.acn.v1alpha import NodeNetworkConfig
from nodewright.api.nodewright.v1alpha1 import AutoscalingStrategy, NodeImage, PendingNode, ScalingGroup
from nodewright.controllers.kinds import kind_of
from nodewright.runtime import Client, Kind, Store, errors

__all__ = [
    "AUTOSCALING_STRATEGY",
    "NODE_IMAGE",
    "NODE_NETWORK_CONFIG",
    "PENDING_NODE",
    "SCALING_GROUP",
    "Checkpoint",
    "Clock",
    "ReadYourWrites",
    "StaleCacheError",
    "controller_reference",
    "is_controlled_by",
    "no_checkpoint",
    "utc_now",
]


NODE_IMAGE = kind_of(NodeImage)
SCALING_GROUP = kind_of(ScalingGroup)
PENDING_NODE = kind_of(PendingNode)
AUTOSCALING_STRATEGY = kind_of(AutoscalingStrategy)
NODE_NETWORK_CONFIG = kind_of(NodeNetworkConfig)
AZURE_ASSIGNED_IDENTITY = kind_of(AzureAssignedIdentity)
"""Read only: the heir IP-pool gate reads the status the IPAM side publishes."""

Checkpoint = Callable[[str], None]
"""Called with a step's name just before each write. Production passes ``no_checkpoint``; the
restart tests raise from it to stop the process at exactly that boundary."""


def no_checkpoint(step: str) -> None:
    """The production checkpoint: nothing happens between steps."""


Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, timezone-aware, to the second (as Kubernetes stores times)."""
    return datetime.now(UTC).replace(microsecond=0)


def controller_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference making ``owner`` the controller (garbage collection follows it)."""
    metadata = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_controlled_by(obj: dict[str, Any], uid: str) -> bool:
    """Whether the object's controller reference names the owner with ``uid``."""
    return any(
        reference.get("controller") and reference.get("uid") == uid
        for reference in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


class StaleCacheError(Exception):
    """The cache did not show this reconcile's writes in time; the reconcile is retried."""


def _resource_version(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str((obj.get("metadata") or {}).get("resourceVersion", ""))


class ReadYourWrites:
    """Expectations on informer stores, one per write of a reconcile, and a wait for them.

    ``written(kind, store, key, before)``: the cache must hold ``key`` at a version other than
    ``before`` (the cached object the write started from; ``None`` for a create).
    ``deleted(kind, store, key, uid)``: the cache must no longer hold that object. Versions are
    compared for equality only, never ordered, as the API conventions require. An expectation
    still open after ``grace`` seconds is settled by asking the API server: it holds once the
    cache shows what the server has (so an object someone else deleted or changed meanwhile does
    not hold the reconcile up).
    """

    def __init__(self, client: Client, *, grace: float = 0.5) -> None:
        self._client = client
        self._grace = grace
        self._expectations: list[_Expectation] = []

    def written(self, kind: Kind, store: Store, key: str, before: dict[str, Any] | None) -> None:
        previous = _resource_version(before)
        self._expectations.append(
            _Expectation(
                kind, store, key, lambda cached: cached is not None and _resource_version(cached) != previous
            )
        )

    def deleted(self, kind: Kind, store: Store, key: str, uid: str) -> None:
        self._expectations.append(
            _Expectation(
                kind,
                store,
                key,
                lambda cached: cached is None or (cached.get("metadata") or {}).get("uid") != uid,
            )
        )

    def wait(self, timeout: float = 10.0) -> None:
        """Block until every expectation holds (then forget them); ``StaleCacheError`` after
        ``timeout`` seconds."""
        start = time.monotonic()
        asked_server = False
        try:
            while True:
                pending = [e for e in self._expectations if not e.check(e.store.get(e.key))]
                if pending and not asked_server and time.monotonic() - start >= self._grace:
                    asked_server = True
                    for expectation in pending:
                        expectation.check = self._matches_server(expectation)
                    continue
                if not pending:
                    return
                if time.monotonic() - start >= timeout:
                    keys = ", ".join(e.key for e in pending[:5])
                    raise StaleCacheError(f"cache did not show writes to {keys} within {timeout} s")
                time.sleep(0.01)
        finally:
            self._expectations.clear()

    def _matches_server(self, expectation: _Expectation) -> Callable[[dict[str, Any] | None], bool]:
        """A check that holds once the cache shows the object as the server has it now."""
        name = expectation.key.rpartition("/")[2]
        namespace = expectation.key.rpartition("/")[0] or None
        try:
            server_version: str | None = _resource_version(
                self._client.get(expectation.kind, name, namespace)
            )
        except errors.NotFound:
            server_version = None
        return lambda cached: _resource_version(cached) == server_version


@dataclass
class _Expectation:
    kind: Kind
    store: Store
    key: str
    check: Callable[[dict[str, Any] | None], bool]
