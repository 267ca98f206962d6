"""The OTLP span that carries one evaluated interaction's results, shared by the results exporters.

Each request holds one `ragpulse.evaluation` span, a child of the evaluated span (same trace id,
parent = the span the scores belong to), so Jaeger, Phoenix or Langfuse show the scores under the
trace. The span carries:
- one `gen_ai.evaluation.result` event per metric (OpenTelemetry GenAI semantic conventions:
  `gen_ai.evaluation.name`, `gen_ai.evaluation.score.value`, `gen_ai.evaluation.score.label`,
  `gen_ai.evaluation.explanation`, `error.type` when the judge failed);
- OpenInference-style `evaluations.<metric>.{score,label,explanation}` attributes.
- per retrieved document, in rank order (the first RESULT_DOCUMENTS):
  `ragpulse.documents.<N>.document` (its name in ragpulse_document_verdicts: the `documents_key`
  metadata value, else its id, else `text:` + a hash of its text), `.id` (when it has one),
  `.metadata.<documents_key>` (when it has that metadata), and the judge's verdicts on it:
  `.useful` (context precision) and `.relevant` (context relevancy), booleans, when judged.
An agent's answer adds `ragpulse.agent.{searches,empty_searches,tool_errors}`. No text of the
interaction is included unless `include_text` is set; with it, the conversation id (`session.id`)
and an agent's sub-queries (`ragpulse.agent.sub_queries.N`) come too. The resource is marked
`ragpulse.agent=true`, so ragpulse never ingests its own output again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from agent import __version__
from agent.exporters.documents import document_name
from agent.infra.secrets import mask
from agent.model import MetricResult, Outcome, RagInteraction

AGENT_RESOURCE_ATTRIBUTE = "ragpulse.agent"
EVALUATION_EVENT = "gen_ai.evaluation.result"
# Documents listed on a result span; an interaction rarely has more than a few dozen.
RESULT_DOCUMENTS = 100
# The verdict attribute each context metric's per-chunk verdicts are written as.
_CHUNK_VERDICTS = {"context_precision": "useful", "context_relevancy": "relevant"}


def _kv(key: str, value: str | float | bool) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _event_attributes(result: MetricResult) -> list[KeyValue]:
    attributes = [_kv("gen_ai.evaluation.name", result.metric)]
    if result.outcome is Outcome.OK and result.value is not None:
        attributes.append(_kv("gen_ai.evaluation.score.value", float(result.value)))
    else:
        # Low-cardinality label for scores that do not exist: skipped (undefined) or error.
        attributes.append(_kv("gen_ai.evaluation.score.label", result.outcome.value))
    if result.outcome is Outcome.ERROR:
        attributes.append(_kv("error.type", "judge_error"))
    if result.reason:
        attributes.append(_kv("gen_ai.evaluation.explanation", mask(result.reason)))
    return attributes


def _document_attributes(
    interaction: RagInteraction, results: Sequence[MetricResult], key: str | None
) -> list[KeyValue]:
    verdicts = [
        (_CHUNK_VERDICTS[r.metric], r.chunk_verdicts)
        for r in results
        if r.metric in _CHUNK_VERDICTS and r.outcome is Outcome.OK and r.chunk_verdicts is not None
    ]
    attributes = []
    for n, chunk in enumerate(interaction.chunks[:RESULT_DOCUMENTS]):
        prefix = f"ragpulse.documents.{n}."
        attributes.append(_kv(prefix + "document", document_name(chunk, key)))
        if chunk.id:
            attributes.append(_kv(prefix + "id", chunk.id))
        value = chunk.meta(key) if key is not None else None
        if value:
            attributes.append(_kv(f"{prefix}metadata.{key}", value))
        for name, found in verdicts:
            if n < len(found) and found[n] is not None:
                attributes.append(_kv(prefix + name, bool(found[n])))
    return attributes


def evaluation_request(
    interaction: RagInteraction, results: Sequence[MetricResult], *, include_text: bool = False,
    now_ns: int | None = None, extra_attributes: Mapping[str, str | float | bool] | None = None,
    documents_key: str | None = None,
) -> ExportTraceServiceRequest:  # fmt: skip
    """The OTLP request that carries one interaction's results; `documents_key` names documents
    as ragpulse_document_verdicts does (documents_key)."""
    now = now_ns if now_ns is not None else time.time_ns()
    span = PbSpan(
        trace_id=bytes.fromhex(interaction.trace_id),
        span_id=os.urandom(8),
        parent_span_id=bytes.fromhex(interaction.span_id),
        name="ragpulse.evaluation",
        kind=PbSpan.SPAN_KIND_INTERNAL,
        start_time_unix_nano=now,
        end_time_unix_nano=now,
    )
    attributes = [
        _kv("openinference.span.kind", "EVALUATOR"),
        _kv("ragpulse.interaction.id", interaction.interaction_id),
        _kv("ragpulse.service", interaction.service),
        _kv("ragpulse.route", interaction.route),
    ]
    if interaction.searches > 1 or interaction.sub_queries:
        # An agent's answer: how it searched (counts always; the sub-queries are text).
        attributes.append(_kv("ragpulse.agent.searches", float(interaction.searches)))
        attributes.append(_kv("ragpulse.agent.empty_searches", float(interaction.empty_searches)))
        attributes.append(_kv("ragpulse.agent.tool_errors", float(interaction.tool_errors)))
    for result in results:
        prefix = f"evaluations.{result.metric}"
        if result.value is not None:
            attributes.append(_kv(f"{prefix}.score", float(result.value)))
        attributes.append(_kv(f"{prefix}.label", result.outcome.value))
        if result.reason:
            # An error reason may quote a provider's message (e.g. a rejected API key): masked.
            attributes.append(_kv(f"{prefix}.explanation", mask(result.reason)))
        span.events.add(time_unix_nano=now, name=EVALUATION_EVENT, attributes=_event_attributes(result))
    attributes.extend(_document_attributes(interaction, results, documents_key))
    attributes.extend(_kv(key, value) for key, value in (extra_attributes or {}).items())
    if include_text:
        attributes.append(_kv("input.value", interaction.query))
        if interaction.response is not None:
            attributes.append(_kv("output.value", interaction.response))
        if interaction.session_id:
            attributes.append(_kv("session.id", interaction.session_id))
        for n, sub_query in enumerate(interaction.sub_queries):
            attributes.append(_kv(f"ragpulse.agent.sub_queries.{n}", sub_query))
    span.attributes.extend(attributes)

    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(
        [_kv("service.name", "ragpulse"), _kv(AGENT_RESOURCE_ATTRIBUTE, True)]
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "ragpulse"
    scope_spans.scope.version = __version__
    scope_spans.spans.append(span)
    return request
