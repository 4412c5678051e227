"""Cross-field and format checks that the model base does not do by itself, shared by the
nodewright.io/v1alpha1 kinds. Each check raises ``ValidationError`` naming the JSON path of the
field, like the base's type checks. Pure; imports only the model base."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from nodewright.api.base import ValidationError

__all__ = ["DURATION_PATTERN", "child_path", "parse_date_time", "parse_duration", "require_match"]

DURATION_PATTERN = re.compile(r"([0-9]+h)?([0-9]+m)?([0-9]+s)?")
"""A duration as metav1.Duration writes whole ones: ``30m``, ``1h30m``, ``90s``, ``0s``."""


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


def parse_duration(path: str, value: str) -> timedelta:
    """A duration such as ``1h30m`` or ``90s`` (hours, minutes, seconds, each optional, in that
    order); raises ``ValidationError`` at ``path`` otherwise."""
    match = DURATION_PATTERN.fullmatch(value)
    if match is None or not value:
        raise ValidationError(path, f"must be a duration such as 30m, 1h30m or 90s, got {value!r}")
    hours, minutes, seconds = (int(part[:-1]) if part else 0 for part in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)
