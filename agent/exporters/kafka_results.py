"""Publish every evaluated interaction to a Kafka topic as OTLP, beside the trace it scores.

Each message is an ExportTraceServiceRequest holding one `ragpulse.evaluation` span, a child of
the evaluated span (same trace id, parent = the span the scores belong to), so Jaeger, Phoenix or
Langfuse behind a Collector's kafka receiver show the scores under the trace. The span carries:
- one `gen_ai.evaluation.result` event per metric (OpenTelemetry GenAI semantic conventions:
  `gen_ai.evaluation.name`, `gen_ai.evaluation.score.value`, `gen_ai.evaluation.score.label`,
  `gen_ai.evaluation.explanation`, `error.type` when the judge failed);
- OpenInference-style `evaluations.<metric>.{score,label,explanation}` attributes.
No text of the interaction is included unless `include_text` is set. The resource is marked
`ragpulse.agent=true`, so ragpulse never ingests its own output again.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from agent import __version__
from agent.model import MetricResult, Outcome, RagInteraction
from agent.secrets import mask

AGENT_RESOURCE_ATTRIBUTE = "ragpulse.agent"
EVALUATION_EVENT = "gen_ai.evaluation.result"


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


def evaluation_request(
    interaction: RagInteraction, results: Sequence[MetricResult], *, include_text: bool = False,
    now_ns: int | None = None,
) -> ExportTraceServiceRequest:  # fmt: skip
    """The OTLP request that carries one interaction's results."""
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
    for result in results:
        prefix = f"evaluations.{result.metric}"
        if result.value is not None:
            attributes.append(_kv(f"{prefix}.score", float(result.value)))
        attributes.append(_kv(f"{prefix}.label", result.outcome.value))
        if result.reason:
            # An error reason may quote a provider's message (e.g. a rejected API key): masked.
            attributes.append(_kv(f"{prefix}.explanation", mask(result.reason)))
        span.events.add(time_unix_nano=now, name=EVALUATION_EVENT, attributes=_event_attributes(result))
    if include_text:
        attributes.append(_kv("input.value", interaction.query))
        if interaction.response is not None:
            attributes.append(_kv("output.value", interaction.response))
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


class KafkaResultsExporter:
    """Durable exporter: `export` returns when the broker has acknowledged the message.

    Never blocks the event loop: kafka-python's `send()` blocks while it has no metadata for the
    topic or its buffer is full (the broker is away), so it runs in a small thread pool and gives
    up after `max_block_seconds`. A failed export raises; the pipeline counts it
    (ragpulse_export_failures_total) and retries the interaction later.
    """

    def __init__(
        self, producer_options: dict[str, Any], topic: str, *, include_text: bool = False,
        timeout_seconds: float = 30.0, max_block_seconds: float = 5.0, send_threads: int = 4,
    ) -> None:  # fmt: skip
        self._options = producer_options
        self._topic = topic
        self._include_text = include_text
        self._timeout = timeout_seconds
        self._max_block = max_block_seconds
        self._send_threads = send_threads
        self._producer: Any = None
        self._senders: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        from kafka import KafkaProducer

        options = {
            "acks": "all",
            "linger_ms": 5,
            "max_request_size": 16 * 1024 * 1024,
            "max_block_ms": int(self._max_block * 1000),
            **self._options,
        }
        self._producer = await asyncio.to_thread(KafkaProducer, **options)
        self._senders = ThreadPoolExecutor(max_workers=self._send_threads, thread_name_prefix="results-send")

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        producer, senders = self._producer, self._senders
        if producer is None or senders is None:
            raise RuntimeError("results exporter used before start()")
        value = evaluation_request(interaction, results, include_text=self._include_text).SerializeToString()
        loop = asyncio.get_running_loop()
        acknowledged: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if acknowledged.done():
                return
            if error is None:
                acknowledged.set_result(None)
            else:
                acknowledged.set_exception(error)

        send = functools.partial(producer.send, self._topic, key=interaction.trace_id.encode(), value=value)
        # Raises KafkaTimeoutError after max_block_seconds when the broker is unreachable.
        sent = await asyncio.wait_for(loop.run_in_executor(senders, send), self._timeout)
        # Callbacks run on the producer's I/O thread (or here, if it is already settled).
        sent.add_callback(lambda _: loop.call_soon_threadsafe(settle, None))
        sent.add_errback(lambda exc: loop.call_soon_threadsafe(settle, exc))
        await asyncio.wait_for(acknowledged, self._timeout)

    async def shutdown(self, timeout: float) -> None:
        producer, self._producer = self._producer, None
        senders, self._senders = self._senders, None
        if senders is not None:
            senders.shutdown(wait=False, cancel_futures=True)
        if producer is not None:
            await asyncio.to_thread(producer.close, timeout)
