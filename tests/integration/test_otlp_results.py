"""`ragpulse run` sends each evaluated interaction as OTLP/HTTP to a trace backend (no Kafka).

The backend is a real HTTP server in the test that decodes ExportTraceServiceRequest with
opentelemetry-proto, as a Collector's otlphttp receiver does; it can refuse requests with a
given status to check that outages are retried and permanent rejections are not.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.judges.local import LexicalJudge
from agent.metrics import STREAMING_METRICS
from agent.model import Chunk, RagInteraction
from tests.support.agent_process import AgentProcess
from tests.support.net import http_post
from tests.support.otlp import protobuf
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

QUERY = "Which river flows through Paris?"
CHUNKS = ["The Seine flows through the heart of Paris.", "Lyon sits on the Rhone."]
RESPONSE = "The Seine flows through Paris."


class TraceBackend:
    """An OTLP/HTTP traces endpoint: records decoded requests; `refuse` queues error statuses."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.refused = 0
        self.refuse: deque[int] = deque()
        self.lock = threading.Lock()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with backend.lock:
                    status = backend.refuse.popleft() if backend.refuse else 200
                    if status == 200:
                        assert self.path == "/v1/traces"
                        assert self.headers["Content-Type"] == "application/x-protobuf"
                        request = ExportTraceServiceRequest()
                        request.ParseFromString(body)
                        backend.requests.append(request)
                    else:
                        backend.refused += 1
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> TraceBackend:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def spans(self) -> list[Any]:
        with self.lock:
            return [
                s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans
            ]


def send_interactions(agent: AgentProcess, count: int) -> list[Any]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for _ in range(count):
        openinference_single_span(tracer, query=QUERY, chunks=CHUNKS, response=RESPONSE)
    spans = list(memory.get_finished_spans())
    status, _, _ = http_post(agent.traces_url, protobuf(spans), {"Content-Type": "application/x-protobuf"})
    assert status == 200
    return spans


def expected_scores() -> dict[str, float]:
    interaction = RagInteraction(
        "0" * 32, "1" * 16, QUERY, tuple(Chunk(c) for c in CHUNKS), RESPONSE, "s", "r"
    )

    async def score() -> dict[str, float]:
        judge = LexicalJudge()
        results = [await m().evaluate(interaction, judge) for m in STREAMING_METRICS.values()]
        return {r.metric: r.value for r in results if r.value is not None}

    return asyncio.run(score())


def _attributes(items: Any) -> dict[str, Any]:
    values = {}
    for kv in items:
        field = kv.value.WhichOneof("value")
        values[kv.key] = getattr(kv.value, field)
    return values


def test_results_reach_an_otlp_backend_beside_the_scored_span() -> None:
    with TraceBackend() as backend:
        backend.refuse.extend([503, 503])  # the backend is down at first: retried, not lost
        # Every streaming metric, answer relevancy too (the lexical judge's default leaves it out):
        # each interaction's span carries one result event per metric.
        agent = AgentProcess(
            env={
                "RAGPULSE_RESULTS_OTLP_ENDPOINT": backend.endpoint,
                "RAGPULSE_METRICS": ",".join(STREAMING_METRICS),
            }
        )
        try:
            agent.wait_ready()
            sent = send_interactions(agent, 3)
            agent.wait_for(lambda s: len(backend.spans()) >= 3, timeout=60)
            scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") >= 12, timeout=30)
        finally:
            assert agent.stop() == 0
    received = backend.spans()
    assert backend.refused == 2
    assert len(received) == 3  # each interaction once: a refused request was retried, not doubled
    assert {s.parent_span_id.hex() for s in received} == {
        s.context.span_id.to_bytes(8, "big").hex() for s in sent
    }
    assert {s.trace_id.hex() for s in received} == {
        s.context.trace_id.to_bytes(16, "big").hex() for s in sent
    }
    expected = expected_scores()
    for span in received:
        assert span.name == "ragpulse.evaluation"
        events = [_attributes(e.attributes) for e in span.events if e.name == "gen_ai.evaluation.result"]
        scores = {e["gen_ai.evaluation.name"]: e["gen_ai.evaluation.score.value"] for e in events}
        assert scores == pytest.approx(expected)
        attributes = _attributes(span.attributes)
        assert attributes["ragpulse.service"] == "shop"
        assert "input.value" not in attributes  # no text unless results_include_text
    resource = _attributes(backend.requests[0].resource_spans[0].resource.attributes)
    assert resource["ragpulse.agent"] is True
    assert scrape.total("ragpulse_export_failures_total") == 2  # each refusal counted, then retried


def test_permanent_rejection_is_counted_not_retried_forever() -> None:
    with TraceBackend() as backend:
        backend.refuse.extend([400])
        agent = AgentProcess(env={"RAGPULSE_RESULTS_OTLP_ENDPOINT": f"{backend.endpoint}/v1/traces"})
        failures = "ragpulse_export_failures_total"
        try:
            agent.wait_ready()
            send_interactions(agent, 2)
            agent.wait_for(lambda s: s.total(failures) >= 1 and len(backend.spans()) >= 1, timeout=60)
            # A failed export is retried a second later (Delivery.busy_retry_seconds): three seconds
            # without another request mean the rejected one is done, not waiting to be sent again.
            time.sleep(3)
            scrape = agent.scrape()
        finally:
            assert agent.stop() == 0
    assert backend.refused == 1
    assert len(backend.spans()) == 1  # the rejected one is not re-sent; the other arrived
    assert scrape.value(failures, exporter="OtlpResultsExporter") == 1
    assert "rejected results with 400" in agent.log()


def test_results_name_each_document_by_the_configured_metadata_key() -> None:
    """documents_key=source: each result lists its documents by source (else id) with verdicts."""
    with TraceBackend() as backend:
        agent = AgentProcess(
            env={
                "RAGPULSE_RESULTS_OTLP_ENDPOINT": backend.endpoint,
                "RAGPULSE_DOCUMENTS_KEY": "source",
                "RAGPULSE_METRICS": "context_precision",
            }
        )
        try:
            agent.wait_ready()
            memory = InMemorySpanExporter()
            provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
            provider.add_span_processor(SimpleSpanProcessor(memory))
            metadata = {"source": "guides/seine.md", "page": 4}  # the second document has none
            openinference_single_span(
                provider.get_tracer("test"), query=QUERY, chunks=CHUNKS, response=RESPONSE,
                attributes={"retrieval.documents.0.document.metadata": json.dumps(metadata)},
            )  # fmt: skip
            body = protobuf(list(memory.get_finished_spans()))
            assert http_post(agent.traces_url, body, {"Content-Type": "application/x-protobuf"})[0] == 200
            agent.wait_for(lambda s: len(backend.spans()) >= 1, timeout=60)
        finally:
            assert agent.stop() == 0
    (span,) = backend.spans()
    documents = {k: v for k, v in _attributes(span.attributes).items() if k.startswith("ragpulse.documents.")}
    assert documents == {
        "ragpulse.documents.0.document": "guides/seine.md",
        "ragpulse.documents.0.id": "doc-0",
        "ragpulse.documents.0.metadata.source": "guides/seine.md",
        "ragpulse.documents.0.useful": True,
        "ragpulse.documents.1.document": "doc-1",
        "ragpulse.documents.1.id": "doc-1",
        "ragpulse.documents.1.useful": False,
    }
