"""Uniform scale-set instances' models for their read-modify-writes, read a scale set at a time
while its instances are written in a burst (issue 32).

Owns ``InstanceModels``. A NIC write on a Uniform instance edits the instance's model: a GET, then
a PUT carrying the GET's etag. At a cold start of 1,000 nodes those GETs were 1,000 of ARM's
3,497 reads, one per node. A listing of the scale set's instances (one read per page of 100)
holds the same documents with their etags:

- ``model(instance)`` answers a copy of the instance's listed document and its etag from a
  listing younger than ``max_age``. With none, it lists the scale set, one list per scale set at
  a time (the other callers wait for its answer), but only while the scale set is being written
  in a burst: another of its instances was asked for within ``max_age``. An instance written
  alone is read with a GET (``None`` here): it costs one read either way, and a listing's pages
  grow with the scale set. A listing that answered no more models than it had pages saved no
  read (a rollout's new machines are written soon after they appear, so a listing seldom shows
  them): the scale set is not listed again for a minute. A failed list answers None (the caller
  GETs), counts as such a listing, and logs one line per run of failures.
- ``forget(instance)``: the caller wrote the instance, or its listed etag no longer matched: the
  listing answers None for it from then on.
- Memory: a listing's documents are kept encoded (orjson bytes; each answer decodes its own
  copy), and dropped at the scale set's first ask after they aged out.

No stale decision can follow: the PUT carries the listed etag as If-Match, so an instance that
another writer changed after the listing gets 412, and the caller reads it again with a GET and
decides again (``instance_ip_configurations``). Thread-safe; the lister does the I/O; log lines.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from nodewright.cloud.errors import CloudError
from nodewright.cloud.resource_ids import ScaleSetId, ScaleSetInstanceId

__all__ = ["DEFAULT_MAX_AGE_SECONDS", "UNPAID_HOLD_FACTOR", "InstanceModels", "ListInstances"]

DEFAULT_MAX_AGE_SECONDS = 10.0
"""How long a listing answers, and how close two asks must be to count as a burst."""

UNPAID_HOLD_FACTOR = 6
"""After a listing that answered no more models than it had pages (it saved no read: the burst's
instances were new since, as a rollout's new machines are), the scale set is not listed again for
this many ``max_age`` (a minute by default)."""

log = logging.getLogger(__name__)

ListInstances = Callable[[ScaleSetId], tuple[list[dict[str, Any]], int]]
"""Every instance document of a scale set and the pages read (``ComputeService`` lists them raw,
through its calls)."""


@dataclass
class _Scope:
    lock: threading.Lock = field(default_factory=threading.Lock)
    asked_at: float = float("-inf")
    listed_at: float = float("-inf")
    documents: dict[str, bytes] = field(default_factory=dict)
    """Instance ID (lowercase) -> its listed document, encoded (each answer decodes a copy)."""
    pages: int = 0
    served: int = 0
    """The last listing's pages (its reads), and the models it answered."""
    failing: bool = False


class InstanceModels:
    """Briefly reused listings of Uniform scale sets' instance models (see the module docstring)."""

    def __init__(
        self,
        lister: ListInstances,
        *,
        max_age: float = DEFAULT_MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister, self._max_age, self._clock = lister, max_age, clock
        self._scopes: dict[str, _Scope] = {}
        self._lock = threading.Lock()
        self.lists = 0
        """Listings sent (failed ones included)."""

    def model(self, instance: ScaleSetInstanceId) -> tuple[dict[str, Any], str | None] | None:
        """A copy of the instance's listed document and its etag, or None: the caller GETs it."""
        scope = self._scope(instance.scale_set)
        with self._lock:
            asked_before, scope.asked_at = scope.asked_at, self._clock()
        with scope.lock:  # one list per scale set at a time: the others wait for its answer
            now = self._clock()
            if now - scope.listed_at >= self._max_age:
                scope.documents = {}  # stale: not kept in memory
                if now - asked_before >= self._max_age:
                    return None  # written alone: a GET costs no more
                if scope.served <= scope.pages and now - scope.listed_at < UNPAID_HOLD_FACTOR * self._max_age:
                    return None  # the last listing saved no read
                self._list(instance.scale_set, scope, now)
            encoded = scope.documents.get(instance.instance_id.lower())
            if encoded is None:
                return None
            scope.served += 1
        document: dict[str, Any] = orjson.loads(encoded)
        etag = document.get("etag")
        return document, str(etag) if etag else None

    def forget(self, instance: ScaleSetInstanceId) -> None:
        """The listed document of ``instance`` is no longer its model (written, or 412)."""
        scope = self._scope(instance.scale_set)
        with scope.lock:
            scope.documents.pop(instance.instance_id.lower(), None)

    def _scope(self, scale_set: ScaleSetId) -> _Scope:
        with self._lock:
            return self._scopes.setdefault(str(scale_set).lower(), _Scope())

    def _list(self, scale_set: ScaleSetId, scope: _Scope, now: float) -> None:
        """List the scale set into ``scope`` (held); a failure leaves it empty (and unpaid)."""
        scope.documents, scope.listed_at, scope.pages, scope.served = {}, now, 0, 0
        self.lists += 1
        try:
            listed, scope.pages = self._lister(scale_set)
        except CloudError as error:
            if not scope.failing:
                log.warning(
                    "Listing a scale set's instances failed, reading them one by one: scale_set=%s error=%s",
                    scale_set,
                    error,
                )
            scope.failing = True
            return
        if scope.failing:
            log.info("Listed a scale set's instances again: scale_set=%s", scale_set)
        scope.failing = False
        scope.documents = {
            str(entry["instanceId"]).lower(): orjson.dumps(entry)
            for entry in listed
            if entry.get("instanceId") is not None
        }
