"""One Warning Event per Degraded problem, however stale the cache the status was decided from
(pure: ``degraded_to_report``)."""

from __future__ import annotations

from typing import Any

from nodewright.controllers.node_image.conditions import degraded_to_report


def _condition(type: str, status: str, reason: str, message: str = "m") -> dict[str, Any]:
    return {"type": type, "status": status, "reason": reason, "message": message}


HEALTHY = [
    _condition("UpToDate", "True", "AllNodesUpToDate"),
    _condition("Progressing", "False", "RolloutComplete"),
    _condition("Degraded", "False", "AsExpected"),
]
INVALID = [
    _condition("UpToDate", "True", "AllNodesUpToDate"),
    _condition("Progressing", "False", "RolloutComplete"),
    _condition("Degraded", "True", "InvalidNodes", "ghost"),
]


def test_a_problem_is_reported_once_while_the_cache_still_shows_the_healthy_status() -> None:
    """The first write reports; later writes decided from the same stale status do not, although
    Degraded comes after conditions of other types."""
    report, reported = degraded_to_report(HEALTHY, INVALID, None)
    assert report is not None
    assert report["reason"] == "InvalidNodes"
    for _ in range(3):
        report, reported = degraded_to_report(HEALTHY, INVALID, reported)
        assert report is None
    assert reported == ("InvalidNodes", "ghost")


def test_a_new_problem_or_a_problem_after_recovery_is_reported_again() -> None:
    """Another reason or message is news; so is the same problem after Degraded turned False."""
    _, reported = degraded_to_report(HEALTHY, INVALID, None)
    other = [*INVALID[:2], _condition("Degraded", "True", "InvalidNodes", "ghost, ghost-2")]
    report, reported = degraded_to_report(INVALID, other, reported)
    assert report is not None
    assert report["message"] == "ghost, ghost-2"
    report, reported = degraded_to_report(other, HEALTHY, reported)
    assert (report, reported) == (None, None)
    report, _ = degraded_to_report(HEALTHY, INVALID, reported)
    assert report is not None


def test_a_problem_already_in_the_status_is_not_reported_by_a_new_process() -> None:
    """A restarted process whose cache shows the problem already reported stays quiet."""
    report, reported = degraded_to_report(INVALID, INVALID, None)
    assert report is None
    assert reported == ("InvalidNodes", "ghost")
