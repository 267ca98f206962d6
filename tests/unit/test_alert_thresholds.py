"""alert_thresholds: opt-in, set from YAML or the environment, exported for the alert rules to read."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agent.build import build_agent, load_checked_settings
from agent.config import DEFAULT_ALERT_THRESHOLDS, ConfigError


def test_no_absolute_threshold_by_default() -> None:
    """A score's scale belongs to its judge: the default quality alert is baseline-relative."""
    assert load_checked_settings(environ={}).alerts.thresholds == {}
    registry = CollectorRegistry()

    build_agent(load_checked_settings(environ={}), registry)
    assert not [s for m in registry.collect() if m.name == "ragpulse_quality_threshold" for s in m.samples]


def test_environment_sets_some_and_the_rest_have_none() -> None:
    settings = load_checked_settings(
        environ={"RAGPULSE_ALERT_THRESHOLDS": "faithfulness=0.9, context_precision=0.5"}
    )
    assert settings.alerts.thresholds == {"faithfulness": 0.9, "context_precision": 0.5}
    assert DEFAULT_ALERT_THRESHOLDS == {}


def test_a_service_can_have_its_own_threshold() -> None:
    settings = load_checked_settings(environ={"RAGPULSE_ALERT_THRESHOLDS": "checkout/faithfulness=0.9"})
    assert settings.alerts.thresholds == {"checkout/faithfulness": 0.9}
    with pytest.raises(ConfigError, match="unknown metric"):
        load_checked_settings(environ={"RAGPULSE_ALERT_THRESHOLDS": "checkout/groundedness=0.9"})


def test_yaml_mapping(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text("alert_thresholds:\n  answer_relevancy: 0.55\n")
    settings = load_checked_settings(config_file=config, environ={})
    assert settings.alerts.thresholds == {"answer_relevancy": 0.55}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("faithfulness=1.5", "within [0, 1]"),
        ("faithfulness=high", "must be a number"),
        ("groundedness=0.5", "unknown metric"),
        ("faithfulness", "expected metric=VALUE"),
    ],
)
def test_bad_thresholds_stop_the_start_naming_the_setting(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="alert_thresholds") as error:
        load_checked_settings(environ={"RAGPULSE_ALERT_THRESHOLDS": value})
    assert message in str(error.value)


def test_the_agent_exports_its_thresholds() -> None:

    registry = CollectorRegistry()
    settings = load_checked_settings(
        environ={"RAGPULSE_ALERT_THRESHOLDS": "faithfulness=0.65,checkout/answer_relevancy=0.9"}
    )
    build_agent(settings, registry)
    exported = {
        (s.labels["service"], s.labels["metric"]): s.value
        for m in registry.collect()
        if m.name == "ragpulse_quality_threshold"
        for s in m.samples
    }
    assert exported == {("", "faithfulness"): 0.65, ("checkout", "answer_relevancy"): 0.9}
