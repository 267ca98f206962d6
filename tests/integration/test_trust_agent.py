"""`ragpulse run` with label sampling: human labels arrive as annotation spans, the PPI gauges follow."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openinference.instrumentation import Annotation, get_annotation_attributes
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.support.agent_process import AgentProcess
from tests.support.net import http_post
from tests.support.otlp import Recorder, protobuf
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

CONTEXT = "Paris is the capital of France. The Eiffel Tower was completed in 1889."
ANSWERS = [
    "Paris is the capital of France.",
    "The Eiffel Tower was completed in 1889 in Paris.",
    "The Eiffel Tower was completed in 1925 by Gustave Klimt.",
    "Paris is the capital of France and the tower dates from 1889.",
    "Lyon is the capital of France since 1999.",
    "The capital of France is Paris.",
    "The Eiffel Tower is 3 km tall and made of glass.",
    "The Eiffel Tower, completed in 1889, stands in Paris.",
]
HUMAN_LABELS = [1, 1, 0, 1, 0, 1, 0, 1]  # 5 of 8 faithful


@pytest.fixture
def agent() -> Iterator[AgentProcess]:
    process = AgentProcess(
        env={
            "RAGPULSE_METRICS": "faithfulness",
            "RAGPULSE_LABEL_SAMPLE_RATE": "1",  # every scored interaction is drawn for labelling
            "RAGPULSE_PPI_MIN_LABELS": "4",
        }
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.kill()


def post(agent: AgentProcess, recorder: Recorder) -> None:
    status, body, _ = http_post(
        agent.traces_url, protobuf(recorder.spans()), {"Content-Type": "application/x-protobuf"}
    )
    assert status == 200, body


def test_human_annotations_join_scores_and_drive_the_quality_estimate(agent: AgentProcess) -> None:
    app = Recorder("rag-app")
    for answer in ANSWERS:
        openinference_single_span(app.tracer, query="Tell me about Paris.", chunks=[CONTEXT], response=answer)
    post(agent, app)
    evaluated = agent.wait_for(lambda s: s.total("ragpulse_evaluations_total") >= len(ANSWERS), timeout=60)
    assert evaluated.total("ragpulse_evaluations_total", outcome="ok") == len(ANSWERS)
    assert evaluated.total("ragpulse_label_requests_total") == len(ANSWERS)
    assert evaluated.value("ragpulse_quality_estimate", bound="mean") is None  # no labels yet

    # A labelling tool reports afterwards: one feedback span per answer, a child of the scored span,
    # with OpenInference annotation attributes made by OpenInference's own helper.
    tool = Recorder("labelling-tool")
    for scored, label in zip(app.spans(), HUMAN_LABELS, strict=True):
        parent = NonRecordingSpan(
            SpanContext(scored.context.trace_id, scored.context.span_id, is_remote=True,
                        trace_flags=TraceFlags(TraceFlags.SAMPLED))
        )  # fmt: skip
        with tool.tracer.start_as_current_span("feedback", context=trace.set_span_in_context(parent)) as span:
            span.set_attributes(
                get_annotation_attributes(
                    annotations=[
                        Annotation(name="faithfulness", score=float(label), annotator_kind="HUMAN"),
                        Annotation(name="answer_relevancy", label="relevant", annotator_kind="LLM"),
                    ]
                )
            )
    with tool.tracer.start_as_current_span("feedback") as span:  # a human label nobody can use
        span.set_attributes(
            get_annotation_attributes(
                annotations=[Annotation(name="faithfulness", label="sort of", annotator_kind="HUMAN")]
            )
        )
    post(agent, tool)

    found = agent.wait_for(
        lambda s: (
            s.total("ragpulse_labels_total", outcome="joined") >= len(HUMAN_LABELS)
            and s.value("ragpulse_quality_estimate", bound="mean") is not None
        ),
        timeout=30,
    )
    assert found.total("ragpulse_labels_total", outcome="joined") == len(HUMAN_LABELS)
    assert found.total("ragpulse_labels_total", outcome="invalid") == 1
    series = {"service": "rag-app", "metric": "faithfulness"}
    # Every judged interaction is labelled here, so the estimate is the humans' mean exactly,
    # whatever the judge said; its interval brackets it.
    mean = found.value("ragpulse_quality_estimate", bound="mean", **series)
    low = found.value("ragpulse_quality_estimate", bound="low", **series)
    high = found.value("ragpulse_quality_estimate", bound="high", **series)
    assert mean == pytest.approx(sum(HUMAN_LABELS) / len(HUMAN_LABELS), abs=1e-6)
    assert low is not None and high is not None and low < mean < high
    assert found.value("ragpulse_quality_estimate_labels", **series) == len(HUMAN_LABELS)
    assert "Traceback" not in agent.log()
