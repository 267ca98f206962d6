"""Synthetic RAG traffic as real OpenTelemetry spans (OpenInference layout), with a regression.

`TrafficModel` decides what one interaction looks like (pure, seeded); `SpanEmitter` records it
with the OpenTelemetry SDK as a trace of three spans, the way an OpenInference-instrumented app
does: a CHAIN root (the request), a RETRIEVER child with the ranked documents and an LLM child
with the answer, exported over OTLP/HTTP in protobuf.

The regression comes in two steps, as a broken retriever deploy would:
1. `irrelevant_first`: passages about other topics are ranked above the right one (the answer is
   still right): context precision and context relevancy drop, and so do the retriever's scores.
2. `missing_facts`: the right passage is no longer retrieved at all and the model answers from
   memory with wrong numbers and names: faithfulness drops too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from agent.demo.knowledge import ALL_FACTS, ROUTES, Route


class Phase(IntEnum):
    HEALTHY = 0
    IRRELEVANT_FIRST = 1
    MISSING_FACTS = 2

    @property
    def label(self) -> str:
        return {0: "healthy", 1: "irrelevant chunks ranked first", 2: "missing facts"}[self.value]


@dataclass(frozen=True, slots=True)
class Schedule:
    """When the regression starts (seconds after start; None = never) and when facts go missing."""

    regress_after: float | None
    missing_facts_after: float | None = None

    def phase(self, elapsed: float) -> Phase:
        if self.regress_after is None or elapsed < self.regress_after:
            return Phase.HEALTHY
        if self.missing_facts_after is not None and elapsed >= self.missing_facts_after:
            return Phase.MISSING_FACTS
        return Phase.IRRELEVANT_FIRST


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    id: str
    content: str
    score: float


@dataclass(frozen=True, slots=True)
class SyntheticInteraction:
    service: str
    route: str
    question: str
    chunks: tuple[RetrievedChunk, ...]
    response: str
    relevant_id: str


class TrafficModel:
    """Draws interactions; deterministic for a seed."""

    def __init__(self, seed: int = 7, routes: Sequence[Route] = ROUTES, top_k: int = 4) -> None:
        self._rng = random.Random(seed)
        self._routes = tuple(routes)
        self._top_k = top_k

    def draw(self, phase: Phase) -> SyntheticInteraction:
        rng = self._rng
        route = rng.choice(self._routes)
        fact = rng.choice(route.facts)
        same_topic = [f for f in route.facts if f.id != fact.id]
        off_topic = [f for f in ALL_FACTS if f not in route.facts]
        if phase is Phase.HEALTHY:
            # The right passage first (now and then second), then neighbours from the same topic.
            others = rng.sample(same_topic, self._top_k - 1)
            ranked = [fact, *others]
            if rng.random() < 0.15:
                ranked[0], ranked[1] = ranked[1], ranked[0]
            response = fact.answer
        elif phase is Phase.IRRELEVANT_FIRST:
            ranked = [*rng.sample(off_topic, self._top_k - 1), fact]
            response = fact.answer
        else:
            ranked = rng.sample(off_topic, self._top_k)
            response = fact.wrong_answer
        # The broken deploy's retriever also scores lower (a changed embedding model): the top
        # score, a free signal on every interaction, drops with the judged scores.
        low, high = (0.55, 0.95) if phase is Phase.HEALTHY else (0.40, 0.75)
        scores = sorted((round(rng.uniform(low, high), 3) for _ in ranked), reverse=True)
        chunks = tuple(
            RetrievedChunk(f.id, f.passage, score) for f, score in zip(ranked, scores, strict=True)
        )
        return SyntheticInteraction(route.service, route.route, fact.question, chunks, response, fact.id)


class SpanEmitter:
    """Records interactions as OpenInference traces with the OpenTelemetry SDK and exports them
    over OTLP/HTTP (protobuf) to `endpoint`, one tracer provider per service."""

    def __init__(self, endpoint: str, *, schedule_delay_millis: int = 200) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        endpoint = endpoint.rstrip("/")
        self.traces_url = endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"
        self._providers: dict[str, TracerProvider] = {}
        self._tracers = {}
        for service in sorted({r.service for r in ROUTES}):
            # Resource(...) rather than Resource.create(): the demo runs inside the agent's process,
            # whose OTEL_RESOURCE_ATTRIBUTES marks spans as the agent's own, to be skipped.
            provider = TracerProvider(
                resource=Resource({"service.name": service, "deployment.environment": "demo"})
            )
            provider.add_span_processor(
                BatchSpanProcessor(
                    OTLPSpanExporter(endpoint=self.traces_url, timeout=10),
                    schedule_delay_millis=schedule_delay_millis,
                    max_queue_size=20_000,
                    max_export_batch_size=512,
                )
            )
            self._providers[service] = provider
            self._tracers[service] = provider.get_tracer("ragpulse.demo")

    def emit(self, interaction: SyntheticInteraction) -> None:
        tracer = self._tracers[interaction.service]
        route = {"http.route": interaction.route}
        with tracer.start_as_current_span("rag.query", attributes=route) as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", interaction.question)
            with tracer.start_as_current_span("retrieve", attributes=route) as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("input.value", interaction.question)
                for i, chunk in enumerate(interaction.chunks):
                    prefix = f"retrieval.documents.{i}.document"
                    retriever.set_attribute(f"{prefix}.id", chunk.id)
                    retriever.set_attribute(f"{prefix}.content", chunk.content)
                    retriever.set_attribute(f"{prefix}.score", chunk.score)
            with tracer.start_as_current_span("llm.generate", attributes=route) as llm:
                llm.set_attribute("openinference.span.kind", "LLM")
                llm.set_attribute("llm.model_name", "demo-llm")
                context = "\n\n".join(c.content for c in interaction.chunks)
                llm.set_attribute("input.value", f"Context:\n{context}\n\nQuestion: {interaction.question}")
                llm.set_attribute("output.value", interaction.response)
            root.set_attribute("output.value", interaction.response)

    def flush(self, timeout_millis: int = 10_000) -> None:
        for provider in self._providers.values():
            provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        for provider in self._providers.values():
            provider.shutdown()
