"""Decode OTLP `ExportTraceServiceRequest` bodies, protobuf or JSON, into `Span` values.

JSON follows the OTLP/JSON rules rather than protobuf's generic JSON mapping: trace and span ids
are hex strings (protobuf's `json_format.Parse` would base64-decode them into wrong bytes),
64-bit integers arrive as strings or numbers, field names are lowerCamelCase.

Protobuf spans convert only the attributes the conventions read (`Span.known`, keys under
`KNOWN_PREFIXES`) when decoded; `Span.attributes` converts the others on access. Kafka message
values written by the Collector's kafka exporter decode with `decode_kafka_value`.

Hostile input: `decode_request` and `decode_kafka_value` raise `UndecodableError` and nothing else
for any bad body (corrupt bytes, invalid UTF-8, nesting deep enough to exhaust the stack, memory
exhaustion), so callers dead-letter it and carry on. Attribute values nest at most
`MAX_VALUE_DEPTH` levels; lone UTF-16 surrogates in JSON strings become U+FFFD, so no string that
cannot be encoded as UTF-8 ever reaches a judge, a cache key or an exporter.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from agent.model import AttributeValue, Resource, Span, SpanEvent
from agent.otlp.conventions import KNOWN_PREFIXES

Encoding = Literal["protobuf", "json"]

# Deepest AnyValue nesting (arrays and kvlists inside each other) an OTLP/JSON body may carry; real
# instrumentation nests two or three levels. (Protobuf's parser stops at 100 message levels.)
MAX_VALUE_DEPTH = 32
# A JSON escape of a UTF-16 surrogate: only bodies containing one need their strings cleaned.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class UndecodableError(ValueError):
    """The body is not an ExportTraceServiceRequest in the stated encoding."""


@dataclass(slots=True)
class DecodedRequest:
    spans: list[Span] = field(default_factory=list)
    # One entry per span that could not be used, with the reason (e.g. a malformed trace id).
    rejected: list[str] = field(default_factory=list)


def decode_request(body: bytes, encoding: Encoding) -> DecodedRequest:
    """Decode one ExportTraceServiceRequest body.

    Raises:
        UndecodableError: for any body that is not a request in `encoding`, whatever went wrong
            (the only exception bad input can produce: dead-letter the body).
    """
    try:
        if encoding == "protobuf":
            return _decode_protobuf(body)
        return _decode_json(body)
    except UndecodableError:
        raise
    except RecursionError:
        raise UndecodableError("body is not a usable ExportTraceServiceRequest: nested too deeply") from None
    except MemoryError:
        raise UndecodableError(
            "body is not a usable ExportTraceServiceRequest: too large to decode"
        ) from None
    except Exception as exc:  # any other failure on hostile bytes is the body's fault, not ours
        raise UndecodableError(f"body is not a valid ExportTraceServiceRequest: {exc!r}") from None


# The Collector's kafka exporter encodings for traces, and how their message values decode. Each
# message value is one whole ExportTraceServiceRequest; the message key (the hex trace id when
# `partition_traces_by_id` is on, else absent) is never needed.
KAFKA_ENCODINGS: dict[str, Encoding] = {"otlp_proto": "protobuf", "otlp_json": "json"}


def decode_kafka_value(value: bytes | None, encoding: str = "otlp_proto") -> DecodedRequest:
    """Decode one Kafka message value written by the Collector's kafka exporter.

    Raises:
        ValueError: `encoding` is not one the exporter writes for traces (a configuration error).
        UndecodableError: the value is not a request in that encoding (dead-letter the message).
    """
    if encoding not in KAFKA_ENCODINGS:
        raise ValueError(f"unsupported kafka encoding {encoding!r}; use one of {sorted(KAFKA_ENCODINGS)}")
    if value is None:  # a tombstone carries no spans
        return DecodedRequest()
    return decode_request(value, KAFKA_ENCODINGS[encoding])


# -- protobuf -------------------------------------------------------------------------------------


def _pb_value(value: AnyValue) -> AttributeValue:
    # Unbounded recursion is safe here: protobuf's parser refuses messages nested beyond 100
    # levels, i.e. about 47 levels of AnyValue, so bodies that decoded never go deeper.
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "array_value":
        return [_pb_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _pb_attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value
    return None


def _pb_attributes(pairs: Any) -> dict[str, AttributeValue]:
    return {pair.key: _pb_value(pair.value) for pair in pairs}


def _pb_known(pairs: Any) -> dict[str, AttributeValue]:
    """The attributes the conventions read, converted; the hot loop of the whole intake."""
    known: dict[str, AttributeValue] = {}
    for pair in pairs:
        key = pair.key
        if key.startswith(KNOWN_PREFIXES):
            value = pair.value
            # A non-empty string_value (a non-zero double_value) can only mean the string (double)
            # member of the oneof is set: the two common kinds without a call (document scores).
            known[key] = value.string_value or value.double_value or _pb_value(value)
    return known


class PbAttributes(Mapping[str, AttributeValue]):
    """A span's attributes read from the protobuf message only when asked for.

    Converting every attribute of every span to Python values costs more than the rest of the
    intake together, and the conventions read a handful of keys per span. This mapping indexes
    the keys on first use and converts a value on each access; it keeps the decoded request alive
    as long as it lives, so the assembler stores extracted parts, never these mappings.
    """

    __slots__ = ("_index", "_pairs")

    def __init__(self, pairs: Any) -> None:
        self._pairs = pairs
        self._index: dict[str, Any] | None = None

    def _keys(self) -> dict[str, Any]:
        index = self._index
        if index is None:
            # Later duplicates win, as they would in a dict built from the pairs.
            index = self._index = {pair.key: pair for pair in self._pairs}
        return index

    def __getitem__(self, key: str) -> AttributeValue:
        return _pb_value(self._keys()[key].value)

    def get(self, key: str, default: Any = None) -> Any:
        # The conventions' hot path: one dict lookup, strings converted inline.
        pair = (self._index or self._keys()).get(key)
        if pair is None:
            return default
        value = pair.value
        kind = value.WhichOneof("value")
        if kind == "string_value":
            return value.string_value
        if kind == "double_value":
            return value.double_value
        return _pb_value(value)

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        return f"PbAttributes({dict(self.items())!r})"


# The all-zero trace id is invalid (W3C trace context).
_ZERO_TRACE_ID = bytes(16)


def _decode_protobuf(body: bytes) -> DecodedRequest:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
        raise UndecodableError(f"body is not a protobuf ExportTraceServiceRequest: {exc}") from None
    out = DecodedRequest()
    spans, rejected = out.spans, out.rejected
    for resource_spans in request.resource_spans:
        resource = Resource(_pb_attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope_name = scope_spans.scope.name
            for pb in scope_spans.spans:
                # Each read of a bytes or repeated field builds a new Python object: read once.
                trace_id, span_id, parent_id = pb.trace_id, pb.span_id, pb.parent_span_id
                if len(trace_id) != 16 or len(span_id) != 8 or trace_id == _ZERO_TRACE_ID:
                    rejected.append("invalid_id")
                    continue
                pairs, events, status = pb.attributes, pb.events, pb.status.code
                # Positional, in Span's field order: matching a dozen keywords costs ~0.4 µs a span.
                spans.append(
                    Span(
                        trace_id.hex(),  # trace_id
                        span_id.hex(),  # span_id
                        parent_id.hex() if len(parent_id) == 8 else None,  # parent_span_id
                        pb.name,  # name
                        pb.start_time_unix_nano,  # start_time_unix_nano
                        pb.end_time_unix_nano,  # end_time_unix_nano
                        PbAttributes(pairs),  # attributes
                        resource,  # resource
                        tuple(SpanEvent(e.name, e.time_unix_nano, PbAttributes(e.attributes)) for e in events)
                        if events
                        else (),  # events
                        scope_name,  # scope_name
                        _pb_known(pairs),  # known
                        status if status in (1, 2) else 0,  # status
                    )
                )
    return out


# -- JSON -----------------------------------------------------------------------------------------


def _json_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class _JsonStrings:
    """Turns JSON strings into text any encoder accepts (lone surrogates become U+FFFD)."""

    def __init__(self, body: bytes) -> None:
        self.clean = _SURROGATE_ESCAPE.search(body) is not None

    def __call__(self, value: Any) -> str:
        text = value if isinstance(value, str) else str(value)
        return _LONE_SURROGATE.sub("\ufffd", text) if self.clean else text


def _json_value(value: Mapping[str, Any], text: _JsonStrings, depth: int = 0) -> AttributeValue:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an AnyValue object, got {type(value).__name__}")
    if "stringValue" in value:
        return text(value["stringValue"])
    if "intValue" in value:
        return _json_int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value or "kvlistValue" in value:
        if depth >= MAX_VALUE_DEPTH:
            raise UndecodableError(f"attribute value nested deeper than {MAX_VALUE_DEPTH} levels")
        if "arrayValue" in value:
            return [
                _json_value(item, text, depth + 1) for item in (value["arrayValue"] or {}).get("values", [])
            ]
        return _json_attributes((value["kvlistValue"] or {}).get("values", []), text, depth + 1)
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


def _json_attributes(pairs: Any, text: _JsonStrings, depth: int = 0) -> dict[str, AttributeValue]:
    if not isinstance(pairs, list):
        raise ValueError("attributes must be a list of {key, value}")
    return {text(pair["key"]): _json_value(pair.get("value") or {}, text, depth) for pair in pairs}


def _json_id(value: Any, size: int) -> str | None:
    if not isinstance(value, str) or len(value) != size * 2:
        return None
    try:
        bytes.fromhex(value)
    except ValueError:
        return None
    return value.lower()


def _decode_json(body: bytes) -> DecodedRequest:
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UndecodableError(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise UndecodableError(
            "body is not an OTLP/JSON ExportTraceServiceRequest: nested too deeply"
        ) from None
    if not isinstance(request, dict):
        raise UndecodableError("body is not an OTLP/JSON ExportTraceServiceRequest object")
    out = DecodedRequest()
    text = _JsonStrings(body)
    try:
        for resource_spans in request.get("resourceSpans") or []:
            resource = Resource(
                _json_attributes((resource_spans.get("resource") or {}).get("attributes", []), text)
            )
            for scope_spans in resource_spans.get("scopeSpans") or []:
                scope_name = text((scope_spans.get("scope") or {}).get("name", ""))
                for raw in scope_spans.get("spans") or []:
                    span = _json_span(raw, resource, scope_name, text)
                    if span is None:
                        out.rejected.append("invalid_id")
                    else:
                        out.spans.append(span)
    except (AttributeError, KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise UndecodableError(f"body is not a valid OTLP/JSON ExportTraceServiceRequest: {exc!r}") from None
    return out


def _json_span(
    raw: Mapping[str, Any], resource: Resource, scope_name: str, text: _JsonStrings
) -> Span | None:
    trace_id = _json_id(raw.get("traceId"), 16)
    span_id = _json_id(raw.get("spanId"), 8)
    if trace_id is None or span_id is None or trace_id == "0" * 32:
        return None
    attributes = _json_attributes(raw.get("attributes", []), text)
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_json_id(raw.get("parentSpanId"), 8),
        name=text(raw.get("name", "")),
        start_time_unix_nano=_json_int(raw.get("startTimeUnixNano", 0)),
        end_time_unix_nano=_json_int(raw.get("endTimeUnixNano", 0)),
        attributes=attributes,
        known={key: value for key, value in attributes.items() if key.startswith(KNOWN_PREFIXES)},
        resource=resource,
        events=tuple(
            SpanEvent(
                text(e.get("name", "")),
                _json_int(e.get("timeUnixNano", 0)),
                _json_attributes(e.get("attributes", []), text),
            )
            for e in raw.get("events", [])
        ),
        scope_name=scope_name,
        status=_json_status(raw.get("status")),
    )


# OTLP/JSON writes the status code as its number or as its enum name.
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _json_status(status: Any) -> int:
    if not isinstance(status, Mapping):
        return 0
    code = status.get("code", 0)
    if isinstance(code, str):
        return _STATUS_NAMES.get(code, int(code) if code.isdigit() else 0)
    return code if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 2 else 0
