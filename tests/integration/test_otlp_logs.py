"""GenAI events sent as OTLP log records by the real OpenTelemetry SDK, over OTLP/HTTP and gRPC,
join their spans and form the interaction (agent/otlp/logs.py, docs/intake.md "Logs")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from agent.model import RagInteraction
from agent.otlp.decode import DecodedRequest
from agent.otlp.logs import DecodedLogs, decode_logs
from agent.sources.otlp_grpc import OtlpGrpcSource
from agent.sources.otlp_http import OtlpHttpSource
from tests.support.otlp import Clock, assembler

pytestmark = pytest.mark.integration

DOCUMENTS = "The Eiffel Tower is 330 metres tall.\n\nThe Louvre houses the Mona Lisa."
QUESTION = "How tall is the Eiffel Tower?"
ANSWER = "It is 330 metres tall."


class AssemblingIntake:
    """An Intake in front of the real trace assembler: spans and log events as the agent takes them."""

    def __init__(self) -> None:
        self.assembler = assembler(clock=Clock())
        self.interactions: list[RagInteraction] = []
        self.ignored = 0

    def accepting(self) -> bool:
        return True

    def pause_reason(self) -> str | None:
        return None

    def retry_after_seconds(self) -> float:
        return 1.0

    def accept(self, request: DecodedRequest, source: str) -> int:
        self.interactions.extend(self.assembler.add(request.spans).interactions)
        return 0

    def accept_logs(self, logs: DecodedLogs, source: str) -> None:
        self.ignored += logs.ignored
        self.assembler.add_logs(logs.events)

    def low_watermark(self) -> int:
        return 1

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        raise AssertionError(f"dead letter {reason}: {detail}")


class Running:
    """A receiver on its own event loop in a thread, as in the agent."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.intake = AssemblingIntake()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Running:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.source.start(self.intake), self.loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.source.shutdown(5), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def agent_turn(span_exporter: Any, log_exporter: Any) -> None:
    """One agent turn under the GenAI events layout: a search tool, then a chat call whose
    messages are log records emitted inside its span (the spans carry no content)."""
    resource = Resource.create({"service.name": "events-app"})
    spans = TracerProvider(resource=resource)
    spans.add_span_processor(SimpleSpanProcessor(span_exporter))
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    tracer, logger = spans.get_tracer("app"), logs.get_logger("app")
    with tracer.start_as_current_span("invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span(
            "execute_tool search",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "search",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": '{"query": "eiffel tower height"}',
                "gen_ai.tool.call.result": DOCUMENTS,
            },
        ):
            pass
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
            for name, body in (
                ("gen_ai.user.message", {"content": QUESTION}),
                ("gen_ai.tool.message", {"content": DOCUMENTS, "id": "call_1"}),
                ("gen_ai.choice", {"index": 0, "finish_reason": "stop", "message": {"content": ANSWER}}),
            ):
                logger.emit(event_name=name, body=body)
        logger.emit(body="an application log line, not an event")  # ignored, counted
    logs.shutdown()  # the records go first here; spans.shutdown() then ends the trace
    spans.shutdown()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_log_records_of_the_sdk_join_their_spans_into_the_interaction(transport: str) -> None:
    exporters: Callable[[int], tuple[Any, Any]]
    if transport == "http":
        source: Any = OtlpHttpSource("127.0.0.1", 0, 4 * 1024 * 1024)
        exporters = lambda port: (  # noqa: E731
            HttpSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces"),
            HttpLogExporter(endpoint=f"http://127.0.0.1:{port}/v1/logs"),
        )
    else:
        grpc_traces = pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        grpc_logs = pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc._log_exporter")
        source = OtlpGrpcSource("127.0.0.1", 0, 4 * 1024 * 1024)
        exporters = lambda port: (  # noqa: E731
            grpc_traces.OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True),
            grpc_logs.OTLPLogExporter(endpoint=f"127.0.0.1:{port}", insecure=True),
        )
    with Running(source) as running:
        agent_turn(*exporters(running.source.bound_port))
        # Every export was answered, so the loop is idle. A search whose documents are only in its
        # output may still get a retriever span inside it: the trace waits, and the pipeline's
        # expiry ends the wait; here the flush does.
        found = running.intake.interactions + running.intake.assembler.flush().interactions
    (interaction,) = found
    assert (interaction.query, interaction.response) == (QUESTION, ANSWER)
    assert [c.content for c in interaction.chunks] == DOCUMENTS.split("\n\n")
    assert interaction.sub_queries == ("eiffel tower height",)
    assert running.intake.ignored == 1


def test_a_json_logs_request_is_read_like_protobuf() -> None:
    body = (
        b'{"resourceLogs": [{"scopeLogs": [{"logRecords": ['
        b'{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",'
        b' "eventName": "gen_ai.choice", "timeUnixNano": "5",'
        b' "body": {"kvlistValue": {"values": [{"key": "message", "value": {"kvlistValue": {"values":'
        b' [{"key": "content", "value": {"stringValue": "hi"}}]}}}]}}},'
        b'{"traceId": "5b8efff798038103d269b633813fc60c", "body": {"stringValue": "no span"}}'
        b"]}]}]}"
    )
    decoded = decode_logs(body, "json")
    (found,) = decoded.events
    assert (found.trace_id, found.span_id, found.event.name) == (
        "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "gen_ai.choice"
    )  # fmt: skip
    assert found.event.attributes["message"] == {"content": "hi"}
    assert decoded.ignored == 1


def test_records_of_one_span_held_until_it_arrives_are_bounded() -> None:
    from agent.model import SpanEvent
    from agent.otlp.logs import LogEvent, WaitingEvents

    waiting = WaitingEvents(max_spans=2)
    waiting.add(LogEvent("t", s, SpanEvent("gen_ai.choice", 1, {})) for s in ("a", "b", "c"))
    assert (len(waiting), waiting.dropped) == (2, 1)
    assert waiting.take("t", "a") == ()
    assert [e.name for e in waiting.take("t", "c")] == ["gen_ai.choice"]
