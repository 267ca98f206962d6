"""The metrics the agent scores when `metrics` is unset: what its judge measures better than chance
(agent/judges/standing.py), said once at start; a set `metrics` is used exactly."""

from __future__ import annotations

import json
import logging
import os

import pytest
from prometheus_client import CollectorRegistry

from agent.build import build_agent, load_checked_settings, metric_choice
from agent.cli import main
from agent.config import Settings, load_settings
from agent.pipeline import Agent

REFERENCE_FREE = ("context_precision", "context_relevancy", "faithfulness", "answer_relevancy")
LEXICAL_DEFAULT = ("context_precision", "context_relevancy", "faithfulness")


def scored(agent: Agent, route: str = "production") -> tuple[str, ...]:
    """The metrics the route's evaluator scores (the probes' scorer adds the reference-based ones)."""
    evaluator = agent.pipeline._routes[route].evaluator
    inner = getattr(evaluator, "_evaluator", evaluator)  # ProbeScorer wraps an Evaluator
    return tuple(inner.metric_names)


def build_logging(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> tuple[Agent, list[logging.LogRecord]]:
    with caplog.at_level(logging.INFO, logger="agent.build"):
        agent = build_agent(settings, CollectorRegistry())
    return agent, [r for r in caplog.records if r.name == "agent.build"]


def test_unset_metrics_are_the_judges_default() -> None:
    settings = load_checked_settings(environ={})
    assert settings.metrics is None and settings.origin("metrics") == "default"
    assert metric_choice(settings).metrics == LEXICAL_DEFAULT
    embedding = load_checked_settings(environ={"RAGPULSE_JUDGE_MODEL": "embedding"})
    assert metric_choice(embedding).metrics == LEXICAL_DEFAULT
    llm = load_checked_settings(environ={"RAGPULSE_JUDGE_MODEL": "openai/gpt-4o-mini"})
    assert metric_choice(llm).metrics == REFERENCE_FREE


def test_the_agent_scores_the_default_set_and_says_once_what_is_off_and_how_to_turn_it_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent, records = build_logging(load_settings(environ={}), caplog)
    assert scored(agent) == LEXICAL_DEFAULT
    assert scored(agent, "probes") == (*LEXICAL_DEFAULT, "context_recall", "answer_correctness")
    [record] = records
    assert record.levelno == logging.INFO
    line = record.getMessage()
    assert (
        "answer_relevancy is off: the lexical judge measures it at chance (AUROC 0.469 [0.33, 0.61]" in line
    )
    assert "ARES's human-annotated test set, 111 rows, held out" in line
    assert "context_relevancy is on, weak (AUROC 0.664 [0.52, 0.81]" in line
    assert line.endswith(
        "to score answer_relevancy: RAGPULSE_METRICS=context_precision,context_relevancy,faithfulness,"
        "answer_relevancy (or --set metrics=context_precision,context_relevancy,faithfulness,"
        "answer_relevancy)"
    )


def test_docs_judges_md_shows_the_start_line_as_the_agent_writes_it(caplog: pytest.LogCaptureFixture) -> None:
    """docs/judges.md's sample of the start-up line, with its figures, is the line of the defaults."""
    from tests.support.repo import ROOT

    _, [record] = build_logging(load_settings(environ={}), caplog)
    shown = [
        line for line in (ROOT / "docs" / "judges.md").read_text().splitlines()
        if line.startswith("INFO agent.build: metrics ")
    ]  # fmt: skip
    assert shown == [f"INFO agent.build: {record.getMessage()}"]


def test_the_line_names_a_setting_that_turns_the_metric_on(caplog: pytest.LogCaptureFixture) -> None:
    """What the line tells the operator to set does score the metric, and then nothing is said."""
    _, records = build_logging(load_settings(environ={}), caplog)
    told = records[0].getMessage().rsplit("RAGPULSE_METRICS=", 1)[1].split(" ")[0]
    caplog.clear()
    agent, records = build_logging(load_settings(environ={"RAGPULSE_METRICS": told}), caplog)
    assert scored(agent) == REFERENCE_FREE
    [record] = records  # scored as set, with a warning: the judge measures it at chance
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "metrics context_precision, context_relevancy, faithfulness, answer_relevancy (as set); "
        "answer_relevancy says little: the lexical judge measures it at chance (AUROC 0.469"
    )


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"environ": {"RAGPULSE_METRICS": "faithfulness"}}, ("faithfulness",)),
        ({"overrides": {"metrics": "faithfulness,context_precision"}}, ("faithfulness", "context_precision")),
        ({"environ": {"RAGPULSE_METRICS": "context_relevancy, context_precision"}},
         ("context_relevancy", "context_precision")),
    ],
)  # fmt: skip
def test_a_set_metrics_is_used_exactly_and_silently(
    sources: dict[str, dict[str, str]], expected: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(**sources)  # type: ignore[arg-type]
    assert settings.origin("metrics") != "default"
    agent, records = build_logging(settings, caplog)
    assert scored(agent) == expected and records == []


def test_an_llm_judge_keeps_all_four_and_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(
        environ={"RAGPULSE_JUDGE_MODEL": "openai/gpt-4o-mini", "RAGPULSE_JUDGE_API_KEY": "x"}
    )
    agent, records = build_logging(settings, caplog)
    assert scored(agent) == REFERENCE_FREE and records == []


def test_settings_built_in_code_follow_the_same_rule() -> None:
    assert scored(build_agent(Settings(), CollectorRegistry())) == LEXICAL_DEFAULT
    chosen = Settings(metrics=("answer_relevancy",))
    assert scored(build_agent(chosen, CollectorRegistry())) == ("answer_relevancy",)


def test_validate_config_shows_the_effective_set_and_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("RAGPULSE_")]:
        monkeypatch.delenv(name)
    assert main(["validate-config", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["metrics"] == list(LEXICAL_DEFAULT)
    assert err.startswith(
        "ragpulse validate-config: metrics context_precision, context_relevancy, faithfulness "
        "(the lexical judge's default); answer_relevancy is off: the lexical judge measures it at chance"
    )
    assert "RAGPULSE_METRICS=context_precision,context_relevancy,faithfulness,answer_relevancy" in err
    assert main(["validate-config", "--json", "--set", "metrics=faithfulness,answer_relevancy"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["metrics"] == ["faithfulness", "answer_relevancy"]
    assert "(as set); answer_relevancy says little" in err
    assert main(["validate-config", "--json", "--judge-model", "openai/gpt-4o-mini"]) == 0
    out, err = capsys.readouterr()
    assert (
        json.loads(out)["metrics"] == list(REFERENCE_FREE) and "off:" not in err and "so none is off" in err
    )
