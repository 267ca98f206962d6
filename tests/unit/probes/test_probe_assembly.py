"""Probe traces in the assembler and the probes' scoring: the prober's root span marks the trace,
in whichever order its spans arrive."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import set_span_in_context

from agent.config import ProbeSettings
from agent.judges.base import CriterionInputs
from agent.judges.local import LexicalJudge
from agent.model import Criterion, Outcome, Probe, Verdict
from agent.otlp import probes as attributes
from agent.otlp.assemble import TRACE_MISSING
from agent.probes.results import ProbeResults
from agent.probes.scoring import ProbeScorer
from agent.telemetry import ProbeTelemetry
from tests.support.otlp import Clock, Recorder, assembler, decoded
from tests.support.pipeline import evaluated

REFERENCE = "Paris is the capital of France."


def probe_trace(
    *, failure: str | None = None, app: bool = True
) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """(the prober's span, the app's spans) of one probe trace."""
    prober, app_recorder = Recorder("ragpulse-prober"), Recorder("capitals-app")
    extra: dict[str, Any] = {attributes.FAILURE: failure} if failure else {}
    with prober.tracer.start_as_current_span("ragpulse.probe", context=otel_context.Context(), attributes={
        attributes.SET: "golden", attributes.ITEM: "g-fr", attributes.REFERENCE: REFERENCE,
        attributes.RELEVANT_IDS: ["paris"], **extra,
    }) as root:  # fmt: skip
        if app:
            parent = set_span_in_context(root)
            server = app_recorder.tracer.start_as_current_span("POST /ask", context=parent)
            with server, app_recorder.tracer.start_as_current_span("rag") as span:
                span.set_attribute("ragpulse.query", "What is the capital of France?")
                span.set_attribute("ragpulse.chunks", ["Paris is the capital of France.", "Bananas."])
                span.set_attribute("ragpulse.chunk_ids", ["paris", "bananas"])
                span.set_attribute("ragpulse.response", "Paris.")
    return prober.spans(), app_recorder.spans()


@pytest.mark.parametrize("prober_first", [True, False])
def test_the_probe_span_marks_its_trace_in_either_order(prober_first: bool) -> None:
    prober, app = probe_trace()
    first, second = (prober, app) if prober_first else (app, prober)
    trace = assembler()
    assert trace.add(decoded(first)).interactions == []
    out = trace.add(decoded(second))
    (interaction,) = out.interactions
    assert interaction.probe == Probe("golden", "g-fr", REFERENCE, ("paris",))
    assert interaction.reference == REFERENCE
    assert out.buffered_traces == 0


def test_a_probe_whose_app_spans_never_arrive_is_counted_as_missing() -> None:
    prober, _ = probe_trace()
    clock = Clock()
    trace = assembler(wait=5.0, clock=clock)
    trace.add(decoded(prober))
    clock.now = 6.0
    out = trace.expire(clock.now)
    assert out.interactions == []
    assert out.probe_failures == {("golden", TRACE_MISSING): 1}


def test_a_failed_probe_is_counted_by_the_probers_reason_and_never_scored() -> None:
    prober, app = probe_trace(failure="timeout")
    trace = assembler()
    out = trace.add(decoded([*prober, *app]))
    assert out.probe_failures == {("golden", "timeout"): 1}
    assert out.interactions == []


def test_probe_scoring_adds_reference_and_rank_metrics_and_records_apart() -> None:
    prober, app = probe_trace()
    (interaction,) = assembler().add(decoded([*prober, *app])).interactions
    scorer = ProbeScorer(ProbeSettings(k=5), LexicalJudge(), ("faithfulness",))
    evaluation = asyncio.run(scorer.assess(interaction))
    by_name = {r.metric: r for r in evaluation.results}
    assert {"faithfulness", "context_recall", "answer_correctness", "recall_at_5", "mrr"} <= set(by_name)
    assert by_name["recall_at_5"].value == 1.0 and by_name["mrr"].value == 1.0
    assert by_name["context_recall"].outcome is Outcome.OK

    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    results = ProbeResults(ProbeTelemetry(registry))
    asyncio.run(results.export(evaluated(interaction, evaluation.results)))
    assert (
        registry.get_sample_value("ragpulse_probe_score_count", {"probe_set": "golden", "metric": "mrr"}) == 1
    )
    outcome = results.outcome(evaluation.results)
    assert (
        registry.get_sample_value("ragpulse_probe_items_total", {"probe_set": "golden", "outcome": outcome})
        == 1
    )


class CriteriaAnswering(LexicalJudge):
    """The lexical judge, answering custom criteria yes (it refuses them otherwise)."""

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        self.shown = inputs
        return {c.name: Verdict(True) for c in criteria}


def test_probe_scoring_scores_custom_criteria_those_reading_the_reference_included() -> None:
    prober, app = probe_trace()
    (interaction,) = assembler().add(decoded([*prober, *app])).interactions
    matches = Criterion(
        "matches_reference", "Does the response agree with the reference?", ("response", "reference")
    )
    judge = CriteriaAnswering()
    scorer = ProbeScorer(ProbeSettings(k=5), judge, ("faithfulness",), criteria=[matches])
    by_name = {r.metric: r for r in asyncio.run(scorer.assess(interaction)).results}
    assert by_name["matches_reference"].outcome is Outcome.OK and by_name["matches_reference"].value == 1.0
    assert interaction.reference and judge.shown.reference == interaction.reference


def test_probe_set_labels_are_bounded() -> None:
    from prometheus_client import CollectorRegistry

    from agent.probes.results import OTHER

    registry = CollectorRegistry()
    results = ProbeResults(ProbeTelemetry(registry), ProbeSettings(max_sets=2))
    for name in ("a", "b", "c", "d"):
        results.failed(name, "timeout")
    assert (
        registry.get_sample_value("ragpulse_probe_failures_total", {"probe_set": OTHER, "reason": "timeout"})
        == 2
    )
