"""Types shared by every CRD group: ``Condition`` in the metav1.Condition shape and
``ObjectReference`` (the core/v1 subset our statuses list). Imports nothing internal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nodewright.api.base import Model, field

__all__ = ["Condition", "ObjectReference"]


@dataclass(kw_only=True)
class Condition(Model):
    """One aspect of an object's state, as metav1.Condition."""

    type: str = field(schema={"maxLength": 316})
    status: Literal["True", "False", "Unknown"]
    reason: str = field(schema={"maxLength": 1024, "minLength": 1})
    message: str = field(default="", schema={"maxLength": 32768}, omit_empty=False)
    last_transition_time: str = field(schema={"format": "date-time"})
    observed_generation: int | None = field(default=None, schema={"minimum": 0})


@dataclass(kw_only=True)
class ObjectReference(Model):
    """A reference to another object (the fields of core/v1 ObjectReference that we use)."""

    api_version: str = field(default="")
    kind: str = field(default="")
    namespace: str = field(default="")
    name: str = field(default="")
    uid: str = field(default="", json="uid")
    resource_version: str = field(default="")
