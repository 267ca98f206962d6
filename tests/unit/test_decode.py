"""OTLP decoding: bodies encoded by the real OpenTelemetry SDK encoders, and OTLP/JSON."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.otlp.decode import UndecodableError, decode_request
from tests.otlp_support import otlp_json, protobuf


def _sdk_spans():  # type: ignore[no-untyped-def]
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=SdkResource.create({"service.name": "shop", "deployment.environment": "prod"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests", "1.0")
    with tracer.start_as_current_span("root") as root:
        root.set_attribute("input.value", "q")
        root.set_attribute("llm.token_count.total", 1234567890123)
        root.set_attribute("retrieval.documents.0.document.score", 0.75)
        root.set_attribute("flag", True)
        root.set_attribute("tags", ["a", "b"])
        root.add_event("feedback", {"score": -1})
        with tracer.start_as_current_span("child"):
            pass
    return memory.get_finished_spans()


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_sdk_spans_decode_field_by_field(encoding: str) -> None:
    spans = _sdk_spans()
    body = protobuf(spans) if encoding == "protobuf" else otlp_json(spans)
    decoded = decode_request(body, encoding)  # type: ignore[arg-type]
    assert decoded.rejected == []
    by_name = {s.name: s for s in decoded.spans}
    root_sdk = next(s for s in spans if s.name == "root")
    root, child = by_name["root"], by_name["child"]

    assert root.trace_id == format(root_sdk.context.trace_id, "032x")
    assert root.span_id == format(root_sdk.context.span_id, "016x")
    assert root.parent_span_id is None
    assert child.parent_span_id == root.span_id
    assert child.trace_id == root.trace_id
    assert root.start_time_unix_nano == root_sdk.start_time
    assert root.end_time_unix_nano == root_sdk.end_time
    assert root.attributes["input.value"] == "q"
    assert root.attributes["llm.token_count.total"] == 1234567890123
    assert root.attributes["retrieval.documents.0.document.score"] == 0.75
    assert root.attributes["flag"] is True
    assert root.attributes["tags"] == ["a", "b"]
    assert root.resource.service_name == "shop"
    assert root.resource.attributes["deployment.environment"] == "prod"
    assert root.scope_name == "tests"
    (event,) = root.events
    assert event.name == "feedback" and event.attributes == {"score": -1}


def test_generic_protobuf_json_parse_would_corrupt_hex_ids() -> None:
    # Why decode.py parses OTLP/JSON itself: json_format reads ids as base64.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    body = otlp_json(_sdk_spans())
    ours = decode_request(body, "json").spans[0].trace_id
    generic = json_format.Parse(body, ExportTraceServiceRequest()).resource_spans[0].scope_spans[0].spans[0]
    assert generic.trace_id.hex() != ours


def test_json_accepts_numbers_for_64_bit_fields_and_kvlists() -> None:
    body = {
        "resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "5B8EFFF798038103D269B633813FC60C",
            "spanId": "eee19b7ec3c1b174",
            "name": "n",
            "startTimeUnixNano": 1700000000000000000,
            "endTimeUnixNano": "1700000000000000001",
            "attributes": [
                {"key": "i", "value": {"intValue": "42"}},
                {"key": "kv", "value": {"kvlistValue": {"values": [
                    {"key": "x", "value": {"doubleValue": 1.5}}]}}},
                {"key": "b", "value": {"bytesValue": base64.b64encode(b"\x00\x01").decode()}},
                {"key": "empty", "value": {}},
            ],
        }]}]}]
    }  # fmt: skip
    (span,) = decode_request(json.dumps(body).encode(), "json").spans
    assert span.trace_id == "5b8efff798038103d269b633813fc60c"
    assert span.start_time_unix_nano == 1700000000000000000
    assert span.attributes == {"i": 42, "kv": {"x": 1.5}, "b": b"\x00\x01", "empty": None}
    assert span.resource.service_name == "unknown_service"


@pytest.mark.parametrize(
    ("trace_id", "span_id"),
    [("", "eee19b7ec3c1b174"), ("00000000000000000000000000000000", "eee19b7ec3c1b174"),
     ("5b8efff798038103d269b633813fc60c", "xyz"), ("zz8efff798038103d269b633813fc60c", "eee19b7ec3c1b174")],
)  # fmt: skip
def test_json_spans_with_bad_ids_are_rejected_not_fatal(trace_id: str, span_id: str) -> None:
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": trace_id, "spanId": span_id}]}]}]}
    decoded = decode_request(json.dumps(body).encode(), "json")
    assert decoded.spans == [] and decoded.rejected == ["invalid_id"]


def test_protobuf_spans_with_bad_ids_are_rejected() -> None:
    request = encode_spans(_sdk_spans())
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01\x02"
    decoded = decode_request(request.SerializeToString(), "protobuf")
    assert len(decoded.spans) == 1 and decoded.rejected == ["invalid_id"]


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("protobuf", b"\x0a\x05abc"),
        ("protobuf", b"\xff\xff\xff"),
        ("json", b"[1, 2]"),
        ("json", b"\xff\xfe"),
        ("json", b'{"resourceSpans": [{"scopeSpans": [{"spans": [{'
                 b'"traceId": "5b8efff798038103d269b633813fc60c", '
                 b'"spanId": "eee19b7ec3c1b174", "startTimeUnixNano": "soon"}]}]}]}'),
    ],
)  # fmt: skip
def test_undecodable_bodies_raise_a_clear_error(encoding: str, body: bytes) -> None:
    with pytest.raises(UndecodableError, match=r"ExportTraceServiceRequest|JSON"):
        decode_request(body, encoding)  # type: ignore[arg-type]


def test_empty_bodies_are_empty_requests() -> None:
    assert decode_request(b"", "protobuf").spans == []
    assert decode_request(b"{}", "json").spans == []
