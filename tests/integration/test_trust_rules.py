"""promtool unit test of deploy/prometheus/rules/trust-rules.yml: alerts on the PPI bounds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT

RULES = ROOT / "deploy" / "prometheus" / "rules" / "trust-rules.yml"
RUNBOOK = "https://github.com/ragpulse/ragpulse/blob/main/docs/trust.md#alert-on-the-lower-bound"
ASK = 'ragpulse_quality_estimate{service="shop",route="/ask",metric="faithfulness",bound="%s"}'
MAY_BE_BELOW = "RagpulseFaithfulnessMayBeBelowObjective"
OK = 'ragpulse_quality_estimate{service="shop",route="/ok",metric="faithfulness",bound="%s"}'
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

# Faithfulness of shop /ask: interval [0.82, 0.90] for 20 minutes, then the lower bound falls to
# 0.78 (may be below 0.8: ticket after 30m), then the whole interval to [0.70, 0.78] (page after 15m).
# A second route stays healthy and must never alert.
TESTS = {
    "rule_files": [str(RULES)],
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                {"series": ASK % "low", "values": "0.82x20 0.78x40 0.70x30"},
                {"series": ASK % "high", "values": "0.90x20 0.86x40 0.78x30"},
                {"series": OK % "low", "values": "0.85x90"},
                {"series": OK % "high", "values": "0.95x90"},
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": MAY_BE_BELOW, "exp_alerts": []},
                {"eval_time": "45m", "alertname": MAY_BE_BELOW, "exp_alerts": []},
                {
                    "eval_time": "55m",
                    "alertname": MAY_BE_BELOW,
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "service": "shop", "route": "/ask",
                                           "metric": "faithfulness", "bound": "low"},
                            "exp_annotations": {
                                "runbook_url": RUNBOOK,
                                "summary": "Faithfulness of shop /ask may be below 0.8",
                                "description": "The lower end of the 95% interval of true faithfulness "
                                "fell to 0.780; label more interactions (label_sample_rate) to narrow it, or "
                                "investigate. See docs/trust.md.",
                            },
                        }
                    ],
                },
                {"eval_time": "55m", "alertname": "RagpulseFaithfulnessBelowObjective", "exp_alerts": []},
                {
                    "eval_time": "80m",
                    "alertname": "RagpulseFaithfulnessBelowObjective",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "critical", "service": "shop", "route": "/ask",
                                           "metric": "faithfulness", "bound": "high"},
                            "exp_annotations": {
                                "runbook_url": RUNBOOK,
                                "summary": "Faithfulness of shop /ask is below 0.8",
                                "description": "Even the upper end of the 95% interval of true faithfulness "
                                "is 0.780 (judge scores corrected by human labels). See docs/trust.md.",
                            },
                        }
                    ],
                },
            ],
        }
    ],
}  # fmt: skip


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool missing: install Debian package prometheus")
def test_trust_rules_pass_promtool(tmp_path: Path) -> None:
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    test_file = tmp_path / "trust-rules.test.yml"
    test_file.write_text(yaml.safe_dump(TESTS, sort_keys=False))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
