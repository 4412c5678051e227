"""config/prometheus/rules.yaml: promtool accepts it, its unit tests (tests/config/prometheus/)
pass and cover every alert firing and not firing, every alert has a runbook in docs/alerts.md,
and the PrometheusRule and the Helm chart carry the same groups (the chart's only when enabled)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.config.test_chart import CHART, helm

PROJECT = Path(__file__).resolve().parents[2]
RULES = PROJECT / "config" / "prometheus" / "rules.yaml"
PROMETHEUS_RULE = PROJECT / "config" / "prometheus" / "prometheus_rule.yaml"
UNIT_TESTS = sorted((Path(__file__).parent / "prometheus").glob("*.test.yaml"))
RUNBOOKS = PROJECT / "docs" / "alerts.md"
PROMTOOL = (
    Path(os.environ.get("NODEWRIGHT_CACHE", Path.home() / ".cache" / "nodewright")) / "bin" / "promtool"
)


def promtool(*arguments: str) -> str:
    assert PROMTOOL.exists(), f"{PROMTOOL} is missing: run `make prometheus` (hack/build-prometheus.sh)"
    result = subprocess.run(
        [str(PROMTOOL), *arguments], capture_output=True, text=True, timeout=120, check=False, cwd=PROJECT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_accepts_the_rules() -> None:
    """The rule file parses and every expression is valid PromQL (promtool check rules)."""
    output = promtool("check", "rules", str(RULES))
    assert f"SUCCESS: {len(alerts())} rules found" in output, output


@pytest.mark.parametrize("unit_test", UNIT_TESTS, ids=[path.name for path in UNIT_TESTS])
def test_promtool_unit_tests_pass(unit_test: Path) -> None:
    """Each unit test file's cases hold against the shipped rules (promtool test rules)."""
    promtool("test", "rules", str(unit_test))


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    """For each alert, some case expects it firing and some case expects it silent."""
    firing: set[str] = set()
    silent: set[str] = set()
    for path in UNIT_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test") or []:
                (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert len(names) >= 9
    assert names - firing == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"


def test_every_alert_has_a_runbook_paragraph() -> None:
    """docs/alerts.md has a section per alert, and each runbook_url points at it."""
    text = RUNBOOKS.read_text()
    headings = set(re.findall(r"^### (Nodewright\w+)$", text, flags=re.MULTILINE))
    for rule in alerts():
        assert rule["alert"] in headings, rule["alert"]
        assert rule["annotations"]["runbook_url"] == f"docs/alerts.md#{rule['alert'].lower()}"
        section = text.split(f"### {rule['alert']}\n", 1)[1].split("\n### ", 1)[0]
        assert len(section.split()) >= 40, f"{rule['alert']}: the runbook paragraph is too short"
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_prometheus_rule_and_chart_carry_the_rule_file() -> None:
    """The PrometheusRule's groups are rules.yaml's; the chart renders them only when enabled."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]["groups"] == groups
    off = helm("template", "nodewright", str(CHART), "-n", "nodewright-system")
    assert "PrometheusRule" not in off
    on = helm(
        "template", "nodewright", str(CHART), "-n", "nodewright-system",
        "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=monitoring",
    )  # fmt: skip
    rule = next(d for d in yaml.safe_load_all(on) if d and d["kind"] == "PrometheusRule")
    assert rule["metadata"]["name"] == "nodewright-alerts"
    assert rule["metadata"]["namespace"] == "nodewright-system"
    assert rule["metadata"]["labels"]["release"] == "monitoring"
    assert rule["spec"]["groups"] == groups
