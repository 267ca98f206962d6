"""Helpers for intake tests: record spans with the real SDK, encode them with the real encoder."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.model import Span
from agent.otlp.assemble import Assembly, Labeller, TraceAssembler
from agent.otlp.conventions.known import known_conventions
from agent.otlp.decode import decode_request
from agent.series_budget import SeriesBudget

CONVENTIONS = tuple(known_conventions())


class Recorder:
    """A real TracerProvider exporting into memory, for one service."""

    def __init__(self, service: str = "rag-app", **resource: str | bool) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service, **resource}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("tests")

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())


def protobuf(spans: Sequence[ReadableSpan]) -> bytes:
    """One ExportTraceServiceRequest, as OTLP/HTTP and the Collector's kafka `otlp_proto` carry it."""
    return encode_spans(spans).SerializeToString()


def otlp_json_request(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON of a request: proto3 JSON with hex ids and integer enums (the OTLP rules)."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """OTLP/JSON of the request `protobuf(spans)` carries."""
    return otlp_json_request(encode_spans(spans))


def decoded(spans: Sequence[ReadableSpan], encoding: str = "protobuf") -> list[Span]:
    body = protobuf(spans) if encoding == "protobuf" else otlp_json(spans)
    result = decode_request(body, encoding)  # type: ignore[arg-type]
    assert result.rejected == []
    return result.spans


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def assembler(
    *,
    wait: float = 10.0,
    max_traces: int = 1000,
    max_spans_per_trace: int = 1000,
    max_chunk_bytes: int = 1 << 30,
    route_attributes: Sequence[str] = ("http.route",),
    max_label_values: int = 100,
    max_label_pairs: int = 10_000,
    clock: Callable[[], float] | None = None,
    capture: Sequence[str] = (),
    metadata: Sequence[str] = (),
) -> TraceAssembler:
    """`metadata`: the document metadata keys the conventions read (as `documents_key` sets)."""
    conventions = known_conventions(metadata) if metadata else CONVENTIONS
    return TraceAssembler(
        conventions,
        Labeller(route_attributes, SeriesBudget(max_label_pairs, max_label_values)),
        wait_seconds=wait,
        max_traces=max_traces,
        max_spans_per_trace=max_spans_per_trace,
        max_chunk_bytes=max_chunk_bytes,
        capture=capture,
        clock=clock or Clock(),
    )


def total(assemblies: Iterable[Assembly]) -> Assembly:
    out = Assembly()
    for a in assemblies:
        out.interactions.extend(a.interactions)
        out.assembled_spans += a.assembled_spans
        out.skipped.update(a.skipped)
        out.evictions.update(a.evictions)
        out.buffered_spans, out.buffered_traces = a.buffered_spans, a.buffered_traces
    return out


def set_all(span, attributes: Mapping[str, object]) -> None:  # type: ignore[no-untyped-def]
    for key, value in attributes.items():
        span.set_attribute(key, value)


class OpenIntake:
    """An Intake stand-in that always accepts and never pauses: subclasses say what `accept`,
    `low_watermark` and `dead_letter` do with what the source hands over."""

    def accepting(self) -> bool:
        return True

    def pause_reason(self) -> str | None:
        return None

    def retry_after_seconds(self) -> float:
        return 1.0
