"""RAG interactions recorded with the real OpenTelemetry SDK in the instrumentation conventions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.otlp import Recorder, set_all


def openinference_single_span(
    tracer,  # type: ignore[no-untyped-def]
    *,
    query: str,
    chunks: Iterable[str],
    response: str,
    name: str = "rag.query",
    attributes: Mapping[str, object] | None = None,
) -> None:
    """Record one OpenInference single-span interaction with the real SDK tracer."""
    with tracer.start_as_current_span(name) as span:
        span.set_attribute("openinference.span.kind", "CHAIN")
        span.set_attribute("input.value", query)
        span.set_attribute("output.value", response)
        for i, chunk in enumerate(chunks):
            span.set_attribute(f"retrieval.documents.{i}.document.id", f"doc-{i}")
            span.set_attribute(f"retrieval.documents.{i}.document.content", chunk)
            span.set_attribute(f"retrieval.documents.{i}.document.score", 1.0 - i / 10)
        for key, value in (attributes or {}).items():
            span.set_attribute(key, value)  # type: ignore[arg-type]


# rag_trace's interaction: a password-reset question over two support documents.
QUERY = "How do I reset my password?"
DOCS = ["Open Settings, then Security, then Reset password.", "Passwords expire every 90 days."]
RESPONSE = "Go to Settings > Security > Reset password."


def hexid(span) -> str:  # type: ignore[no-untyped-def]
    return format(span.get_span_context().span_id, "016x")


def rag_trace(
    recorder: Recorder,
    *,
    route: str | None = None,
    root_name: str = "chain",
    docs: Sequence[str] = tuple(DOCS),
    doc_ids: Sequence[str] = (),
) -> dict[str, str]:
    """CHAIN root → RETRIEVER (`docs` as contents; `doc_ids` as ids alone) → LLM in OpenInference;
    returns span ids by role."""
    tracer = recorder.tracer
    with tracer.start_as_current_span(root_name) as root:
        set_all(root, {"openinference.span.kind": "CHAIN", "input.value": QUERY, "output.value": RESPONSE})
        if route:
            root.set_attribute("http.route", route)
        with tracer.start_as_current_span("retriever") as retriever:
            retriever.set_attribute("openinference.span.kind", "RETRIEVER")
            retriever.set_attribute("input.value", QUERY + " (as retrieved)")
            for i, doc in enumerate(docs):
                retriever.set_attribute(f"retrieval.documents.{i}.document.content", doc)
            for i, doc_id in enumerate(doc_ids):
                retriever.set_attribute(f"retrieval.documents.{i}.document.id", doc_id)
        with tracer.start_as_current_span("llm") as llm:
            set_all(llm, {"openinference.span.kind": "LLM", "output.value": RESPONSE})
    return {"root": hexid(root), "retriever": hexid(retriever), "llm": hexid(llm)}


# record_spans' interactions: chunk usefulness patterns with their context precision (the worked
# examples of the literature), useful chunks about Paris, useless ones about bananas.
PARIS_RESPONSE = "The capital of France is Paris."
USEFUL = "Paris is the capital of France and its largest city ({})."
USELESS = "Bananas grow in tropical climates and are rich in potassium ({})."
PATTERNS = {(0, 1, 1, 0, 0): 0.5833333, (1, 1, 0, 1, 0): 0.9166667, (0, 0, 1, 1, 1): 0.4777778}


def record_spans(count: int, service: str = "kafka-app") -> list[ReadableSpan]:
    """`count` single-span interactions cycling through PATTERNS, recorded by the real SDK."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    patterns = list(PATTERNS)
    for i in range(count):
        pattern = patterns[i % len(patterns)]
        chunks = [(USEFUL if v else USELESS).format(f"{i}.{k}") for k, v in enumerate(pattern)]
        openinference_single_span(
            tracer, query=f"Capital of France? #{i}", chunks=chunks, response=PARIS_RESPONSE
        )
    return list(memory.get_finished_spans())


def capital_of_france() -> list[ReadableSpan]:
    """One OpenInference single-span interaction of service `rag-app`, recorded by the real SDK."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    openinference_single_span(
        provider.get_tracer("tests"),
        query="What is the capital of France?",
        chunks=["Paris is the capital of France."],
        response="The capital of France is Paris.",
    )
    return list(memory.get_finished_spans())
