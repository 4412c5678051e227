"""A reconcile that fails with an expected error (one offering ``log_fields``, as the cloud layer's
errors do) is logged in one line with those fields and no traceback; a quiet one only at debug;
any other exception keeps its traceback."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nodewright.runtime.controller import _log_expected_failure
from nodewright.runtime.logs import record_pairs


class ExpectedError(Exception):
    quiet = False

    def log_fields(self) -> dict[str, Any]:
        return {"error_code": "InternalServerError", "target": "/subscriptions/s/vm"}


class QuietError(ExpectedError):
    quiet = True


def test_expected_error_is_one_line_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.controller"):
        assert _log_expected_failure(ExpectedError("boom"), retries=3)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert not record.exc_info
    assert record_pairs(record) == {
        "retries": 3,
        "error_code": "InternalServerError",
        "target": "/subscriptions/s/vm",
    }


def test_quiet_error_is_logged_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.controller"):
        assert _log_expected_failure(QuietError("later"), retries=0)
    assert [record.levelno for record in caplog.records] == [logging.DEBUG]


def test_other_errors_are_not_expected(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nodewright.runtime.controller"):
        assert not _log_expected_failure(ValueError("a bug"), retries=0)
    assert caplog.records == []
