"""Predicates and handlers: which events pass, and which requests they become."""

from __future__ import annotations

from typing import Any

import pytest

from nodewright.runtime.control.handlers import enqueue_for_object, enqueue_mapped, enqueue_owner
from nodewright.runtime.control.predicates import (
    Predicate,
    and_,
    annotations_changed,
    generation_changed,
    labels_changed,
    not_,
    or_,
    predicate,
    resource_version_changed,
)
from nodewright.runtime.control.reconcile import Request
from nodewright.runtime.kube.kinds import NODE, Kind

REPLICA_SET = Kind("apps/v1", "ReplicaSet", "replicasets")


def obj(  # noqa: PLR0917 - a table helper: positional name and namespace read best
    name: str = "a",
    namespace: str = "ns",
    generation: int = 1,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    resource_version: str = "1",
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "generation": generation,
        "resourceVersion": resource_version,
    }
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {"metadata": metadata}


@pytest.mark.parametrize(
    ("check", "old", "new", "passes"),
    [
        pytest.param(generation_changed, obj(), obj(generation=2), True, id="generation-bumped"),
        pytest.param(generation_changed, obj(), obj(resource_version="2"), False, id="status-only"),
        pytest.param(labels_changed, obj(), obj(labels={"a": "b"}), True, id="label-added"),
        pytest.param(labels_changed, obj(labels={"a": "b"}), obj(labels={"a": "b"}), False, id="labels-same"),
        pytest.param(annotations_changed, obj(), obj(annotations={"x": "y"}), True, id="annotation-added"),
        pytest.param(annotations_changed, obj(), obj(generation=3), False, id="annotations-same"),
        pytest.param(resource_version_changed, obj(), obj(resource_version="2"), True, id="rv-changed"),
        pytest.param(resource_version_changed, obj(), obj(), False, id="resync-no-op"),
    ],
)
def test_change_predicates_filter_updates(check: Predicate, old: Any, new: Any, passes: bool) -> None:
    """Change predicates pass an update only when their field changed."""
    assert check.update(old, new) is passes


def test_change_predicates_let_create_delete_generic_through() -> None:
    """Change predicates judge only updates."""
    assert generation_changed.create(obj())
    assert generation_changed.delete(obj())
    assert generation_changed.generic(obj())


def test_combinators() -> None:
    """and_/or_/not_ combine per event type."""
    bumped = (obj(), obj(generation=2))
    relabelled = (obj(), obj(labels={"a": "b"}))
    either = or_(generation_changed, labels_changed)
    both = and_(generation_changed, labels_changed)
    assert either.update(*bumped)
    assert either.update(*relabelled)
    assert not both.update(*bumped)
    assert both.update(obj(), obj(generation=2, labels={"a": "b"}))
    assert not_(generation_changed).update(*relabelled)
    assert not not_(generation_changed).create(obj())


def test_predicate_from_plain_functions() -> None:
    """predicate(...) builds one from functions; unspecified events pass."""
    only_named_b = predicate(create=lambda o: o["metadata"]["name"] == "b")
    assert not only_named_b.create(obj("a"))
    assert only_named_b.create(obj("b"))
    assert only_named_b.update(obj("a"), obj("a"))


def test_enqueue_for_object() -> None:
    """The object's own namespace/name; updates map the new object only."""
    handler = enqueue_for_object()
    assert list(handler.create(obj("a", "ns"))) == [Request("ns", "a")]
    assert list(handler.update(obj("a"), obj("a"))) == [Request("ns", "a")]
    assert list(handler.delete({"metadata": {"name": "node-1"}})) == [Request("", "node-1")]


def test_enqueue_owner_follows_controller_reference_of_kind() -> None:
    """Only the controlling ownerReference of the owner's group and kind counts (any version)."""
    owners: list[dict[str, Any]] = [
        {"apiVersion": "apps/v1beta2", "kind": "ReplicaSet", "name": "rs", "controller": True},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "not-controller"},
        {"apiVersion": "other.io/v1", "kind": "ReplicaSet", "name": "other-group", "controller": True},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "controller": True},
    ]
    handler = enqueue_owner(REPLICA_SET)
    assert list(handler.create(obj(owners=owners))) == [Request("ns", "rs")]
    assert list(handler.create(obj())) == []
    cluster_scoped = enqueue_owner(NODE)
    node_owned = obj(owners=[{"apiVersion": "v1", "kind": "Node", "name": "n1", "controller": True}])
    assert list(cluster_scoped.create(node_owned)) == [Request("", "n1")]


def test_enqueue_owner_update_reports_old_and_new_owner() -> None:
    """When the owner changes, both the old and the new owner are reconciled."""
    old = obj(owners=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "old", "controller": True}])
    new = obj(owners=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "new", "controller": True}])
    assert list(enqueue_owner(REPLICA_SET).update(old, new)) == [Request("ns", "new"), Request("ns", "old")]


def test_enqueue_mapped() -> None:
    """A map function names any requests; updates map both versions without duplicates."""
    handler = enqueue_mapped(lambda o: [Request("", f"all-{o['metadata']['name']}")])
    assert list(handler.create(obj("x"))) == [Request("", "all-x")]
    assert list(handler.update(obj("x"), obj("x"))) == [Request("", "all-x")]
