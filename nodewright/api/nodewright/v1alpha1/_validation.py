"""Cross-field and format checks that the model base does not do by itself, shared by the
nodewright.io/v1alpha1 kinds. Each check raises ``ValidationError`` naming the JSON path of the
field, like the base's type checks. Pure; imports only the model base."""

from __future__ import annotations

import re
from datetime import datetime

from nodewright.api.base import ValidationError

__all__ = ["child_path", "parse_date_time", "require_match"]


def child_path(path: str, key: str) -> str:
    """The JSON path of ``key`` inside the object at ``path`` (``spec`` + ``groupID``)."""
    return f"{path}.{key}" if path else key


def require_match(path: str, value: str, pattern: re.Pattern[str], what: str) -> None:
    """Raise ``ValidationError`` at ``path`` unless ``value`` matches ``pattern``."""
    if not pattern.fullmatch(value):
        raise ValidationError(path, f"must be {what}, got {value!r}")


def parse_date_time(path: str, value: str) -> datetime:
    """An RFC 3339 timestamp as metav1.Time writes it (``2026-01-01T00:00:00Z``), timezone-aware."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(path, f"must be an RFC 3339 date-time, got {value!r}") from None
    if parsed.tzinfo is None:
        raise ValidationError(path, f"must carry a timezone (such as Z), got {value!r}")
    return parsed
