"""OTLP log records as span events: the GenAI events API's messages (docs/intake.md, "Logs").

Some instrumentations (opentelemetry-instrumentation-openai-v2 with events, Semantic Kernel)
write a model call's messages as OTLP *log records* linked to the call's span by trace and span
id, not as span attributes or span events. A record named by its `event.name` attribute (or the
record's EventName field) `gen_ai.*` becomes a `SpanEvent` of that name whose attributes are its
body's fields (a JSON object in a string body, or a map body) over its own attributes, so the
event normalisers of conventions/genai.py read it like any span event. Records without a span
id, or of other names (application logs), are ignored and counted.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from agent.model import AttributeValue, SpanEvent
from agent.otlp.conventions import parse_json
from agent.otlp.decode import (
    Encoding,
    UndecodableError,
    _json_attributes,
    _json_id,
    _json_int,
    _json_value,
    _JsonStrings,
    _pb_attributes,
    _pb_value,
)

EVENT_PREFIX = "gen_ai."
# Log events held for spans that have not arrived yet, oldest dropped first (counted).
MAX_WAITING_SPANS = 10_000


@dataclass(frozen=True, slots=True)
class LogEvent:
    trace_id: str
    span_id: str
    event: SpanEvent


@dataclass(slots=True)
class DecodedLogs:
    events: list[LogEvent] = field(default_factory=list)
    ignored: int = 0  # records without a span id, or not a GenAI event


def _event(
    trace_id: str | None,
    span_id: str | None,
    name: Any,
    time: int,
    body: AttributeValue,
    attributes: dict[str, AttributeValue],
) -> LogEvent | None:
    name = name or attributes.get("event.name")
    if not trace_id or not span_id or not isinstance(name, str) or not name.startswith(EVENT_PREFIX):
        return None
    if isinstance(body, str) and body[:1] == "{":
        body = parse_json(body) or body
    if isinstance(body, Mapping):
        attributes = {**attributes, **body}
    elif body is not None:
        attributes = {**attributes, "content": body}
    return LogEvent(trace_id, span_id, SpanEvent(name, time, attributes))


def decode_logs(body: bytes, encoding: Encoding) -> DecodedLogs:
    """Decode one ExportLogsServiceRequest body (protobuf or JSON).

    Raises:
        UndecodableError: for a body that is not a logs request in `encoding`.
    """
    try:
        return _protobuf(body) if encoding == "protobuf" else _json(body)
    except UndecodableError:
        raise
    except Exception as exc:  # whatever bad input makes the parser raise
        raise UndecodableError(f"not an OTLP logs request ({encoding}): {exc}") from exc


def _hex(value: bytes, size: int) -> str | None:
    return value.hex() if len(value) == size and any(value) else None


def _protobuf(body: bytes) -> DecodedLogs:
    out = DecodedLogs()
    request = ExportLogsServiceRequest.FromString(body)
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                found = _event(
                    _hex(record.trace_id, 16),
                    _hex(record.span_id, 8),
                    record.event_name,
                    record.time_unix_nano or record.observed_time_unix_nano,
                    _pb_value(record.body) if record.HasField("body") else None,
                    _pb_attributes(record.attributes),
                )
                if found is None:
                    out.ignored += 1
                else:
                    out.events.append(found)
    return out


def _json(body: bytes) -> DecodedLogs:
    out = DecodedLogs()
    text = _JsonStrings(body)
    request = json.loads(body)
    for resource_logs in request.get("resourceLogs") or []:
        for scope_logs in resource_logs.get("scopeLogs") or []:
            for record in scope_logs.get("logRecords") or []:
                found = _event(
                    _json_id(record.get("traceId"), 16),
                    _json_id(record.get("spanId"), 8),
                    record.get("eventName"),
                    _json_int(record.get("timeUnixNano") or record.get("observedTimeUnixNano") or 0),
                    _json_value(record["body"], text) if record.get("body") else None,
                    _json_attributes(record.get("attributes") or [], text),
                )
                if found is None:
                    out.ignored += 1
                else:
                    out.events.append(found)
    return out


class WaitingEvents:
    """Log events by (trace id, span id) until their span arrives; bounded, oldest dropped."""

    def __init__(self, max_spans: int = MAX_WAITING_SPANS) -> None:
        self._max = max_spans
        self._events: OrderedDict[tuple[str, str], list[SpanEvent]] = OrderedDict()
        self.dropped = 0  # events dropped to keep within the bound

    def __len__(self) -> int:
        return len(self._events)

    def add(self, events: Iterable[LogEvent]) -> None:
        for found in events:
            key = (found.trace_id, found.span_id)
            waiting = self._events.get(key)
            if waiting is None:
                while len(self._events) >= self._max:
                    _, gone = self._events.popitem(last=False)
                    self.dropped += len(gone)
                waiting = self._events[key] = []
            waiting.append(found.event)

    def take(self, trace_id: str, span_id: str) -> tuple[SpanEvent, ...]:
        found = self._events.pop((trace_id, span_id), None) if self._events else None
        return tuple(sorted(found, key=lambda e: e.time_unix_nano)) if found else ()
