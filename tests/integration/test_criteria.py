"""Custom criteria judged by the LLM judge through litellm, against the test LLM server.

The server answers a criterion from the blocks the prompt says it reads (the share of the
question's content words found there: `criterion_answer`), so each score below follows from the
prompt the judge actually received; the prompts themselves are asserted, and calls are counted.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from agent.build import build_judge, build_metrics
from agent.config import DriftSettings, Settings
from agent.evaluate import Evaluator
from agent.exporters.drift import DriftAggregator
from agent.exporters.prometheus import PrometheusExporter
from agent.metrics.criteria import CriterionMetric
from agent.model import Chunk, MetricResult, Outcome, RagInteraction
from agent.telemetry import Telemetry
from tests.support.agent_process import AgentProcess
from tests.support.cli import ragpulse_eval, read_jsonl
from tests.support.llm_server import FakeLLMServer, criterion_answer, fenced_blocks
from tests.support.pipeline import evaluated
from tests.support.probing import CANARY_ITEMS, canary_command
from tests.support.repo import ROOT
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

MODEL = "openai/ragpulse-test-judge"
QUERY = "What is the capital of France?"
RESPONSE = "The capital of France is Paris. Paris was founded in 250 BC."
CHUNKS = (
    "Bananas grow in tropical climates. They are rich in potassium.",
    "Paris is the capital and largest city of France. It lies on the Seine.",
)
CAPITAL = {
    "name": "capital_described",
    "question": "Is Paris described as the capital of France?",
    "reads": ["response"],
    "scale": "1-5",
    "anchors": {1: "not at all", 5: "exactly so"},
}
BANANAS = {
    "name": "mentions_bananas",
    "question": "Does the text mention bananas or potassium?",
    "reads": ["context"],
}
BUILT_IN = {
    "context_precision": 0.5,
    "context_relevancy": 1 / 3,
    "faithfulness": 0.5,
    "answer_relevancy": 0.5,
}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as running:
        yield running


@pytest.fixture
def fake(server: FakeLLMServer) -> FakeLLMServer:
    server.reset()
    return server


def settings(server: FakeLLMServer, criteria: Sequence[dict[str, Any]], **overrides: object) -> Settings:
    values: dict[str, object] = {
        "judge_model": MODEL,
        "judge_api_base": server.api_base,
        "judge_api_key": "test-key",
        "judge_structured_output": "json_schema",
        "criteria": list(criteria),
    }
    return Settings.model_validate({**values, **overrides})


def evaluator(settings: Settings, only_criteria: bool = False) -> Evaluator:
    judge = build_judge(settings, Telemetry(CollectorRegistry()).judge)
    metrics = build_metrics(settings)
    if only_criteria:
        metrics = [m for m in metrics if isinstance(m, CriterionMetric)]
    return Evaluator(metrics, judge)


def interaction(response: str | None = RESPONSE, reference: str | None = None, n: int = 0) -> RagInteraction:
    return RagInteraction(
        trace_id=f"{n:032x}",
        span_id="cd" * 8,
        query=QUERY if n == 0 else f"{QUERY} (variant {n})",
        chunks=tuple(Chunk(c) for c in CHUNKS),
        response=response,
        service="s",
        route="r",
        reference=reference,
    )


def scored(results: list[MetricResult]) -> dict[str, float | None]:
    return {r.metric: r.value for r in results}


def user_prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][1]["content"])


def test_two_criteria_ride_in_the_one_combined_call(fake: FakeLLMServer) -> None:
    built_in = scored(asyncio.run(evaluator(settings(fake, [])).evaluate(interaction())))
    fake.reset()
    scoring = evaluator(settings(fake, [CAPITAL, BANANAS]))
    results = asyncio.run(scoring.evaluate(interaction()))

    # The built-in scores are what they are without criteria.
    assert set(built_in) == {"context_precision", "context_relevancy", "faithfulness", "answer_relevancy"}
    # Paris, capital, France are in the response, "described" is not: 3 of 4 words → 4 of 5 → 0.75.
    assert criterion_answer(str(CAPITAL["question"]), "1-5", RESPONSE) == 4
    assert scored(results) == pytest.approx({**built_in, "capital_described": 0.75, "mentions_bananas": 1.0})
    assert all(r.outcome is Outcome.OK for r in results)
    # Six metrics, one call: the criteria rode in the combined question.
    assert fake.stats.calls == 1 and dict(fake.stats.by_kind) == {"assess_interaction": 1}

    (request,) = fake.stats.requests
    system, user = request["messages"][0]["content"], user_prompt(request)
    assert system.startswith("You are a strict evaluator of retrieval-augmented answers.")
    assert "Answer two things in one JSON object." in system  # the combined question's prompt
    assert (
        '- "capital_described" (reads RESPONSE; answer an integer from 1 to 5 (1 = not at all; '
        "5 = exactly so)): Is Paris described as the capital of France?"
    ) in user
    assert (
        '- "mentions_bananas" (reads CHUNKS; answer 1 for yes, 0 for no): Does the text mention bananas'
        in user
    )
    assert '"criteria" exactly the keys "capital_described", "mentions_bananas", one per criterion' in user
    # The criteria stand outside the fences: the fenced blocks are the interaction's texts only.
    kind, blocks = fenced_blocks(user)
    assert kind == "assess_interaction"
    assert [name for name, _ in blocks] == ["QUERY", "RESPONSE", "CHUNK 1", "CHUNK 2"]
    assert not any("capital_described" in body for _, body in blocks)
    # The pinned schema holds one key per criterion with its allowed answers.
    schema = request["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["chunks", "claims", "criteria"]
    assert schema["properties"]["criteria"] == {
        "type": "object",
        "properties": {
            "capital_described": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
            "mentions_bananas": {"type": "integer", "enum": [0, 1]},
        },
        "required": ["capital_described", "mentions_bananas"],
        "additionalProperties": False,
    }


def test_without_criteria_the_combined_prompt_is_unchanged(fake: FakeLLMServer) -> None:
    asyncio.run(evaluator(settings(fake, [])).evaluate(interaction()))
    (request,) = fake.stats.requests
    assert "CRITERIA" not in user_prompt(request) and '"criteria"' not in user_prompt(request)
    assert "criteria" not in request["response_format"]["json_schema"]["schema"]["properties"]


def test_criteria_are_cached_and_an_edited_criterion_is_asked_again_alone(fake: FakeLLMServer) -> None:
    same = settings(fake, [CAPITAL, BANANAS])
    scoring = evaluator(same)
    asyncio.run(scoring.evaluate(interaction()))
    again = asyncio.run(scoring.evaluate(interaction()))
    assert fake.stats.calls == 1  # all eight verdict kinds came from the cache
    assert scored(again)["capital_described"] == pytest.approx(0.75)

    # Same verdict cache (the judge stack's), one criterion edited: only it goes to the judge.
    edited = {**BANANAS, "question": "Does the text mention Paris or the Seine?"}
    judge = scoring._judge  # the stack that holds the cache
    rescoring = Evaluator(build_metrics(settings(fake, [CAPITAL, edited])), judge)
    results = asyncio.run(rescoring.evaluate(interaction()))
    assert fake.stats.calls == 2 and fake.stats.by_kind["judge_criteria"] == 1
    user = user_prompt(fake.stats.requests[-1])
    assert '"mentions_bananas"' in user and "Paris or the Seine" in user and "capital_described" not in user
    # The edited question reads the chunks: Paris and the Seine are there.
    assert scored(results)["mentions_bananas"] == 1.0


def test_criteria_judged_alone_cost_one_call_and_see_only_what_they_read(fake: FakeLLMServer) -> None:
    scoring = evaluator(settings(fake, [CAPITAL, BANANAS]), only_criteria=True)
    results = asyncio.run(scoring.evaluate(interaction()))
    assert scored(results) == pytest.approx({"capital_described": 0.75, "mentions_bananas": 1.0})
    assert fake.stats.calls == 1 and dict(fake.stats.by_kind) == {"judge_criteria": 1}
    (request,) = fake.stats.requests
    assert "Judge each criterion from the blocks it reads only" in request["messages"][0]["content"]
    kind, blocks = fenced_blocks(user_prompt(request))
    # No criterion reads the query: it is not sent.
    assert kind == "judge_criteria" and [name for name, _ in blocks] == ["RESPONSE", "CHUNK 1", "CHUNK 2"]


def test_a_criterion_reading_the_reference_is_skipped_without_one_never_zero(fake: FakeLLMServer) -> None:
    matches = {
        "name": "matches_reference",
        "question": "Does the response give Paris as the capital of France?",
        "reads": ["response", "reference"],
    }
    scoring = evaluator(settings(fake, [CAPITAL, matches]))
    production = asyncio.run(scoring.evaluate(interaction()))
    skipped = next(r for r in production if r.metric == "matches_reference")
    assert skipped.outcome is Outcome.SKIPPED and skipped.value is None and skipped.reason == "no_reference"
    assert dict(fake.stats.by_kind) == {"assess_interaction": 1}

    fake.reset()
    reference = "Paris is the capital of France."
    scored_with = asyncio.run(scoring.evaluate(interaction(reference=reference)))
    assert scored(scored_with)["matches_reference"] == 1.0
    # With a reference the combined question is not asked (usefulness is judged against it); the
    # criteria go together in one question of their own.
    assert fake.stats.by_kind["judge_criteria"] == 1
    (asked,) = [r for r in fake.stats.requests if fenced_blocks(user_prompt(r))[0] == "judge_criteria"]
    _, blocks = fenced_blocks(user_prompt(asked))
    assert dict(blocks)["REFERENCE"] == reference
    # capital_described reads the same response as before: the cache answered it.
    assert '"matches_reference"' in user_prompt(asked) and "capital_described" not in user_prompt(asked)
    assert scored(scored_with)["capital_described"] == pytest.approx(0.75)


def test_a_lower_is_better_criterion_scores_high_when_the_judge_says_no(fake: FakeLLMServer) -> None:
    off_topic = {
        "name": "mentions_fruit",
        "question": "Does the response mention bananas or potassium?",
        "reads": ["response"],
        "higher_is_better": False,
    }
    results = asyncio.run(evaluator(settings(fake, [off_topic]), only_criteria=True).evaluate(interaction()))
    assert criterion_answer(str(off_topic["question"]), "binary", RESPONSE) == 0  # no fruit in it
    assert scored(results) == {"mentions_fruit": 1.0}  # 1 - 0


def test_a_missing_criterion_is_repaired_alone(fake: FakeLLMServer) -> None:
    fake.script("wrong_count")  # the first answer leaves out the last criterion
    results = asyncio.run(
        evaluator(settings(fake, [CAPITAL, BANANAS]), only_criteria=True).evaluate(interaction())
    )
    assert scored(results) == pytest.approx({"capital_described": 0.75, "mentions_bananas": 1.0})
    assert fake.stats.calls == 2
    repair = user_prompt(fake.stats.requests[1])
    assert '"mentions_bananas"' in repair and "capital_described" not in repair


def test_a_judge_failure_is_an_error_never_a_score(fake: FakeLLMServer) -> None:
    fake.fail_always("400")
    results = asyncio.run(evaluator(settings(fake, [CAPITAL, BANANAS])).evaluate(interaction()))
    for name in ("capital_described", "mentions_bananas"):
        result = next(r for r in results if r.metric == name)
        assert result.outcome is Outcome.ERROR and result.value is None


def test_criteria_inputs_are_redacted_before_the_judge_sees_them(fake: FakeLLMServer) -> None:
    response = "The capital of France is Paris; write to jane.doe@example.com for the guide."
    scoring = evaluator(settings(fake, [CAPITAL]), only_criteria=True)
    asyncio.run(scoring.evaluate(interaction(response=response)))
    user = user_prompt(fake.stats.requests[0])
    assert "jane.doe@example.com" not in user and "capital of France is Paris" in user


def test_calls_per_interaction_stay_one_with_two_criteria(fake: FakeLLMServer) -> None:
    scoring = evaluator(settings(fake, [CAPITAL, BANANAS]))

    async def many() -> list[list[MetricResult]]:
        return await asyncio.gather(*(scoring.evaluate(interaction(n=n)) for n in range(1, 21)))

    every = asyncio.run(many())
    assert all(r.outcome is Outcome.OK for results in every for r in results)
    assert fake.stats.calls == 20 and dict(fake.stats.by_kind) == {"assess_interaction": 20}


def test_a_criterion_is_exported_as_a_score_series_and_its_drift_points_the_right_way(
    fake: FakeLLMServer,
) -> None:
    """A lower-is-better criterion ("does it mention fruit?") scores 1 while the answers stay on
    topic; when they start mentioning fruit its score drops, and the drift detector (which
    watches for drops) alarms on that criterion's own series."""
    fruit = {
        "name": "mentions_fruit",
        "question": "Does the response mention bananas or potassium?",
        "reads": ["response"],
        "higher_is_better": False,
    }
    scoring = evaluator(settings(fake, [fruit]), only_criteria=True)
    telemetry = Telemetry(CollectorRegistry())
    drift = DriftSettings(baseline_size=30, window=10, threshold=4.0, alpha=1e-3)
    exporters = [PrometheusExporter(telemetry.evaluation), DriftAggregator(telemetry.drift, drift)]

    async def run() -> None:
        for n in range(1, 61):
            on_topic = n <= 40
            response = (
                f"Paris is the capital (note {n})." if on_topic else f"Bananas are rich in potassium ({n})."
            )
            subject = interaction(response=response, n=n)
            results = await scoring.evaluate(subject)
            for exporter in exporters:
                await exporter.export(evaluated(subject, results))

    asyncio.run(run())
    registry = telemetry.registry
    labels = {"service": "s", "route": "r", "metric": "mentions_fruit"}
    assert registry.get_sample_value("ragpulse_score_count", labels) == 60
    assert registry.get_sample_value("ragpulse_score_sum", labels) == 40.0  # 40 on topic, 20 with fruit
    assert registry.get_sample_value("ragpulse_drift_detected", labels) == 1.0
    assert fake.stats.calls == 60


# -- ragpulse eval, as a user runs it ----------------------------------------------------------------


def _eval_set(tmp_path: Path) -> Path:
    rows = [
        {"id": "on_topic", "question": QUERY, "contexts": list(CHUNKS), "response": RESPONSE},
        {
            "id": "off_topic",
            "question": QUERY,
            "contexts": list(CHUNKS),
            "response": "Bananas are rich in potassium.",
        },
    ]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(yaml.safe_dump({"criteria": [CAPITAL, BANANAS]}))
    return config


def _env(server: FakeLLMServer, config: Path, **extra: str) -> dict[str, str]:
    return {
        "RAGPULSE_CONFIG": str(config),
        "RAGPULSE_JUDGE_MODEL": MODEL,
        "RAGPULSE_JUDGE_API_BASE": server.api_base,
        "RAGPULSE_JUDGE_API_KEY": "test-key",
        **extra,
    }


def test_eval_scores_criteria_from_the_config_file_in_the_combined_call(
    fake: FakeLLMServer, tmp_path: Path
) -> None:
    data, env = _eval_set(tmp_path), _env(fake, _config(tmp_path))
    metrics = (
        "context_precision,context_relevancy,faithfulness,answer_relevancy,capital_described,mentions_bananas"
    )
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "all"), "--metrics", metrics, env=env)
    assert run.returncode == 0, run.stderr
    rows = {row["id"]: row for row in read_jsonl(tmp_path / "all" / "results.jsonl")}
    assert rows["on_topic"]["capital_described"] == 0.75 and rows["on_topic"]["mentions_bananas"] == 1.0
    # Nothing of the question in the off-topic answer: the judge says 1 of 5, a defined 0.
    assert rows["off_topic"]["capital_described"] == 0.0
    # The self-check, then one call per item: the criteria rode in the combined question.
    assert dict(fake.stats.by_kind) == {"assess_chunks": 1, "assess_interaction": 2}
    summary = json.loads((tmp_path / "all" / "summary.json").read_text())["metrics"]
    assert (
        summary["capital_described"]["mean"] == pytest.approx(0.375)
        and summary["capital_described"]["count"] == 2
    )

    # Criteria alone (--metrics naming them): one question of their own per item.
    fake.reset()
    run = ragpulse_eval(
        str(data), "--out", str(tmp_path / "alone"), "--metrics", "capital_described", env=env
    )
    assert run.returncode == 0, run.stderr
    assert dict(fake.stats.by_kind) == {"assess_chunks": 1, "judge_criteria": 2}
    rows = {row["id"]: row for row in read_jsonl(tmp_path / "alone" / "results.jsonl")}
    assert rows["on_topic"]["capital_described"] == 0.75

    # A gate may name a criterion: its mean (0.375) is under 0.5.
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "gated"), "--metrics", "capital_described",
                        "--fail-under", "capital_described=0.5", env=env)  # fmt: skip
    assert run.returncode == 4 and "gate failed: capital_described: mean 0.375" in run.stderr, run.stderr


FRUIT = {
    "name": "mentions_fruit",
    "question": "Does the response mention bananas or potassium?",
    "reads": ["response"],
    "higher_is_better": False,
}


def _criterion_verdicts(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["question"]: v for v in entry["verdicts"] if v["question"].startswith("criterion ")}


def test_eval_shows_each_criterion_verdict_in_the_summary_the_report_and_the_comparison(
    fake: FakeLLMServer, tmp_path: Path
) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text(yaml.safe_dump({"criteria": [CAPITAL, BANANAS, FRUIT]}))
    env, data = _env(fake, config), _eval_set(tmp_path)
    metrics = "faithfulness,capital_described,mentions_bananas,mentions_fruit"
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "one"), "--metrics", metrics, env=env)
    assert run.returncode == 0, run.stderr
    weakest = json.loads((tmp_path / "one" / "summary.json").read_text())["weakest"]
    # The off-topic answer is the weakest: 1 of 5 on the capital, and fruit where none should be.
    assert [w["id"] for w in weakest] == ["off_topic", "on_topic"]
    assert weakest[0]["scores"] == {
        "faithfulness": 1.0, "capital_described": 0.0, "mentions_bananas": 1.0, "mentions_fruit": 0.0,
    }  # fmt: skip
    assert _criterion_verdicts(weakest[0]) == {
        "criterion capital_described": {"question": "criterion capital_described",
            "about": CAPITAL["question"], "verdict": "1 of 5", "passes": False, "score": 0.0},
        "criterion mentions_bananas": {"question": "criterion mentions_bananas",
            "about": BANANAS["question"], "verdict": "yes", "passes": True, "score": 1.0},
        # Lower is better: the judge's "yes" is the failing answer, scored 0.
        "criterion mentions_fruit": {"question": "criterion mentions_fruit",
            "about": FRUIT["question"], "verdict": "yes", "passes": False, "score": 0.0},
    }  # fmt: skip
    assert _criterion_verdicts(weakest[1])["criterion capital_described"]["verdict"] == "4 of 5"
    assert _criterion_verdicts(weakest[1])["criterion mentions_fruit"]["verdict"] == "no"
    # The built-in verdicts are there too: the off-topic answer's claim, which a chunk supports.
    assert [v["verdict"] for v in weakest[0]["verdicts"] if v["question"] == "claim supported"] == ["yes"]
    report = (tmp_path / "one" / "report.html").read_text()
    shown = report[report.index('id="weakest"') :]
    assert shown.count("criterion capital_described") == 2 and '<span class="no">1 of 5</span>' in shown
    assert '<span class="yes">4 of 5</span>' in shown and '<span class="no">yes</span>' in shown

    # A/B: A answered on topic everywhere; B's off-topic item got worse, and each side shows
    # what the judge answered for each criterion.
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({**row, "response": RESPONSE}) + "\n" for row in read_jsonl(data)))
    run = ragpulse_eval(str(good), str(data), "--compare", "--out", str(tmp_path / "ab"),
                        "--metrics", metrics, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = (tmp_path / "ab" / "report.html").read_text()
    changed = report[report.index('class="changed"') : report.index('id="summary"')]
    side_a, side_b = changed.split("<h4>A</h4>")[1].split("<h4>B</h4>")
    assert "off_topic" in changed and "on_topic" not in changed
    assert '<span class="yes">4 of 5</span>' in side_a and '<span class="yes">no</span>' in side_a
    assert '<span class="no">1 of 5</span>' in side_b and '<span class="no">yes</span>' in side_b


def test_the_local_judge_refuses_criteria_in_one_line_before_any_work(
    fake: FakeLLMServer, tmp_path: Path
) -> None:
    data = _eval_set(tmp_path)
    run = ragpulse_eval(str(data), "--out", str(tmp_path / "out"), "--judge", "lexical",
                        env={"RAGPULSE_CONFIG": str(_config(tmp_path))})  # fmt: skip
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert any("criteria" in line and "custom criteria need an LLM judge" in line for line in lines), (
        run.stderr
    )
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_with_graded_confidence_a_binary_criterion_is_its_probability_of_yes(
    fake: FakeLLMServer,
) -> None:
    fake.flag_probability = 0.9  # p(chosen flag) of every 0/1 in the answer, criteria's included
    try:
        results = scored(
            asyncio.run(
                evaluator(settings(fake, [CAPITAL, BANANAS], judge_structured_output="auto")).evaluate(
                    interaction()
                )
            )
        )
    finally:
        fake.flag_probability = None
    assert fake.stats.requests[0].get("logprobs") is True and fake.stats.calls == 1
    # The built-in verdicts are graded: usefulness (no, yes) read as (0.1, 0.9) gives
    # CP = (0.1 x 0.1 + 0.5 x 0.9) / 1.0 = 0.46, where binary verdicts give 0.5 ...
    assert results["context_precision"] == pytest.approx(0.46)
    # ... the binary criterion is p(yes) at its answer token, where 0 / 1 gave 1.0 ...
    assert results["mentions_bananas"] == pytest.approx(0.9)
    # ... and the 1-5 criterion is the judge's answer (4 of 5), as without log-probabilities.
    assert results["capital_described"] == 0.75
    # Asked alone (judge_criteria), the binary criterion is graded too; a "no" is 1 - p(no).
    fake.reset()
    fake.flag_probability = 0.8
    try:
        configured = settings(fake, [BANANAS, CAPITAL], judge_structured_output="auto")
        judge = build_judge(configured, Telemetry(CollectorRegistry()).judge)
        criteria_only = Evaluator([CriterionMetric(c) for c in configured.criteria], judge)
        alone = scored(asyncio.run(criteria_only.evaluate(interaction())))
    finally:
        fake.flag_probability = None
    assert dict(fake.stats.by_kind) == {"judge_criteria": 1}
    assert alone == {"mentions_bananas": pytest.approx(0.8), "capital_described": 0.75}
    # Without log-probabilities, exactly 0 / 1 as before.
    fake.reset()
    binary = scored(asyncio.run(evaluator(settings(fake, [BANANAS, CAPITAL])).evaluate(interaction())))
    assert binary["mentions_bananas"] == 1.0 and binary["capital_described"] == 0.75


def test_the_canary_compares_a_criterion_with_its_human_labels(fake: FakeLLMServer, tmp_path: Path) -> None:
    venues = {
        "name": "no_invented_venues",
        "question": "Does it talk of an opera house or the Olympics?",
        "reads": ["response"],
        "higher_is_better": False,
    }
    labels = tmp_path / "criterion-labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps(
                {"id": item["id"], "metric": "no_invented_venues", "label": int(item["id"].endswith("-ok"))}
            )
            + "\n"
            for item in CANARY_ITEMS
        )
    )
    env = {"RAGPULSE_CANARY_LABELS_FILE": str(labels), "RAGPULSE_CRITERIA": json.dumps([venues])}
    argv, environment = canary_command(tmp_path, fake, env=env)
    run = subprocess.run(argv, env=environment, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # The judge agrees with every label.
    assert "canary no_invented_venues: mean 0.500 (shift +0.000), auroc 1.000" in run.stdout, run.stdout
    state = json.loads((tmp_path / "canary-state.json").read_text())
    # The bad items invent an opera house and the Olympics: the judge says yes (score 0), the
    # labels say 0; the good ones it scores 1, as labelled.
    assert state["last"]["runs"]["no_invented_venues"]["mean"] == 0.5
    assert dict(fake.stats.by_kind) == {"judge_criteria": len(CANARY_ITEMS)}


def test_ragpulse_run_exports_each_criterion_as_a_score_series(fake: FakeLLMServer) -> None:
    """The agent as a process: spans from the OpenTelemetry SDK in, the criteria's series on
    /metrics, one judge call per interaction."""
    agent = AgentProcess(
        env={
            "RAGPULSE_JUDGE_MODEL": MODEL,
            "RAGPULSE_JUDGE_API_BASE": fake.api_base,
            "RAGPULSE_JUDGE_API_KEY": "test-key",
            "RAGPULSE_JUDGE_SELF_CHECK": "false",
            "RAGPULSE_CRITERIA": json.dumps([CAPITAL, BANANAS]),
        }
    )
    try:
        agent.wait_ready(timeout=60)
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracer = provider.get_tracer("tests")
        for n in range(3):
            openinference_single_span(tracer, query=f"{QUERY} ({n})", chunks=list(CHUNKS), response=RESPONSE)
        exporter = OTLPSpanExporter(endpoint=agent.traces_url)
        assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
        exporter.shutdown()
        labels = {"service": "rag-app", "route": "rag.query"}
        scrape = agent.wait_for(
            lambda s: s.value("ragpulse_score_count", metric="mentions_bananas", **labels) == 3, timeout=60
        )
        assert scrape.value("ragpulse_score_sum", metric="capital_described", **labels) == pytest.approx(
            3 * 0.75
        )
        assert scrape.value("ragpulse_score_sum", metric="mentions_bananas", **labels) == 3.0
        assert scrape.value("ragpulse_score_count", metric="faithfulness", **labels) == 3
        assert (
            scrape.value("ragpulse_evaluations_total", metric="capital_described", outcome="ok", **labels)
            == 3
        )
        assert dict(fake.stats.by_kind) == {"assess_interaction": 3}
        assert agent.stop() == 0
    finally:
        agent.kill()
