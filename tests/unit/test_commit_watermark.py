"""The pipeline's low watermark: input is finished only when its spans left the assembler and the
interactions they formed were evaluated and exported. Kafka offsets are committed up to it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from agent.config import PipelineSettings
from agent.delivery import Delivery, JudgeGate, Leases
from agent.evaluate import Evaluator
from agent.idempotency import MemoryIdempotency
from agent.model import MetricResult, RagInteraction
from agent.otlp.decode import DecodedRequest
from agent.pipeline import Pipeline, Route
from agent.sampling import KeepRule, RateTable, RuleSampler
from agent.sources.offsets import OffsetTracker
from agent.telemetry import Telemetry
from tests.support.otlp import Recorder, assembler, decoded
from tests.support.pipeline import ListExporter
from tests.support.spans import rag_trace


class GatedMetric:
    """Holds every evaluation until the test opens the gate."""

    name = "gated"
    questions: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.seen: list[RagInteraction] = []

    async def evaluate(self, interaction: RagInteraction, judge: object) -> MetricResult:
        self.seen.append(interaction)
        await self.gate.wait()
        return MetricResult.ok(self.name, 1.0, judge="test")


def _pipeline(
    metric: GatedMetric, exporter: ListExporter, keep: Sequence[str] = (), rate: float = 1.0
) -> Pipeline:
    rules = [KeepRule.parse(rule) for rule in keep]
    telemetry = Telemetry(CollectorRegistry())
    route = Route(
        "production",
        Evaluator([metric], judge=None),  # type: ignore[arg-type]
        [exporter],
        sampler=RuleSampler(RateTable(rate, {}, {}), rules),
    )
    leases = Leases(MemoryIdempotency("test", lease_seconds=30, done_seconds=60), "test", lease_seconds=30,
                    done_seconds=60)  # fmt: skip
    return Pipeline(
        assembler(capture=[rule.attribute for rule in rules]),
        {"production": route},
        lambda interaction: "production",
        Delivery(leases, JudgeGate(), telemetry.evaluation),
        telemetry.pipeline,
        PipelineSettings(max_pending=100, eval_concurrency=2),
    )


def test_offsets_wait_for_buffered_spans_and_their_evaluation() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        ids = rag_trace(recorder)
        by_id = {format(s.context.span_id, "016x"): s for s in recorder.spans()}
        metric, exporter = GatedMetric(), ListExporter()
        pipeline = _pipeline(metric, exporter)
        offsets = OffsetTracker()
        await pipeline.start()

        # Message 0: retriever and LLM spans; the root is still to come, so they stay buffered.
        first = pipeline.accept(
            DecodedRequest(decoded([by_id[ids["retriever"]], by_id[ids["llm"]]])), "kafka"
        )
        offsets.track("p0", 10, first)
        # Message 1: a span of no interest, finished at once; message 2: the root.
        offsets.track("p0", 11, pipeline.accept(DecodedRequest([]), "kafka"))
        assert offsets.committable(pipeline.low_watermark()) == {}

        offsets.track("p0", 12, pipeline.accept(DecodedRequest(decoded([by_id[ids["root"]]])), "kafka"))
        await asyncio.sleep(0.01)
        assert [i.span_id for i in metric.seen] == [ids["llm"]]
        # Assembled but not yet evaluated: still nothing to commit.
        assert offsets.committable(pipeline.low_watermark()) == {}

        metric.gate.set()
        await asyncio.sleep(0.01)
        assert exporter.exported == [f"{metric.seen[0].trace_id}:{ids['llm']}"]
        assert offsets.committable(pipeline.low_watermark()) == {"p0": 13}
        await pipeline.shutdown(1.0)

    asyncio.run(scenario())


def test_keep_rules_see_attributes_of_any_span_of_the_interaction() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        with recorder.tracer.start_as_current_span("request") as request:
            request.set_attribute("feedback.score", -1)
            ids = rag_trace(recorder)
        metric, exporter = GatedMetric(), ListExporter()
        metric.gate.set()
        # Rate 0: only the keep rule can bring the interaction to evaluation.
        pipeline = _pipeline(metric, exporter, keep=["feedback.score < 0"], rate=0.0)
        await pipeline.start()
        pipeline.accept(DecodedRequest(decoded(recorder.spans())), "otlp_http")
        await asyncio.sleep(0.01)
        assert [i.span_id for i in metric.seen] == [ids["llm"]]
        assert metric.seen[0].attributes == {"feedback.score": -1}
        await pipeline.shutdown(1.0)

    asyncio.run(scenario())
