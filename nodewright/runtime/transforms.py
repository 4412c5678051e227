"""What an informer's store keeps of an object: transforms applied before an object is stored
(``default_transform`` drops managedFields and interns strings, ``drop_managed_fields`` only
drops) and ``CompressedJson``, the encoding of a compressed store. Pure functions and one
stateless codec; no side effects.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any

import orjson

__all__ = [
    "INTERN_MAX_LENGTH",
    "CompressedJson",
    "compact_object",
    "default_transform",
    "drop_managed_fields",
]

INTERN_MAX_LENGTH = 64


def compact_object(value: Any) -> Any:
    """``value`` with every dictionary key and every short string interned.

    Thousands of cached objects repeat the same keys ("metadata", "containerPort") and values
    ("True", "IfNotPresent", node and image names); interning stores each once.
    """
    if isinstance(value, dict):
        return {sys.intern(key): compact_object(item) for key, item in value.items()}
    if isinstance(value, list):
        return [compact_object(item) for item in value]
    if isinstance(value, str) and len(value) <= INTERN_MAX_LENGTH:
        return sys.intern(value)
    return value


def default_transform(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop ``metadata.managedFields`` (often half an object's size) and intern strings."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    result: dict[str, Any] = compact_object(obj)
    return result


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop ``metadata.managedFields`` only (the transform for compressed stores, where
    interning would be wasted work)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class CompressedJson:
    """Keeps each stored object as zlib-compressed compact JSON: a few KiB per Pod instead of a
    decoded object graph several times larger, paid for with a decode (tens of microseconds) on
    every read. Reads then return fresh objects that the caller may mutate."""

    level = 1

    def encode(self, obj: dict[str, Any]) -> bytes:
        return zlib.compress(orjson.dumps(obj), self.level)

    def decode(self, stored: Any) -> dict[str, Any]:
        result: dict[str, Any] = orjson.loads(zlib.decompress(stored))
        return result
