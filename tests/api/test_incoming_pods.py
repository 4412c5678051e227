"""The nodewright.io/incoming-pods Node annotation: written and read back the same, bad values
read as none, and an expectation that has lapsed counts for nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodewright.api.nodewright.v1alpha1 import IncomingPods

EXPIRES = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_format_and_parse_round_trip() -> None:
    announced = IncomingPods(donor="old-0", pods=10, expires=EXPIRES)
    text = announced.format()
    assert text == '{"donor": "old-0", "expires": "2026-12-01T12:00:00Z", "pods": 10}'
    assert IncomingPods.parse(text) == announced


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("10", id="not-an-object"),
        pytest.param("{", id="not-json"),
        pytest.param('{"pods": 10}', id="no-expiry"),
        pytest.param('{"pods": -1, "expires": "2026-12-01T12:00:00Z"}', id="negative"),
        pytest.param('{"pods": true, "expires": "2026-12-01T12:00:00Z"}', id="boolean"),
        pytest.param('{"pods": "10", "expires": "2026-12-01T12:00:00Z"}', id="text-count"),
        pytest.param('{"pods": 10, "expires": "2026-12-01T12:00:00"}', id="no-timezone"),
        pytest.param('{"pods": 10, "expires": "soon"}', id="not-a-time"),
    ],
)
def test_bad_values_read_as_none(text: str | None) -> None:
    assert IncomingPods.parse(text) is None


def test_a_lapsed_expectation_counts_for_nothing() -> None:
    announced = IncomingPods(donor="old-0", pods=10, expires=EXPIRES)
    assert announced.count_at(EXPIRES - timedelta(seconds=1)) == 10
    assert announced.count_at(EXPIRES) == 0
