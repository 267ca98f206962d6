"""Property tests: arbitrary bytes and arbitrary OTLP structures never escape as exceptions, and
every span is accounted for: received = assembled + skipped + dead-lettered + still buffered."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from prometheus_client import CollectorRegistry

from agent.build import build_agent
from agent.config import load_settings
from agent.otlp import SELF_RESOURCE_ATTRIBUTE
from agent.otlp.decode import DecodedRequest, UndecodableError, decode_request
from tests.support.otlp import Clock, assembler, otlp_json_request

KEYS = [
    "openinference.span.kind", "input.value", "output.value", "input.mime_type", "output.mime_type",
    "retrieval.documents.0.document.content", "retrieval.documents.0.document.score",
    "retrieval.documents.0.document.id", "retrieval.documents.0.document.metadata",
    "retrieval.documents.1.document.content", "reranker.output_documents.0.document.content",
    "reranker.query", "llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.content", "session.id", "user.id",
    "traceloop.span.kind", "traceloop.entity.input", "traceloop.entity.output",
    "gen_ai.operation.name", "gen_ai.input.messages", "gen_ai.output.messages",
    "gen_ai.retrieval.documents", "gen_ai.retrieval.query.text", "gen_ai.prompt.0.content",
    "gen_ai.prompt.0.role", "gen_ai.completion.0.content", "gen_ai.conversation.id",
    "ragpulse.query", "ragpulse.chunks", "ragpulse.chunk_ids", "ragpulse.chunk_scores",
    "ragpulse.response", "http.route",
]  # fmt: skip
TEXTS = [
    "CHAIN", "RETRIEVER", "RERANKER", "LLM", "AGENT", "EMBEDDING", "workflow", "task", "chat",
    "retrieval", "invoke_agent", "vector_db_retrieve", "application/json", "user", "",
    '{"inputs": "q", "outputs": "a"}', '{"documents": [{"page_content": "p", "metadata": {"score": 1}}]}',
    '[{"role": "user", "parts": [{"type": "text", "content": "q"}]}]', '[{"content": "d", "id": 3}]',
    '{"query": 1}', "[", "null", '"quoted"', '{"documents": 5}', '[{"parts": "x"}]',
    # OpenLLMetry's LlamaIndex and Haystack layouts, well and badly formed
    '{"str_or_query_bundle": {"query_str": 5}}', '{"str_or_query_bundle": "q"}',
    '["{\\"node\\": {\\"text\\": \\"t\\", \\"id_\\": 1}, \\"score\\": \\"x\\"}", 3]',
    '[{"node": {"text": "t", "id_": "n"}, "score": 0.5}]', '[{"node": 7}]', '{"nodes": []}',
    '{"kwargs": {"retriever": {"query": "q"}}}', '{"args": [{"r": {"question": 2}}]}',
    '{"answer_builder": {"answers": [{"data": 1, "documents": [{"content": "c", "score": "s"}]}]}}',
    '{"llm": {"replies": [{"_content": [{"text": 2}, "x"]}]}}',
    # Haystack's ChatMessage reprs (OpenInference), Google ADK's events and function responses
    '{"messages": ["ChatMessage(_role=<ChatRole.USER: \'user\'>, _content=[TextContent(text=\'q\')])", '
    '"ChatMessage(_role=<ChatRole.TOOL: \'tool\'>, _content=[ToolCallResult(result=\'d\', origin=5)])"]}',
    '{"messages": ["ChatMessage(_role=<ChatRole.USER: \'user\'>, _content=[TextContent(text=\'a)]"]}',
    '{"new_message": {"parts": [{"text": 3}, "x"]}}', '{"content": {"parts": [{"text": "a"}]}}',
    '{"id": 1, "name": "search", "response": {"result": ["x"]}}',
]  # fmt: skip

JSON_KEYS = ["resourceSpans", "scopeSpans", "spans", "attributes", "traceId", "spanId", "key", "value",
             "stringValue", "intValue"]  # fmt: skip
ids_16 = st.sampled_from([bytes([1] * 16), bytes([2] * 16), b"", bytes(16), b"\x01\x02"])
ids_8 = st.sampled_from([bytes([i] * 8) for i in range(1, 6)] + [b"", b"\x07"])
scalars = st.one_of(
    st.builds(lambda s: AnyValue(string_value=s), st.sampled_from(TEXTS) | st.text(max_size=20)),
    st.builds(lambda i: AnyValue(int_value=i), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda f: AnyValue(double_value=f), st.floats(allow_nan=True, allow_infinity=True)),
    st.builds(lambda b: AnyValue(bool_value=b), st.booleans()),
    st.builds(lambda b: AnyValue(bytes_value=b), st.binary(max_size=8)),
    st.just(AnyValue()),
)


def _array(values: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(values)
    return value


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
    return value


any_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.builds(_array, st.lists(inner, max_size=3)),
        st.builds(_kvlist, st.lists(st.tuples(st.sampled_from(["content", "role", "x"]), inner), max_size=3)),
    ),
    max_leaves=6,
)
attributes = st.lists(
    st.builds(lambda k, v: KeyValue(key=k, value=v), st.sampled_from(KEYS) | st.text(max_size=8), any_values),
    max_size=8,
)


@st.composite
def spans(draw: st.DrawFn) -> PbSpan:
    span = PbSpan(
        trace_id=draw(ids_16),
        span_id=draw(ids_8),
        parent_span_id=draw(ids_8),
        name=draw(
            st.sampled_from(["root", "retrieve", "llm", "", "haystack_pipeline.workflow"])
            | st.text(max_size=5)
        ),
        start_time_unix_nano=draw(st.integers(0, 10)),
        end_time_unix_nano=draw(st.integers(0, 10)),
    )
    span.attributes.extend(draw(attributes))
    for _ in range(draw(st.integers(0, 2))):
        event = span.events.add(name=draw(st.sampled_from(["db.query.result", "gen_ai.choice", "x"])))
        event.attributes.extend(draw(attributes))
    return span


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        resource_spans = ResourceSpans()
        if draw(st.booleans()):
            resource_spans.resource.attributes.add(key=SELF_RESOURCE_ATTRIBUTE).value.string_value = "true"
        resource_spans.resource.attributes.add(key="service.name").value.CopyFrom(draw(scalars))
        scope_spans = ScopeSpans()
        scope_spans.spans.extend(draw(st.lists(spans(), max_size=6)))
        resource_spans.scope_spans.append(scope_spans)
        request.resource_spans.append(resource_spans)
    return request


bodies = st.one_of(
    st.tuples(st.just("protobuf"), st.binary(max_size=200)),
    st.tuples(st.just("json"), st.binary(max_size=200)),
    st.tuples(st.just("json"), st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(JSON_KEYS), inner, max_size=3),
        max_leaves=10,
    ).map(lambda doc: json.dumps(doc).encode())),
    st.tuples(st.just("protobuf"), requests().map(lambda r: r.SerializeToString())),
    st.tuples(st.just("json"), requests().map(otlp_json_request)),
)  # fmt: skip


def decode(body: bytes, encoding: str) -> DecodedRequest | None:
    try:
        return decode_request(body, encoding)  # type: ignore[arg-type]
    except UndecodableError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bodies, max_size=8))
def test_the_assembler_accounts_for_every_span_under_tight_bounds(batch: list[tuple[str, bytes]]) -> None:
    clock = Clock()
    a = assembler(wait=5.0, max_traces=2, max_spans_per_trace=3, max_chunk_bytes=64, clock=clock)
    received = assembled = skipped = rejected = 0
    for step, (encoding, body) in enumerate(batch):
        decoded = decode(body, encoding)
        if decoded is None:
            continue
        received += len(decoded.spans) + len(decoded.rejected)
        rejected += len(decoded.rejected)
        clock.now = float(step)
        for out in (a.add(decoded.spans), a.expire(clock.now)):
            assembled += out.assembled_spans
            skipped += sum(out.skipped.values())
            assert all(i.query and i.chunks is not None for i in out.interactions)
            assert received == assembled + skipped + rejected + out.buffered_spans
    out = a.flush()
    assembled += out.assembled_spans
    skipped += sum(out.skipped.values())
    assert out.buffered_spans == 0 and out.buffered_traces == 0
    assert received == assembled + skipped + rejected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bodies, max_size=6))
def test_the_pipelines_counters_account_for_every_span_and_body(batch: list[tuple[str, bytes]]) -> None:
    registry = CollectorRegistry()
    pipeline = build_agent(load_settings(environ={}), registry).pipeline
    undecodable = 0
    for encoding, body in batch:
        decoded = decode(body, encoding)
        if decoded is None:
            undecodable += 1
            pipeline.dead_letter("undecodable", "test body")
        else:
            pipeline.accept(decoded, "test")

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    skipped = sum(
        s.value for m in registry.collect() if m.name == "ragpulse_spans_skipped" for s in m.samples
    )
    assert value("ragpulse_spans_received_total", source="test") == (
        value("ragpulse_spans_assembled_total")
        + skipped
        + value("ragpulse_dead_letters_total", reason="invalid_id")
        + value("ragpulse_assembler_buffered_spans")
    )
    assert value("ragpulse_dead_letters_total", reason="undecodable") == undecodable
