"""Table tests of the evicted-pods health gate (pure): the record a drain leaves on the heir and
its verdict against the pods of its namespaces, and the gate failure it turns into."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodewright.controllers.node_image.evicted_pods import (
    EvictedPodsVerdict,
    EvictionRecord,
    PodFacts,
    PodFactsCache,
    check_eviction_facts,
    check_evictions,
    controller_of,
    new_record,
)
from nodewright.controllers.node_image.rollout_state import gate_failure
from nodewright.runtime.informers.informer import Store
from nodewright.runtime.informers.transforms import CompressedJson

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
SINCE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
WEB = "ReplicaSet/web-1/uid-web"
DB = "StatefulSet/db/uid-db"


def pod(
    name: str,
    node: str,
    owner: str | None = WEB,
    *,
    created: str = "2026-11-30T12:00:05Z",
    ready: bool = True,
    phase: str = "Running",
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "apps", "creationTimestamp": created}
    if owner is not None:
        kind, owner_name, uid = owner.split("/")
        metadata["ownerReferences"] = [{"kind": kind, "name": owner_name, "uid": uid, "controller": True}]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-30T12:00:10Z"
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": metadata,
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": conditions},
    }


RECORD = EvictionRecord("donor", SINCE, SINCE, {"apps/web-a": WEB, "apps/web-b": WEB, "apps/db-0": DB})


@pytest.mark.parametrize(
    ("pods", "verdict", "missing"),
    [
        pytest.param(
            [
                pod("web-c", "heir"),
                pod("web-d", "other"),
                pod("db-0", "heir", DB, created="2026-11-30T12:00:00Z"),
            ],
            EvictedPodsVerdict.SATISFIED,
            {},
            id="every-controller-has-ready-replacements",
        ),
        pytest.param(
            [
                pod("web-c", "heir"),
                pod("web-d", "heir", ready=False, phase="Pending"),
                pod("db-0", "heir", DB),
            ],
            EvictedPodsVerdict.OVERDUE,
            {f"apps/{WEB}": 1},
            id="one-replacement-not-ready-after-the-deadline",
        ),
        pytest.param(
            [
                pod("web-c", "heir"),
                pod("web-d", "heir", created="2026-11-30T11:59:00Z"),
                pod("db-0", "x", DB),
            ],
            EvictedPodsVerdict.OVERDUE,
            {f"apps/{WEB}": 1},
            id="a-pod-older-than-the-eviction-is-no-replacement",
        ),
        pytest.param(
            [pod("web-a", "donor"), pod("web-c", "heir"), pod("db-0", "heir", DB)],
            EvictedPodsVerdict.SATISFIED,
            {},
            id="a-pod-still-on-the-donor-was-not-evicted-yet",
        ),
        pytest.param(
            [pod("web-c", "heir"), pod("web-d", "heir", deleting=True), pod("db-0", "heir", DB)],
            EvictedPodsVerdict.OVERDUE,
            {f"apps/{WEB}": 1},
            id="a-deleted-replacement-does-not-count",
        ),
        pytest.param(
            [
                pod("web-c", "heir"),
                pod("web-d", "heir"),
                pod("db-0", "heir", DB, ready=False, phase="Succeeded"),
            ],
            EvictedPodsVerdict.SATISFIED,
            {},
            id="a-finished-pod-counts",
        ),
        pytest.param(
            [pod("web-c", "heir"), pod("web-d", "heir"), pod("stray", "heir", None)],
            EvictedPodsVerdict.OVERDUE,
            {f"apps/{DB}": 1},
            id="another-controllers-pod-does-not-count",
        ),
    ],
)
def test_a_record_is_checked_per_controller(
    pods: list[dict[str, Any]], verdict: EvictedPodsVerdict, missing: dict[str, int]
) -> None:
    (check,) = check_evictions({"heir": RECORD}, pods, now=NOW, timeout=timedelta(seconds=30))
    assert (check.heir, check.verdict, dict(check.missing)) == ("heir", verdict, missing)


def test_missing_pods_wait_until_the_deadline_after_the_latest_eviction() -> None:
    """The deadline runs from the latest eviction, so a drain that PodDisruptionBudgets pace gets
    the full deadline for its last pod."""
    record = RECORD.merged({"apps/web-e": WEB}, NOW - timedelta(seconds=5))
    (check,) = check_evictions({"heir": record}, [], now=NOW, timeout=timedelta(seconds=30))
    assert check.verdict is EvictedPodsVerdict.WAITING
    assert "web-1 (3)" in check.describe()
    assert "db (1)" in check.describe()


def test_a_record_survives_its_annotation_and_bad_text_is_no_record() -> None:
    record = new_record("donor", {"apps/web-a": WEB}, SINCE).merged({"apps/db-0": DB}, NOW)
    assert EvictionRecord.parse(record.format()) == record
    assert record.namespaces == ["apps"]
    assert EvictionRecord.parse("{not json") is None
    assert EvictionRecord.parse('{"donor": "d"}') is None
    assert EvictionRecord.parse(None) is None


def test_only_a_controlled_pod_has_a_controller() -> None:
    assert controller_of(pod("a", "n")) == WEB
    assert controller_of(pod("a", "n", None)) is None


def test_an_overdue_record_fails_the_gate_with_its_reason() -> None:
    failure = gate_failure(
        [], now=NOW, heir_ready_timeout=timedelta(minutes=10), evicted_pods_overdue=["pods of d: web (1)"]
    )
    assert failure is not None
    assert (failure.reason, failure.message) == ("EvictedPodsNotReady", "pods of d: web (1)")


def _versioned(document: dict[str, Any], uid: str, version: str) -> dict[str, Any]:
    document["metadata"] |= {"uid": uid, "resourceVersion": version}
    return document


def test_the_facts_cache_keeps_only_what_recent_passes_read() -> None:
    """Entries not read in a pass are dropped once they outnumber the pods read (and the floor)."""
    cache = PodFactsCache(keep_at_least=4)
    old = [(f"apps/old-{i}", pod(f"old-{i}", "heir")) for i in range(4)]
    cache.of_stored(old, dict)
    assert len(cache) == 4
    (facts,) = cache.of_stored([("apps/new", pod("new", "heir"))], dict)
    assert facts == PodFacts.of(pod("new", "heir"))
    assert len(cache) == 1


def test_a_stored_pod_is_decoded_again_only_once_it_changed() -> None:
    """Through a compressed informer store (the manager's pod cache): the first pass decodes
    each pod, the next decodes none, and after one pod's update only that one; the verdict
    follows the update (a replacement turning Ready)."""
    store = Store(CompressedJson())
    store.ensure_indexer("owner", lambda obj: [controller_of(obj) or ""])
    for name, ready in (("web-c", False), ("web-d", True), ("db-1", True)):
        owner = DB if name.startswith("db") else WEB
        store.put(f"apps/{name}", _versioned(pod(name, "heir", owner, ready=ready), name, "1"))
    decoded: list[str] = []

    def decode(stored: Any) -> dict[str, Any]:
        obj = store.decode(stored)
        decoded.append(obj["metadata"]["name"])
        return obj

    cache = PodFactsCache()

    def check() -> EvictedPodsVerdict:
        entries = [*store.by_index_stored("owner", WEB), *store.by_index_stored("owner", DB)]
        facts = cache.of_stored(entries, decode)
        (result,) = check_eviction_facts({"heir": RECORD}, facts, now=NOW, timeout=timedelta(seconds=60))
        return result.verdict

    assert check() is EvictedPodsVerdict.WAITING
    assert sorted(decoded) == ["db-1", "web-c", "web-d"]
    decoded.clear()
    assert check() is EvictedPodsVerdict.WAITING
    assert decoded == []
    store.put("apps/web-c", _versioned(pod("web-c", "heir"), "web-c", "2"))
    assert check() is EvictedPodsVerdict.SATISFIED
    assert decoded == ["web-c"]
