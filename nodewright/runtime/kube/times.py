"""Kubernetes timestamps as text: the one place that spells their formats.

Owns ``format_time``/``parse_time`` for metav1.Time (RFC 3339 in UTC to the second, as the API
server writes ``creationTimestamp`` and condition ``lastTransitionTime``: ``2026-11-29T16:00:00Z``),
``now_text`` for the current time in that format, and ``format_micro_time`` for metav1.MicroTime
(the same to the microsecond, as a Lease's ``acquireTime``/``renewTime``). Pure; no I/O.

It lives in ``runtime`` because these are Kubernetes' wire formats, not our CRDs': the runtime
itself writes them (conditions, Events, Leases), and ``controllers``, which may import both
``runtime`` and ``api``, reach it from there. ``api`` imports nothing internal, so its validators
keep their own parse (``api.nodewright.v1alpha1._validation.parse_date_time``, which raises with
the field path instead of returning ``None``); ``cloud`` speaks ARM, not Kubernetes.
"""

from __future__ import annotations

import datetime

__all__ = ["format_micro_time", "format_time", "now_text", "parse_time"]

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_time(moment: datetime.datetime) -> str:
    """``moment`` as metav1.Time writes it: RFC 3339 in UTC, to the second (fraction dropped)."""
    return moment.astimezone(datetime.UTC).strftime(_TIME_FORMAT)


def format_micro_time(moment: datetime.datetime) -> str:
    """``moment`` as metav1.MicroTime writes it: RFC 3339 in UTC, to the microsecond."""
    return moment.astimezone(datetime.UTC).strftime(_MICRO_TIME_FORMAT)


def now_text() -> str:
    """The current time as ``format_time`` writes it."""
    return format_time(datetime.datetime.now(datetime.UTC))


def parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 time from a field or annotation (what ``format_time`` writes, or any offset
    or fraction of a second), in UTC; ``None`` when ``value`` is missing, not text, malformed,
    or carries no timezone."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(datetime.UTC)
