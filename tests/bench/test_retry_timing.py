"""``bench.retry_timing`` runs both scenarios on a real controller and reports their figures."""

from __future__ import annotations

from bench.retry_timing import HOLD, PASS_TAIL, RETRY_AFTER, run


def test_one_round_of_each_scenario_is_measured() -> None:
    after, at = run(1)
    assert (after.scenario, at.scenario) == ("retry-after", "retry-at")
    assert after.rounds == at.rounds == 1
    assert after.worst >= RETRY_AFTER - 0.01, "a retry came before its retry_after"
    assert at.worst >= 0.0
    assert at.median == at.worst
    assert HOLD > PASS_TAIL, "the scenario needs a hold that outlasts the pass's tail"
