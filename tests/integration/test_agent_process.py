"""`ragpulse run` as a real process: spans from the real OpenTelemetry SDK exporter in, /metrics out."""

from __future__ import annotations

import gzip
import json
import signal
import time
from collections.abc import Iterator

import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agent_process import AgentProcess
from tests.support.net import http_post, port_is_free
from tests.support.spans import openinference_single_span

pytestmark = pytest.mark.integration

RESPONSE = "The capital of France is Paris."
QUERY = "What is the capital of France?"


def useful(i: int) -> str:
    return f"Paris is the capital of France and its largest city (source {i})."


def useless(i: int) -> str:
    return f"Bananas grow in tropical climates and are rich in potassium (note {i})."


# Verdict patterns from the literature's worked examples, with their context precision.
PATTERNS = {(0, 1, 1, 0, 0): 0.5833333, (1, 1, 0, 1, 0): 0.9166667, (0, 0, 1, 1, 1): 0.4777778}


def chunks_for(pattern: tuple[int, ...], salt: int) -> list[str]:
    return [useful(salt * 10 + i) if v else useless(salt * 10 + i) for i, v in enumerate(pattern)]


@pytest.fixture
def agent() -> Iterator[AgentProcess]:
    # One metric, so that judge call and cache counts below are exact.
    process = AgentProcess(env={"RAGPULSE_METRICS": "context_precision"})
    try:
        process.wait_ready()
        yield process
    finally:
        process.kill()


def export_interactions(agent: AgentProcess, *, compression: Compression = Compression.NoCompression) -> None:
    """Record the three PATTERNS interactions with the real SDK and export them over OTLP/HTTP."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests")
    for salt, pattern in enumerate(PATTERNS):
        openinference_single_span(tracer, query=QUERY, chunks=chunks_for(pattern, salt), response=RESPONSE)
    exporter = OTLPSpanExporter(endpoint=agent.traces_url, compression=compression)
    assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    exporter.shutdown()


def test_spans_from_the_sdk_exporter_are_scored_and_exported(agent: AgentProcess) -> None:
    export_interactions(agent)
    labels = {"service": "rag-app", "route": "rag.query", "metric": "context_precision"}
    scrape = agent.wait_for(lambda s: s.value("ragpulse_score_count", **labels) == 3)

    assert scrape.value("ragpulse_spans_received_total", source="otlp_http") == 3
    assert scrape.value("ragpulse_interactions_total", service="rag-app", route="rag.query") == 3
    assert scrape.value("ragpulse_interactions_sampled_total", service="rag-app", route="rag.query") == 3
    assert scrape.value("ragpulse_evaluations_total", outcome="ok", **labels) == 3
    assert scrape.value("ragpulse_score_count", **labels) == 3
    assert scrape.value("ragpulse_score_sum", **labels) == pytest.approx(sum(PATTERNS.values()), abs=1e-6)
    # 0.4778 falls in le=0.5, 0.5833 in le=0.6, 0.9167 in le=1.0
    assert scrape.value("ragpulse_score_bucket", le="0.4", **labels) == 0
    assert scrape.value("ragpulse_score_bucket", le="0.5", **labels) == 1
    assert scrape.value("ragpulse_score_bucket", le="0.6", **labels) == 2
    assert scrape.value("ragpulse_score_bucket", le="0.9", **labels) == 2
    assert scrape.value("ragpulse_score_bucket", le="1.0", **labels) == 3
    assert scrape.value("ragpulse_sample_ratio", service="rag-app") == 1.0
    assert scrape.value("ragpulse_judge_cache_misses_total") == 15
    assert scrape.value("ragpulse_judge_requests_total", model="lexical", outcome="ok") == 3

    # The same interactions again (gzip this time): every verdict comes from the cache.
    export_interactions(agent, compression=Compression.Gzip)
    scrape = agent.wait_for(lambda s: s.value("ragpulse_score_count", **labels) == 6)
    assert scrape.value("ragpulse_score_sum", **labels) == pytest.approx(2 * sum(PATTERNS.values()), abs=1e-6)
    assert scrape.value("ragpulse_judge_cache_hits_total") == 15
    assert scrape.value("ragpulse_judge_requests_total", model="lexical", outcome="ok") == 3


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-protobuf", b"\x0a\x05abc"),  # field 1 claims 5 bytes, 3 follow
        ("application/json", b'{"resourceSpans": "not a list of objects"}'),
        ("application/json", b"{not json"),
    ],
)
def test_malformed_body_is_a_400_and_a_dead_letter(
    agent: AgentProcess, content_type: str, body: bytes
) -> None:
    status, reply, headers = http_post(agent.traces_url, body, {"Content-Type": content_type})
    assert status == 400
    assert headers["Content-Type"].startswith(content_type)
    if content_type == "application/json":
        message = json.loads(reply)
        assert message["code"] == code_pb2.INVALID_ARGUMENT
        assert "not" in message["message"]
    else:
        message = status_pb2.Status.FromString(reply)
        assert message.code == code_pb2.INVALID_ARGUMENT
        assert "protobuf" in message.message
    assert (
        agent.wait_for(lambda s: s.value("ragpulse_dead_letters_total", reason="undecodable") == 1).value(
            "ragpulse_dead_letters_total", reason="undecodable"
        )
        == 1
    )

    # The agent keeps serving.
    export_interactions(agent)
    scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") == 3)
    assert scrape.value("ragpulse_spans_received_total", source="otlp_http") == 3


def _json_span(trace_id: str, span_id: str) -> dict:
    attrs = {
        "openinference.span.kind": "CHAIN",
        "input.value": QUERY,
        "output.value": RESPONSE,
        "retrieval.documents.0.document.content": useful(99),
    }
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "json.query",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000500000000",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


def test_json_body_with_a_bad_span_gets_partial_success(agent: AgentProcess) -> None:
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-app"}}]},
                "scopeSpans": [
                    {"spans": [_json_span("5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"),
                               _json_span("not-hex", "eee19b7ec3c1b174")]}
                ],
            }
        ]
    }  # fmt: skip
    status, reply, _ = http_post(
        agent.traces_url, json.dumps(request).encode(), {"Content-Type": "application/json"}
    )
    assert status == 200
    partial = json.loads(reply)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert partial["errorMessage"].startswith("1 span(s) rejected")
    scrape = agent.wait_for(lambda s: s.total("ragpulse_score_count") == 1)
    assert scrape.value("ragpulse_spans_received_total", source="otlp_http") == 2
    assert scrape.value("ragpulse_dead_letters_total", reason="invalid_id") == 1
    # A single useful chunk: context precision 1.0.
    assert scrape.value("ragpulse_score_sum", service="json-app", route="json.query") == pytest.approx(1.0)


def test_gzip_protobuf_without_rejections_gets_an_empty_response(agent: AgentProcess) -> None:
    status, reply, headers = http_post(
        agent.traces_url,
        gzip.compress(b""),
        {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
    )
    assert status == 200
    assert headers["Content-Type"] == "application/x-protobuf"
    assert ExportTraceServiceResponse.FromString(reply) == ExportTraceServiceResponse()


def test_unsupported_content_type_is_415(agent: AgentProcess) -> None:
    status, reply, _ = http_post(agent.traces_url, b"hello", {"Content-Type": "text/plain"})
    assert status == 415
    assert "application/x-protobuf" in status_pb2.Status.FromString(reply).message


def test_embedded_default_scores_the_lexical_judges_default_and_says_why_once() -> None:
    agent = AgentProcess()
    try:
        agent.wait_ready()
        export_interactions(agent)
        # The lexical judge measures answer relevancy at chance (docs/judges.md): off by default.
        metrics = ("context_precision", "context_relevancy", "faithfulness")
        scrape = agent.wait_for(lambda s: s.total("ragpulse_evaluations_total") == 9)
        for metric in metrics:
            labels = {"service": "rag-app", "route": "rag.query", "metric": metric}
            assert scrape.value("ragpulse_evaluations_total", outcome="ok", **labels) == 3, metric
            mean = scrape.value("ragpulse_score_sum", **labels) / 3
            assert 0.0 <= mean <= 1.0
        assert scrape.total("ragpulse_score_count", metric="answer_relevancy") == 0
        # The metrics' chunk and claim questions are one combined question: one judge call per
        # interaction (agent/judges/base.py, assess_interaction).
        assert scrape.value("ragpulse_judge_requests_total", model="lexical", outcome="ok") == 3
        said = [line for line in agent.log().splitlines() if "answer_relevancy is off" in line]
        assert len(said) == 1 and " INFO agent.build: " in said[0], agent.log()
    finally:
        agent.kill()
    # What the line says to set turns the metric on: all four are scored, with one warning.
    told = said[0].rsplit("RAGPULSE_METRICS=", 1)[1].split(" ")[0]
    agent = AgentProcess(env={"RAGPULSE_METRICS": told})
    try:
        agent.wait_ready()
        export_interactions(agent)
        scrape = agent.wait_for(lambda s: s.total("ragpulse_evaluations_total") == 12)
        labels = {"service": "rag-app", "route": "rag.query", "metric": "answer_relevancy"}
        assert scrape.value("ragpulse_evaluations_total", outcome="ok", **labels) == 3
        warned = [line for line in agent.log().splitlines() if "answer_relevancy says little" in line]
        assert len(warned) == 1 and " WARNING agent.build: " in warned[0], agent.log()
    finally:
        agent.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_signal(signum: int) -> None:
    agent = AgentProcess()
    try:
        agent.wait_ready()
        export_interactions(agent)
        agent.wait_for(lambda s: s.total("ragpulse_score_count", metric="context_precision") == 3)
        assert not port_is_free(agent.otlp_port)
        assert agent.stop(signum) == 0, agent.log()
    finally:
        agent.kill()
    assert port_is_free(agent.otlp_port)
    assert port_is_free(agent.metrics_port)
    assert "stopped" in agent.log()


def test_bad_configuration_fails_fast_naming_the_setting() -> None:
    agent = AgentProcess(env={"RAGPULSE_SAMPLE_RATE": "1.5"})
    try:
        assert agent.process.wait(30) == 2
    finally:
        agent.kill()
    assert "sample_rate" in agent.log() and "RAGPULSE_SAMPLE_RATE" in agent.log()


def test_a_judge_outage_pauses_intake_and_defers_instead_of_recording_errors() -> None:
    from tests.support.llm_server import FakeLLMServer
    from tests.support.net import http_get

    with FakeLLMServer() as judge:
        judge.fail_always("500")
        agent = AgentProcess(
            env={
                "RAGPULSE_JUDGE_MODEL": "openai/judge-test",
                "RAGPULSE_JUDGE_API_BASE": judge.api_base,
                "RAGPULSE_JUDGE_API_KEY": "test-key",
                "RAGPULSE_METRICS": "context_precision",
                "RAGPULSE_JUDGE_MAX_RETRIES": "0",
                "RAGPULSE_JUDGE_BREAKER_FAILURES": "2",
                "RAGPULSE_JUDGE_BREAKER_COOLDOWN_SECONDS": "1",
                "RAGPULSE_JUDGE_SELF_CHECK": "false",
            }
        )
        try:
            agent.wait_ready(timeout=60)
            export_interactions(agent)
            labels = {"service": "rag-app", "route": "rag.query", "metric": "context_precision"}
            scrape = agent.wait_for(
                lambda s: (
                    s.value("ragpulse_intake_paused", reason="judge_unavailable") == 1
                    and s.total("ragpulse_evaluations_deferred_total") >= 1
                ),
                timeout=60,
            )
            assert scrape.value("ragpulse_intake_paused", reason="judge_unavailable") == 1
            # A judge failure is never a score, and a retryable one is not an error either.
            assert scrape.value("ragpulse_evaluations_total", outcome="error", **labels) is None
            assert scrape.value("ragpulse_score_count", **labels) in (None, 0.0)
            # The breaker lets a probe through every second (cooldown 1 s); while it is open the
            # agent is not ready. Poll, so a probe in flight at the first look does not decide.
            deadline = time.monotonic() + 30
            while True:
                status, body = http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz")
                if status == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert status == 503 and b"judge: not ready" in body and b"source: ok" in body
            # Senders are told to come back later.
            status, _, headers = http_post(agent.traces_url, b"", {"Content-Type": "application/x-protobuf"})
            assert status == 503 and int(headers["Retry-After"]) >= 1

            judge.fail_always(None)
            scrape = agent.wait_for(lambda s: s.value("ragpulse_score_count", **labels) == 3, timeout=60)
            assert scrape.value("ragpulse_score_count", **labels) == 3
            assert scrape.value("ragpulse_evaluations_total", outcome="error", **labels) is None
            assert scrape.value("ragpulse_intake_paused", reason="judge_unavailable") == 0
            assert http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz")[0] == 200
            export_interactions(agent)
            scrape = agent.wait_for(lambda s: s.value("ragpulse_score_count", **labels) == 6)
            assert scrape.value("ragpulse_score_count", **labels) == 6
            assert agent.stop() == 0
        finally:
            agent.kill()
