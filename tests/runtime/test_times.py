"""Kubernetes timestamps: what ``format_time`` writes, what ``parse_time`` accepts and refuses."""

from __future__ import annotations

import datetime

import pytest

from nodewright.runtime.kube.times import format_micro_time, format_time, now_text, parse_time

UTC = datetime.UTC
MOMENT = datetime.datetime(2026, 11, 29, 16, 0, 5, 123456, tzinfo=UTC)


def test_format_time_writes_metav1_time_in_utc_to_the_second() -> None:
    """The fraction is dropped and another offset is converted to UTC."""
    assert format_time(MOMENT) == "2026-11-29T16:00:05Z"
    plus_two = MOMENT.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert format_time(plus_two) == "2026-11-29T16:00:05Z"


def test_format_micro_time_keeps_the_microseconds() -> None:
    """A Lease's renewTime carries the microseconds, as metav1.MicroTime does."""
    assert format_micro_time(MOMENT) == "2026-11-29T16:00:05.123456Z"


def test_now_text_is_the_current_time_in_the_same_format() -> None:
    """now_text parses back to a moment between the two readings of the clock around it."""
    before = datetime.datetime.now(UTC).replace(microsecond=0)
    parsed = parse_time(now_text())
    after = datetime.datetime.now(UTC)
    assert parsed is not None
    assert before <= parsed <= after


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-11-29T16:00:05Z", MOMENT.replace(microsecond=0), id="what-format_time-writes"),
        pytest.param("2026-11-29T16:00:05.123456Z", MOMENT, id="micro-time"),
        pytest.param("2026-11-29T18:00:05+02:00", MOMENT.replace(microsecond=0), id="other-offset"),
    ],
)
def test_parse_time_reads_rfc_3339_into_utc(text: str, expected: datetime.datetime) -> None:
    """Any RFC 3339 time comes back timezone-aware, in UTC."""
    parsed = parse_time(text)
    assert parsed == expected
    assert parsed is not None
    assert parsed.tzinfo == UTC


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param(1764432005, id="not-text"),
        pytest.param("yesterday", id="malformed"),
        pytest.param("2026-11-29T16:00:05", id="no-timezone"),
    ],
)
def test_parse_time_refuses_what_is_not_a_timestamp(value: object) -> None:
    """Missing, malformed or naive values give None, never an exception."""
    assert parse_time(value) is None


def test_round_trip() -> None:
    """What format_time writes, parse_time reads back to the same second."""
    assert parse_time(format_time(MOMENT)) == MOMENT.replace(microsecond=0)
