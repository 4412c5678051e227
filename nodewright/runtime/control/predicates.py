"""Predicates: filters that decide which watch events reach a controller's handler.

Owns the ``Predicate`` protocol (one method per event type: create, update, delete, generic),
the change predicates controllers use most (``generation_changed``, ``labels_changed``,
``annotations_changed``, ``resource_version_changed``), ``predicate(...)`` to build one from
plain functions, and the ``and_``/``or_``/``not_`` combinators. The controller in
``controller.py`` applies them before its handlers from ``handlers.py`` run. Pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "Predicate",
    "and_",
    "annotations_changed",
    "generation_changed",
    "labels_changed",
    "not_",
    "or_",
    "predicate",
    "resource_version_changed",
]

Object = dict[str, Any]


class Predicate(Protocol):
    """Whether an event should be handled; ``True`` lets it through."""

    def create(self, obj: Object) -> bool: ...

    def update(self, old: Object, new: Object) -> bool: ...

    def delete(self, obj: Object) -> bool: ...

    def generic(self, obj: Object) -> bool: ...


def _always(*_: Object) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class FunctionPredicate:
    """A predicate made of one plain function per event type (each defaults to "let through")."""

    on_create: Callable[[Object], bool] = _always
    on_update: Callable[[Object, Object], bool] = _always
    on_delete: Callable[[Object], bool] = _always
    on_generic: Callable[[Object], bool] = _always

    def create(self, obj: Object) -> bool:
        return self.on_create(obj)

    def update(self, old: Object, new: Object) -> bool:
        return self.on_update(old, new)

    def delete(self, obj: Object) -> bool:
        return self.on_delete(obj)

    def generic(self, obj: Object) -> bool:
        return self.on_generic(obj)


def predicate(
    *,
    create: Callable[[Object], bool] = _always,
    update: Callable[[Object, Object], bool] = _always,
    delete: Callable[[Object], bool] = _always,
    generic: Callable[[Object], bool] = _always,
) -> Predicate:
    """A predicate from plain functions: ``predicate(update=lambda old, new: ...)``."""
    return FunctionPredicate(create, update, delete, generic)


def _metadata(obj: Object) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _changed(field: str) -> Predicate:
    def update(old: Object, new: Object) -> bool:
        return _metadata(old).get(field) != _metadata(new).get(field)

    return FunctionPredicate(on_update=update)


generation_changed: Predicate = _changed("generation")
"""Updates pass only when metadata.generation changed (spec edits, not status writes)."""
labels_changed: Predicate = _changed("labels")
"""Updates pass only when the labels changed."""
annotations_changed: Predicate = _changed("annotations")
"""Updates pass only when the annotations changed."""
resource_version_changed: Predicate = _changed("resourceVersion")
"""Updates pass only when metadata.resourceVersion changed (drops resync no-op updates)."""


def _combined(verdict: Callable[[Iterable[bool]], bool], predicates: tuple[Predicate, ...]) -> Predicate:
    """One predicate whose answer to each event is ``verdict`` (``all`` or ``any``) over the
    answers of ``predicates``, asked lazily in order."""
    return FunctionPredicate(
        lambda obj: verdict(p.create(obj) for p in predicates),
        lambda old, new: verdict(p.update(old, new) for p in predicates),
        lambda obj: verdict(p.delete(obj) for p in predicates),
        lambda obj: verdict(p.generic(obj) for p in predicates),
    )


def and_(*predicates: Predicate) -> Predicate:
    """Passes when every predicate passes."""
    return _combined(all, predicates)


def or_(*predicates: Predicate) -> Predicate:
    """Passes when any predicate passes."""
    return _combined(any, predicates)


def not_(inner: Predicate) -> Predicate:
    """Passes when the inner predicate does not."""
    return FunctionPredicate(
        lambda obj: not inner.create(obj),
        lambda old, new: not inner.update(old, new),
        lambda obj: not inner.delete(obj),
        lambda obj: not inner.generic(obj),
    )
