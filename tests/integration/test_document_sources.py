"""`ragpulse run` with documents_key=source: the documents behind low scores are named by the
source in their metadata, from spans the real OpenTelemetry SDK exports over OTLP/HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agent_process import AgentProcess
from tests.support.net import Scrape
from tests.support.otlp import set_all
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

QUERY = "What is the capital of France?"
RESPONSE = "The capital of France is Paris."
USEFUL_SOURCE = "handbook/france.md"
USELESS_SOURCE = "archive/bananas.pdf"
# Per answer, which of its five chunks are useful (the lexical judge agrees: tests/integration/
# test_agent_process.py scores the same texts): 8 useful, 7 useless chunks in all.
PATTERNS = [(0, 1, 1, 0, 0), (1, 1, 0, 1, 0), (0, 0, 1, 1, 1)]


def chunk_text(useful: bool, n: int) -> str:
    if useful:
        return f"Paris is the capital of France and its largest city (section {n})."
    return f"Bananas grow in tropical climates and are rich in potassium (note {n})."


def export(agent: AgentProcess, record, service: str = "rag-app") -> None:  # type: ignore[no-untyped-def]
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    record(provider.get_tracer("openinference.instrumentation.langchain"))
    exporter = OTLPSpanExporter(endpoint=agent.traces_url)
    assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    exporter.shutdown()


def answers(tracer) -> None:  # type: ignore[no-untyped-def]
    """CHAIN → RETRIEVER → LLM traces, as the LangChain OpenInference instrumentor writes them:
    each document's metadata is a JSON string with its `source` (and other keys)."""
    for salt, pattern in enumerate(PATTERNS):
        with tracer.start_as_current_span("RunnableSequence") as root:
            set_all(
                root, {"openinference.span.kind": "CHAIN", "input.value": QUERY, "output.value": RESPONSE}
            )
            with tracer.start_as_current_span("VectorStoreRetriever") as retriever:
                set_all(retriever, {"openinference.span.kind": "RETRIEVER", "input.value": QUERY})
                for i, useful in enumerate(pattern):
                    base = f"retrieval.documents.{i}."
                    metadata = {"source": USEFUL_SOURCE if useful else USELESS_SOURCE, "page": i}
                    if salt == 2 and i == 4:
                        metadata = {"page": i}  # no source: named by its id
                    set_all(
                        retriever,
                        {
                            base + "document.id": f"chunk-{salt}-{i}",
                            base + "document.content": chunk_text(bool(useful), salt * 10 + i),
                            base + "document.metadata": json.dumps(metadata),
                        },
                    )
            with tracer.start_as_current_span("ChatOpenAI") as llm:
                set_all(
                    llm,
                    {
                        "openinference.span.kind": "LLM",
                        "llm.input_messages.0.message.role": "user",
                        "llm.input_messages.0.message.content": QUERY,
                        "llm.output_messages.0.message.role": "assistant",
                        "llm.output_messages.0.message.content": RESPONSE,
                    },
                )


def tick(tracer) -> None:  # type: ignore[no-untyped-def]
    """One interaction of another service: an export after the summary's refresh interval
    rewrites the exported top documents."""
    openinference_single_span(tracer, query="q", chunks=["c"], response="r", name="tick")


@pytest.fixture
def agent() -> Iterator[AgentProcess]:
    process = AgentProcess(env={"RAGPULSE_METRICS": "context_precision", "RAGPULSE_DOCUMENTS_KEY": "source"})
    try:
        process.wait_ready()
        yield process
    finally:
        process.kill()


def documents(scrape: Scrape) -> dict[tuple[str, str], float]:
    return {
        (labels["verdict"], labels["document"]): value
        for name, labels, value in scrape.samples
        if name == "ragpulse_document_verdicts" and labels.get("service") == "rag-app"
    }


def test_document_verdicts_are_named_by_the_source_in_the_documents_metadata(agent: AgentProcess) -> None:
    export(agent, answers)
    labels = {"service": "rag-app", "route": "RunnableSequence", "metric": "context_precision"}
    agent.wait_for(lambda s: s.value("ragpulse_score_count", **labels) == 3)
    expected = {("useful", USEFUL_SOURCE): 7, ("useful", "chunk-2-4"): 1, ("useless", USELESS_SOURCE): 7}
    # The summary rewrites its series at most every 5 seconds: tick until the rewrite shows them.
    deadline = time.monotonic() + 30
    while documents(scrape := agent.scrape()) != expected:
        assert time.monotonic() < deadline, documents(scrape)
        export(agent, tick, service="tick-app")
        time.sleep(0.5)
    # Fifteen chunks with fifteen ids are three series, keyed by source: the counts of one file's
    # chunks add up, and only the chunk without a source is named by its id.
    assert sum(documents(scrape).values()) == 15
