"""promtool: the generated rules load, and their unit tests pass (Debian package `prometheus`).

The test files (deploy/prometheus/rules/*.test.yml) feed series to every alert that should fire
it and series that should not, including a trickle of traffic, and check the expanded summary,
description and runbook link of each alert that fires.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.support.alerting import ALERTMANAGER, Server, missing_binaries
from tests.support.net import http_get, http_post
from tests.support.repo import ROOT, load_module

RULES = ROOT / "deploy/prometheus/rules"
_missing = missing_binaries("promtool")
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_missing is not None, reason=_missing or "")]


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
    assert len(files) == 5  # baseline and thresholds, week over week, trust, probes, signals
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


@pytest.mark.parametrize(
    ("params", "fired"),
    [
        # A trickle (/rare) and a route whose baseline is too thin (/new) page without the minimums.
        (
            {"signal_min_interactions_recent": 1, "signal_min_interactions_history": 1},
            [("RagpulseEmptyRetrievals", "/rare"), ("RagpulseRefusalsRising", "/rare"),
             ("RagpulseEmptyRetrievals", "/new")],
        ),
        # Four times a small share (/floor) pages without the floors.
        (
            {"empty_retrievals_floor": 0.0, "refusals_floor": 0.0},
            [("RagpulseEmptyRetrievals", "/floor"), ("RagpulseRefusalsRising", "/floor")],
        ),
        # A route at its usual level above the floors (/steady), or a little above it (/mild), pages
        # on an absolute level alone.
        (
            {"signal_rise": 1.0},
            [("RagpulseEmptyRetrievals", "/steady"), ("RagpulseEmptyRetrievals", "/mild"),
             ("RagpulseRefusalsRising", "/mild")],
        ),
        # A 3-minute outage of retrieval pages once `for:` no longer outlasts the 10m window.
        ({"empty_retrievals_for": "10m"}, [("RagpulseEmptyRetrievals", "/blip")]),
    ],
)  # fmt: skip
def test_promtool_unit_tests_fail_on_signal_rules_without_their_guards(
    tmp_path: Path, params: dict[str, object], fired: list[tuple[str, str]]
) -> None:
    """The signal share alerts stay quiet on healthy and thin traffic only because of their
    minimum counts, floors, rise over the day before and `for:`: without each, a quiet case fires."""
    module = load_module("deploy/prometheus/generate_rules.py")
    (tmp_path / "ragpulse.rules.yml").write_text(module.render_rules(module.RuleParams(**params)))
    shutil.copy(RULES / "ragpulse.signals.test.yml", tmp_path)
    result = promtool("test", "rules", "ragpulse.signals.test.yml", cwd=tmp_path)
    assert result.returncode != 0
    failures = result.stdout + result.stderr
    for alert, route in fired:
        assert f'alertname="{alert}", route="{route}"' in failures, (alert, route, failures[-3000:])


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


def test_one_fault_alerts_once_through_the_inhibit_rules(tmp_path: Path) -> None:
    """The committed Alertmanager configuration in a real Alertmanager: a service's quality page
    mutes that service's per-series quality alerts (it lists them); a series below its baseline
    mutes its drift alert; empty retrievals and refusals mute the drift of their own signal on the
    same route, and nothing else."""
    if missing_binaries(ALERTMANAGER):
        pytest.skip(missing_binaries(ALERTMANAGER) or "")
    shutil.copy(ROOT / "deploy/alertmanager/alertmanager.yml", tmp_path)
    server = Server(
        shutil.which(ALERTMANAGER) or ALERTMANAGER,
        ["--config.file=alertmanager.yml", "--storage.path=data", "--cluster.listen-address="],
        tmp_path,
        "/-/ready",
    )
    shop = {"service": "shop", "route": "/ask"}
    vip = {"service": "vip", "route": "/ask"}
    alerts = {
        "baseline": {"alertname": "RagpulseQualityBelowBaseline", **shop, "metric": "faithfulness"},
        "drift": {"alertname": "RagpulseQualityDrift", **shop, "metric": "faithfulness"},
        "other_drift": {"alertname": "RagpulseQualityDrift", **shop, "metric": "context_precision"},
        "empty": {"alertname": "RagpulseEmptyRetrievals", **shop},
        "refusals": {"alertname": "RagpulseRefusalsRising", **shop},
        "hit": {"alertname": "RagpulseSignalDrift", **shop, "signal": "retrieval_hit"},
        "answered": {"alertname": "RagpulseSignalDrift", **shop, "signal": "answered"},
        "top_score": {"alertname": "RagpulseSignalDrift", **shop, "signal": "retrieval_top_score"},
        "hit_elsewhere": {"alertname": "RagpulseSignalDrift", "service": "shop", "route": "/faq",
                          "signal": "retrieval_hit"},
        "page": {"alertname": "RagpulseServiceQualityDegraded", "service": "shop"},
        "week": {"alertname": "RagpulseQualityWeekOverWeekDrop", **shop, "metric": "faithfulness"},
        # Another service, not paged: its baseline alert stands, and mutes its own drift only.
        "vip_baseline": {"alertname": "RagpulseQualityBelowBaseline", **vip, "metric": "faithfulness"},
        "vip_drift": {"alertname": "RagpulseQualityDrift", **vip, "metric": "faithfulness"},
        "vip_other_drift": {"alertname": "RagpulseQualityDrift", **vip, "metric": "context_precision"},
    }  # fmt: skip
    muted = {"baseline", "drift", "other_drift", "week", "hit", "answered", "vip_drift"}
    try:
        server.wait_ready()
        body = json.dumps([{"labels": {**labels, "severity": "warning"}} for labels in alerts.values()])
        json_type = {"Content-Type": "application/json"}
        status, _, _ = http_post(f"{server.url}/api/v2/alerts", body.encode(), json_type)
        assert status == 200
        states: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, answer = http_get(f"{server.url}/api/v2/alerts")
            by_labels = {
                json.dumps({k: v for k, v in a["labels"].items() if k != "severity"}, sort_keys=True): a
                for a in json.loads(answer)
            }
            states = {
                name: by_labels[key]["status"]["state"]
                for name, labels in alerts.items()
                if (key := json.dumps(labels, sort_keys=True)) in by_labels
            }
            if states == {name: "suppressed" if name in muted else "active" for name in alerts}:
                break
            time.sleep(0.2)
        assert states == {name: "suppressed" if name in muted else "active" for name in alerts}, states
    finally:
        server.stop()
