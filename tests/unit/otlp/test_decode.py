"""OTLP decoding: bodies encoded by the real OpenTelemetry SDK encoders, and OTLP/JSON."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.otlp.decode import UndecodableError, decode_request
from tests.support.otlp import otlp_json, protobuf


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


def test_known_attributes_of_every_kind_decode_as_the_lazy_ones_do() -> None:
    # The decoder takes strings and non-zero doubles without a call; every other kind (and a
    # zero, an empty string) goes the general way. Both must give what `attributes` gives.
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    values = {
        "input.value": "q",
        "output.value": "",
        "retrieval.documents.0.document.score": 0.5,
        "retrieval.documents.1.document.score": 0.0,
        "retrieval.documents.2.document.score": -0.0,
        "retrieval.documents.3.document.score": float("inf"),
        "retrieval.documents.4.document.score": 3,
        "retrieval.documents.5.document.score": 0,
        "retrieval.documents.6.document.score": True,
        "retrieval.documents.7.document.score": False,
        "retrieval.documents.8.document.id": ["a", "b"],
    }
    with provider.get_tracer("tests").start_as_current_span("root") as root:
        root.set_attributes(values)
    (span,) = decode_request(protobuf(memory.get_finished_spans()), "protobuf").spans
    assert span.known is not None and set(span.known) == set(values)
    for key, value in values.items():
        assert span.known[key] == value == span.attributes[key], key
        assert type(span.known[key]) is type(value) is type(span.attributes[key]), key
    assert str(span.known["retrieval.documents.2.document.score"]) == "-0.0"


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


# -- hostile bodies: UndecodableError and nothing else ----------------------------------------------


def _nested_json_value(depth: int) -> str:
    # Built as text: json.dumps itself gives up on a few hundred levels.
    return (
        '{"kvlistValue": {"values": [{"key": "k", "value": ' * depth
        + '{"stringValue": "leaf"}'
        + "}]}}" * depth
    )


def _json_body_with_value(value: str) -> bytes:
    span = (
        '{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", '
        f'"attributes": [{{"key": "deep", "value": {value}}}]}}'
    )
    return ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}]}").encode()


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 2_000 + b"]" * 2_000,  # the ~2 KB message that killed the Kafka consumer
        b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"{" + b'"a":{' * 5_000 + b"}" * 5_001,
    ],
    ids=["2k-arrays", "100k-arrays", "5k-objects"],
)
def test_deeply_nested_json_is_undecodable_not_a_recursion_error(body: bytes) -> None:
    with pytest.raises(UndecodableError, match=r"nested too deeply|not a valid|not an OTLP"):
        decode_request(body, "json")


def test_attribute_values_nested_beyond_the_limit_are_undecodable() -> None:
    from agent.otlp.decode import MAX_VALUE_DEPTH

    ok = decode_request(_json_body_with_value(_nested_json_value(MAX_VALUE_DEPTH)), "json")
    assert len(ok.spans) == 1
    # 200 levels (800 of JSON) parse (under the interpreter's limit) but recurse 3 frames a level.
    for depth in (MAX_VALUE_DEPTH + 1, 200):
        with pytest.raises(UndecodableError, match="nested deeper"):
            decode_request(_json_body_with_value(_nested_json_value(depth)), "json")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_deeply_nested_protobuf_is_undecodable() -> None:
    # Encoded by hand: the protobuf library itself refuses to build a message this deep.
    value = _field(1, b"leaf")  # AnyValue.string_value
    for _ in range(200):
        value = _field(5, _field(1, value))  # AnyValue.array_value(ArrayValue.values=[value])
    span = encode_spans(_sdk_spans()).resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    span += _field(9, _field(1, b"deep") + _field(2, value))  # Span.attributes += KeyValue
    body = _field(1, _field(2, _field(2, span)))  # request.resource_spans.scope_spans.spans
    with pytest.raises(UndecodableError):
        decode_request(body, "protobuf")
    # The same span without the deep attribute decodes.
    assert (
        len(decode_request(_field(1, _field(2, _field(2, span[: -len(value) - 12]))), "protobuf").spans) <= 1
    )


def test_invalid_utf8_in_a_protobuf_string_is_undecodable() -> None:
    request = encode_spans(_sdk_spans())
    body = request.SerializeToString()
    # The scope name "tests" is a string field; make its bytes invalid UTF-8 (same length).
    assert body.count(b"tests") == 1
    with pytest.raises(UndecodableError):
        decode_request(body.replace(b"tests", b"t\xffsts"), "protobuf")


def test_lone_surrogates_in_json_strings_become_replacement_characters() -> None:
    body = _json_body_with_value('{"stringValue": "x"}').replace(
        b'"x"', b'"a\\ud800b\\udfffc \\ud83d\\ude00"'
    )
    body = body.replace(b'"deep"', b'"input.value"')
    span = decode_request(body, "json").spans[0]
    text = span.attributes["input.value"]
    assert text == "a\ufffdb\ufffdc \U0001f600"  # a valid pair is kept
    text.encode("utf-8")  # what every judge, cache key and exporter does with it
    assert span.known is not None and span.known["input.value"] == text


@given(st.binary(max_size=512))
@hyp_settings(max_examples=300, deadline=None)
def test_any_bytes_raise_only_undecodable_error(body: bytes) -> None:
    from agent.otlp.decode import decode_kafka_value

    for encoding in ("otlp_proto", "otlp_json"):
        with contextlib.suppress(UndecodableError):
            decode_kafka_value(body, encoding)


JSON_DOCUMENTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=30,
)


@given(JSON_DOCUMENTS)
@hyp_settings(max_examples=300, deadline=None)
def test_any_json_document_raises_only_undecodable_error(document: object) -> None:
    for wrapped in (document, {"resourceSpans": document}, {"resourceSpans": [{"scopeSpans": document}]},
                    {"resourceSpans": [{"scopeSpans": [{"spans": document}]}]}):  # fmt: skip
        with contextlib.suppress(UndecodableError):
            decode_request(json.dumps(wrapped).encode(), "json")
