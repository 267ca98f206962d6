"""The streaming PPI estimate: labels from annotation spans joined to scores, gauges, bounds."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agent.config import TrustSettings
from agent.model import MetricResult, RagInteraction, Resource, Span
from agent.telemetry import Telemetry
from agent.trust.aggregator import PpiAggregator
from agent.trust.calibration import CalibrationSet, fit
from agent.trust.label_sampling import LabelSampler, label_fraction
from agent.trust.labels import Label, labels_from_span
from agent.trust.ppi import ppi_mean_ci
from tests.support.otlp import Recorder, decoded
from tests.support.pipeline import evaluated


def interaction(i: int, service: str = "shop", route: str = "/ask") -> RagInteraction:
    return RagInteraction(
        trace_id=f"{i:032x}", span_id=f"{i + 1:016x}", query="q", chunks=(), response="r",
        service=service, route=route,
    )  # fmt: skip


def annotation_span(
    target: RagInteraction, attributes: dict[str, object], *, child: bool = True, kind: str | None = None
) -> Span:
    attrs = dict(attributes)
    if kind:
        attrs["openinference.span.kind"] = kind
    return Span(
        trace_id=target.trace_id,
        span_id="ffffffffffffffff" if child else target.span_id,
        parent_span_id=target.span_id if child else None,
        name="feedback",
        start_time_unix_nano=0,
        end_time_unix_nano=0,
        attributes=attrs,
        resource=Resource({"service.name": "labelling-tool"}),
    )


def human(metric: str, **fields: object) -> dict[str, object]:
    out: dict[str, object] = {"annotations.0.annotation.name": metric}
    out.update({f"annotations.0.annotation.{k}": v for k, v in fields.items()})
    return out


class Clock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


def make(
    fraction: float = 1.0, *, min_labels: int = 5, max_pending: int = 100_000, windows_kept: int = 2,
    **kwargs: object,
) -> tuple[PpiAggregator, Telemetry, Clock]:  # fmt: skip
    telemetry = Telemetry(CollectorRegistry())
    clock = Clock()
    settings = TrustSettings(
        label_sample_rate=fraction, ppi_window_seconds=3600, ppi_min_labels=min_labels,
        label_max_pending=max_pending, ppi_windows_kept=windows_kept,
    )  # fmt: skip
    aggregator = PpiAggregator(telemetry.trust, settings, clock=clock, **kwargs)  # type: ignore[arg-type]
    return aggregator, telemetry, clock


async def export(
    aggregator: PpiAggregator, item: RagInteraction, results: list[MetricResult], *, uniform: bool = True
) -> None:
    """As the pipeline does: the aggregator marks the draw once, then exports what it marked."""
    mark = aggregator.mark(item, results)
    await aggregator.export(evaluated(item, results, uniform=uniform, marks=[mark] if mark else []))


def gauge(telemetry: Telemetry, bound: str, metric: str = "faithfulness") -> float | None:
    return telemetry.registry.get_sample_value(
        "ragpulse_quality_estimate", {"service": "shop", "route": "/ask", "metric": metric, "bound": bound}
    )


def outcomes(telemetry: Telemetry, outcome: str) -> float:
    return telemetry.registry.get_sample_value("ragpulse_labels_total", {"outcome": outcome}) or 0.0


def test_labels_from_annotation_spans_join_scores_and_publish_the_ppi_estimate() -> None:
    aggregator, telemetry, _ = make(fraction=0.3, min_labels=20)
    rng = random.Random(1)
    scores, truth = {}, {}
    for i in range(600):
        item = interaction(i)
        quality = rng.random()
        scores[i], truth[i] = min(1.0, quality + 0.15), float(rng.random() < quality)
        asyncio.run(export(aggregator, item, [MetricResult.ok("faithfulness", scores[i], judge="t")]))
    drawn = [i for i in range(600) if label_fraction(interaction(i).interaction_id) < 0.3]
    assert len(drawn) > 100
    spans = [annotation_span(interaction(i), human("faithfulness", score=truth[i], annotator_kind="HUMAN"))
             for i in drawn]  # fmt: skip
    aggregator.on_spans(spans)
    assert outcomes(telemetry, "joined") == len(drawn)
    expected = ppi_mean_ci([truth[i] for i in drawn], [scores[i] for i in drawn], scores.values())
    assert expected is not None
    assert gauge(telemetry, "mean") == pytest.approx(expected.mean, abs=1e-6)
    assert gauge(telemetry, "low") == pytest.approx(expected.low, abs=1e-6)
    assert gauge(telemetry, "high") == pytest.approx(expected.high, abs=1e-6)
    labels_gauge = telemetry.registry.get_sample_value(
        "ragpulse_quality_estimate_labels", {"service": "shop", "route": "/ask", "metric": "faithfulness"}
    )
    assert labels_gauge == len(drawn)

    # A label for an interaction that was not drawn is not a uniform sample: not used for PPI.
    not_drawn = next(i for i in range(600) if i not in drawn)
    aggregator.on_spans(
        [annotation_span(interaction(not_drawn), human("faithfulness", score=0.0, annotator_kind="HUMAN"))]
    )
    assert outcomes(telemetry, "not_requested") == 1
    # The same label twice counts once; an LLM's annotation is not a human label.
    aggregator.on_spans(
        [
            annotation_span(interaction(drawn[0]), human("faithfulness", label="no", annotator_kind="HUMAN")),
            annotation_span(interaction(drawn[1]), human("faithfulness", score=0.0, annotator_kind="LLM")),
            annotation_span(
                interaction(drawn[2]), human("faithfulness", label="meh", annotator_kind="HUMAN")
            ),
            annotation_span(interaction(drawn[3]), human("tone", score=1.0, annotator_kind="HUMAN")),
        ]
    )
    assert outcomes(telemetry, "duplicate") == 1
    assert outcomes(telemetry, "invalid") == 1
    assert outcomes(telemetry, "no_score") == 1
    assert gauge(telemetry, "mean") == pytest.approx(expected.mean, abs=1e-6)


def test_no_estimate_until_enough_labels_and_none_for_undefined_scores() -> None:
    aggregator, telemetry, _ = make(min_labels=5)
    for i in range(4):
        asyncio.run(export(aggregator, interaction(i), [MetricResult.ok("faithfulness", 0.9, judge="t")]))
        aggregator.add_label(Label(interaction(i).interaction_id, "faithfulness", 1.0, "test"))
    assert gauge(telemetry, "mean") is None
    asyncio.run(export(aggregator, interaction(9), [MetricResult.skipped("faithfulness", "no claims")]))
    assert (
        aggregator.add_label(Label(interaction(9).interaction_id, "faithfulness", 1.0, "test")) == "unmatched"
    )
    asyncio.run(export(aggregator, interaction(4), [MetricResult.ok("faithfulness", 0.9, judge="t")]))
    aggregator.add_label(Label(interaction(4).interaction_id, "faithfulness", 0.0, "test"))
    # Every judged interaction is labelled: the estimate is the labels' mean whatever λ is.
    assert gauge(telemetry, "mean") == pytest.approx(0.8)


def test_label_targets_parent_span_root_span_or_explicit_id() -> None:
    item = interaction(7)
    on_itself = annotation_span(
        item, human("faithfulness", score=1, annotator_kind="HUMAN"), child=False, kind="LLM"
    )
    child = annotation_span(item, human("faithfulness", score=1, annotator_kind="HUMAN"))
    explicit = annotation_span(
        interaction(8),
        {**human("faithfulness", score=1, annotator_kind="HUMAN"), "ragpulse.interaction.id": "a:b"},
    )
    assert labels_from_span(on_itself).labels[0].interaction_id == item.interaction_id
    assert labels_from_span(child).labels[0].interaction_id == item.interaction_id
    assert labels_from_span(explicit).labels[0].interaction_id == "a:b"

    # A label on the trace's root span joins the one interaction of that trace awaiting labels.
    aggregator, _telemetry, _ = make(min_labels=2)
    asyncio.run(export(aggregator, item, [MetricResult.ok("faithfulness", 0.4, judge="t")]))
    root = Label(f"{item.trace_id}:{'a' * 16}", "faithfulness", 1.0, "test")
    assert aggregator.add_label(root) == "joined"


def test_labels_from_real_sdk_spans_with_evaluation_terminology() -> None:
    recorder = Recorder("labelling-tool")
    with recorder.tracer.start_as_current_span("rag") as span:
        span.set_attribute("openinference.span.kind", "CHAIN")
        span.set_attribute("evaluations.0.evaluation.name", "answer_relevancy")
        span.set_attribute("evaluations.0.evaluation.label", "relevant")
        span.set_attribute("evaluations.0.evaluation.annotator_kind", "HUMAN")
        span.set_attribute("evaluations.1.evaluation.name", "faithfulness")
        span.set_attribute("evaluations.1.evaluation.score", 0)
        span.set_attribute("evaluations.1.evaluation.annotator_kind", "HUMAN")
    (decoded_span,) = decoded(recorder.spans())
    found = labels_from_span(decoded_span)
    target = f"{decoded_span.trace_id}:{decoded_span.span_id}"
    assert sorted((lbl.interaction_id, lbl.metric, lbl.value) for lbl in found.labels) == [
        (target, "answer_relevancy", 1.0),
        (target, "faithfulness", 0.0),
    ]


def test_windows_roll_and_late_labels_of_dropped_windows_expire() -> None:
    aggregator, telemetry, clock = make(min_labels=2, windows_kept=1)
    first, second = interaction(1), interaction(2)
    asyncio.run(export(aggregator, first, [MetricResult.ok("faithfulness", 0.5, judge="t")]))
    clock.now += 3600
    asyncio.run(export(aggregator, second, [MetricResult.ok("faithfulness", 0.5, judge="t")]))
    assert aggregator.add_label(Label(first.interaction_id, "faithfulness", 1.0, "test")) == "expired"
    assert aggregator.add_label(Label(second.interaction_id, "faithfulness", 1.0, "test")) == "joined"
    third = interaction(3)
    asyncio.run(export(aggregator, third, [MetricResult.ok("faithfulness", 0.5, judge="t")]))
    assert aggregator.add_label(Label(third.interaction_id, "faithfulness", 0.0, "test")) == "joined"
    assert gauge(telemetry, "mean") == pytest.approx(0.5)  # the window holding both labels
    # When that window is dropped, its estimate goes with it rather than staying on forever.
    clock.now += 3600
    asyncio.run(export(aggregator, interaction(4), [MetricResult.ok("faithfulness", 0.5, judge="t")]))
    assert gauge(telemetry, "mean") is None


def test_pending_interactions_and_series_are_bounded() -> None:
    aggregator, _telemetry, _ = make(max_pending=50, min_labels=2)
    for i in range(500):
        asyncio.run(
            export(
                aggregator,
                interaction(i, service=f"s{i % 3}"),
                [MetricResult.ok("faithfulness", 0.5, judge="t")],
            )
        )
    assert len(aggregator._awaiting) == 50
    assert sum(len(ids) for ids in aggregator._by_trace.values()) == 50
    assert (
        aggregator.add_label(Label(interaction(0).interaction_id, "faithfulness", 1.0, "test")) == "unmatched"
    )
    assert (
        aggregator.add_label(Label(interaction(499).interaction_id, "faithfulness", 1.0, "test")) == "joined"
    )


def test_estimates_use_the_loaded_calibration() -> None:
    calibration = fit("faithfulness", [0.2, 0.4, 0.6, 0.8], [0, 0, 1, 1], method="isotonic")
    aggregator, _telemetry, _ = make(min_labels=2, calibrations=CalibrationSet({"faithfulness": calibration}))
    for i in range(4):
        asyncio.run(
            export(aggregator, interaction(i), [MetricResult.ok("faithfulness", 0.2 * (i + 1), judge="t")])
        )
    assert aggregator._awaiting[interaction(3).interaction_id].scores == {"faithfulness": 1.0}


def test_rule_kept_interactions_are_not_part_of_the_uniform_sample() -> None:
    aggregator, _telemetry, _ = make(min_labels=2)
    kept_by_rule = interaction(1)
    asyncio.run(
        export(aggregator, kept_by_rule, [MetricResult.ok("faithfulness", 0.5, judge="t")], uniform=False)
    )
    assert aggregator._series == {}
    assert (
        aggregator.add_label(Label(interaction(1).interaction_id, "faithfulness", 1.0, "test")) == "unmatched"
    )


def test_drawn_interactions_are_marked_on_published_results() -> None:
    from agent.build import build_agent
    from agent.config import load_settings
    from agent.exporters.kafka_results import KafkaResultsExporter, evaluation_request

    item = interaction(3)
    results = [MetricResult.ok("faithfulness", 0.5, judge="t")]
    request = LabelSampler(1.0).decide(item.interaction_id, results)
    message = evaluation_request(item, results, extra_attributes=request.attributes())
    (span,) = message.resource_spans[0].scope_spans[0].spans
    attributes = {kv.key: kv.value for kv in span.attributes}
    assert attributes["ragpulse.label.requested"].bool_value is True
    assert attributes["ragpulse.label.weight"].double_value == 1.0
    assert attributes["ragpulse.label.reason"].string_value == "uniform"
    unmarked = evaluation_request(item, results)
    assert not any(
        kv.key.startswith("ragpulse.label.")
        for kv in unmarked.resource_spans[0].scope_spans[0].spans[0].attributes
    )

    # Wiring: the estimate marks the draw once, before the results exporter and itself read it;
    # off by default.
    settings = load_settings(
        environ={"RAGPULSE_RESULTS_TOPIC": "results", "RAGPULSE_LABEL_SAMPLE_RATE": "0.1"}
    )
    agent = build_agent(settings, CollectorRegistry())
    production = agent.pipeline._routes["production"]
    (results_exporter,) = [e for e in production.exporters if isinstance(e, KafkaResultsExporter)]
    (ppi,) = [e for e in production.exporters if isinstance(e, PpiAggregator)]
    assert list(production.markers) == [ppi] and ppi in production.observers
    assert production.exporters.index(results_exporter) < production.exporters.index(ppi)
    assert ppi.sampler.fraction == 0.1
    default = build_agent(load_settings(environ={}), CollectorRegistry())
    assert not any(isinstance(e, PpiAggregator) for e in default.pipeline._routes["production"].exporters)


def test_run_loads_the_calibration_and_says_which_judge_it_was_fitted_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from agent.build import build_agent
    from agent.config import load_settings

    path = tmp_path / "calibration.json"
    calibration = fit("faithfulness", [0.2, 0.4, 0.6, 0.8], [0, 0, 1, 1], judge="openai/gpt-4o-mini")
    CalibrationSet({"faithfulness": calibration}).save(path)
    environ = {"RAGPULSE_CALIBRATION_FILE": str(path), "RAGPULSE_LABEL_SAMPLE_RATE": "0.5"}
    with caplog.at_level("INFO", logger="agent.trust.aggregator"):
        agent = build_agent(load_settings(environ=environ), CollectorRegistry())
    (ppi,) = [e for e in agent.pipeline._routes["production"].exporters if isinstance(e, PpiAggregator)]
    asyncio.run(export(ppi, interaction(1), [MetricResult.ok("faithfulness", 0.8, judge="lexical")]))
    assert "fitted on judge openai/gpt-4o-mini, but the judge is lexical" in caplog.text
    assert "calibration of faithfulness loaded (isotonic, 4 labels)" in caplog.text
