"""promtool: the generated rules load, and their unit tests pass (Debian package `prometheus`).

The test files (deploy/prometheus/rules/*.test.yml) feed series to every alert that should fire
it and series that should not, including a trickle of traffic, and check the expanded summary,
description and runbook link of each alert that fires.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.alerting import missing_binaries
from tests.support.repo import ROOT, load_module

RULES = ROOT / "deploy/prometheus/rules"
_missing = missing_binaries("promtool")
pytestmark = pytest.mark.skipif(_missing is not None, reason=_missing or "")


def promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("promtool") or "promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_rules_are_valid() -> None:
    result = promtool("check", "rules", "ragpulse.rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    rules = [
        r for g in yaml.safe_load((RULES / "ragpulse.rules.yml").read_text())["groups"] for r in g["rules"]
    ]
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    files = sorted(p.name for p in RULES.glob("*.test.yml"))
    assert len(files) == 4  # baseline and thresholds, week over week, trust, probes
    result = promtool("test", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_fail_on_a_rule_that_pages_on_a_trickle(tmp_path: Path) -> None:
    """The tests can fail: without the minimum number of evaluations the low-traffic case pages."""
    module = load_module("deploy/prometheus/generate_rules.py")
    (tmp_path / "ragpulse.rules.yml").write_text(module.render_rules(module.RuleParams(min_evaluations_5m=1)))
    shutil.copy(RULES / "ragpulse.rules.test.yml", tmp_path)
    result = promtool("test", "rules", "ragpulse.rules.test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert 'route="/rare"' in result.stdout + result.stderr


def test_promtool_unit_tests_fail_on_a_baseline_rule_without_its_minimum_counts(tmp_path: Path) -> None:
    """RagpulseQualityBelowBaseline stays quiet on a trickle and on a route younger than its
    baseline only because of its minimum counts: without them those cases fire."""
    module = load_module("deploy/prometheus/generate_rules.py")
    params = module.RuleParams(min_evaluations_1h=1, min_evaluations_baseline=1)
    (tmp_path / "ragpulse.rules.yml").write_text(module.render_rules(params))
    shutil.copy(RULES / "ragpulse.rules.week.test.yml", tmp_path)
    result = promtool("test", "rules", "ragpulse.rules.week.test.yml", cwd=tmp_path)
    assert result.returncode != 0
    failures = result.stdout + result.stderr
    assert 'alertname="RagpulseQualityBelowBaseline", metric="faithfulness", route="/new"' in failures
    assert 'alertname="RagpulseQualityBelowBaseline", metric="faithfulness", route="/rare"' in failures


def test_prometheus_configuration_is_valid(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    config["rule_files"] = [str(RULES / "ragpulse.rules.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("amtool")
    if binary is None:
        pytest.skip("amtool not found: apt-get install prometheus-alertmanager")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)


def test_alertmanager_configuration_is_valid() -> None:
    result = amtool("check-config", str(ROOT / "deploy/alertmanager/alertmanager.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("severity", "receiver"), [("critical", "page"), ("warning", "ticket")])
def test_every_alert_is_routed_by_its_severity(severity: str, receiver: str) -> None:
    module = load_module("deploy/prometheus/generate_rules.py")
    alerts = [
        r for g in module.rule_groups() for r in g["rules"] if r.get("labels", {}).get("severity") == severity
    ]
    assert alerts
    config = f"--config.file={ROOT / 'deploy/alertmanager/alertmanager.yml'}"
    for alert in alerts:
        result = amtool(
            "config", "routes", "test", config, f"alertname={alert['alert']}", f"severity={severity}"
        )
        assert result.stdout.strip() == receiver, (alert["alert"], result.stdout, result.stderr)
