"""The OTLP/gRPC receiver, fed by the real OpenTelemetry SDK gRPC exporter (and a raw gRPC client
for the refusals): spans in, status codes per the OTLP spec, gzip, backpressure with RetryInfo."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

grpc = pytest.importorskip("grpc")
grpc_exporter = pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")

from google.rpc import error_details_pb2, status_pb2  # noqa: E402
from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult  # noqa: E402

from agent.otlp.decode import DecodedRequest  # noqa: E402
from agent.sources.otlp_grpc import SERVICE, OtlpGrpcSource  # noqa: E402
from agent.telemetry import Telemetry  # noqa: E402
from tests.support.agent_process import AgentProcess  # noqa: E402

pytestmark = pytest.mark.integration


class RecordingIntake:
    """An Intake that keeps what it is given and can be paused."""

    def __init__(self) -> None:
        self.requests: list[tuple[DecodedRequest, str]] = []
        self.dead: list[tuple[str, str]] = []
        self.paused: str | None = None
        self.retry_after = 1.0

    def accepting(self) -> bool:
        return self.paused is None

    def pause_reason(self) -> str | None:
        return self.paused

    def retry_after_seconds(self) -> float:
        return self.retry_after

    def accept(self, request: DecodedRequest, source: str) -> int:
        self.requests.append((request, source))
        return len(self.requests)

    def low_watermark(self) -> int:
        return len(self.requests) + 1

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self.dead.append((reason, detail))

    @property
    def spans(self) -> list[Any]:
        return [span for request, _ in self.requests for span in request.spans]


class Receiver:
    """The receiver on its own event loop in a thread, as in the agent."""

    def __init__(self, max_body_bytes: int = 4 * 1024 * 1024) -> None:
        self.intake = RecordingIntake()
        self.telemetry = Telemetry(CollectorRegistry())
        self.source = OtlpGrpcSource(
            "127.0.0.1", 0, max_body_bytes, refused=self.telemetry.intake.requests_refused
        )
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.source.start(self.intake), self.loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.source.shutdown(5), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.source.bound_port}"

    def refused(self, reason: str) -> float:
        value = self.telemetry.registry.get_sample_value(
            "ragpulse_requests_refused_total", {"source": "otlp_grpc", "reason": reason}
        )
        return value or 0.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def export_spans(
    endpoint: str, names: list[str], compression: Compression = Compression.NoCompression
) -> None:
    exporter = grpc_exporter.OTLPSpanExporter(
        endpoint=endpoint, insecure=True, compression=compression, timeout=20
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "grpc-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("root") as root:
        root.set_attribute("input.value", "What is OTLP?")
        for name in names:
            with tracer.start_as_current_span(name):
                pass
    provider.shutdown()


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_sdk_grpc_exporter_delivers_spans(receiver: Receiver, compression: Compression) -> None:
    export_spans(receiver.endpoint, ["retrieve", "generate"], compression)
    names = sorted(span.name for span in receiver.intake.spans)
    assert names == ["generate", "retrieve", "root"]
    assert {source for _, source in receiver.intake.requests} == {"otlp_grpc"}
    root = next(s for s in receiver.intake.spans if s.name == "root")
    assert root.attributes["input.value"] == "What is OTLP?"
    assert root.resource.service_name == "grpc-app"


def _raw_export(endpoint: str, body: bytes) -> tuple[grpc.StatusCode, str, status_pb2.Status | None]:
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(f"/{SERVICE}/Export")
        try:
            call(body, timeout=20)
        except grpc.RpcError as exc:
            details = dict(exc.trailing_metadata() or ()).get("grpc-status-details-bin")
            status = status_pb2.Status.FromString(details) if details else None
            return exc.code(), exc.details(), status
    return grpc.StatusCode.OK, "", None


def test_a_paused_intake_answers_unavailable_with_retry_info(receiver: Receiver) -> None:
    receiver.intake.paused = "queue_full"
    receiver.intake.retry_after = 2.2
    request = trace_service_pb2.ExportTraceServiceRequest()
    code, message, status = _raw_export(receiver.endpoint, request.SerializeToString())
    assert code is grpc.StatusCode.UNAVAILABLE and "queue_full" in message
    assert status is not None and len(status.details) == 1
    retry = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(retry)
    assert retry.retry_delay.seconds == 3
    assert receiver.refused("queue_full") == 1  # labelled with the intake's pause reason
    assert receiver.intake.requests == []


def test_the_sdk_exporter_retries_until_intake_resumes(receiver: Receiver) -> None:
    receiver.intake.paused = "judge_unavailable"
    receiver.intake.retry_after = 1.0

    def resume() -> None:
        while receiver.refused("judge_unavailable") < 1:
            time.sleep(0.05)
        receiver.intake.paused = None

    threading.Thread(target=resume, daemon=True).start()
    exporter = grpc_exporter.OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True, timeout=30)
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    span = tracer.start_span("late")
    span.end()
    assert exporter.export([span]) is SpanExportResult.SUCCESS  # type: ignore[list-item]
    exporter.shutdown()
    assert [s.name for s in receiver.intake.spans] == ["late"]
    assert receiver.refused("judge_unavailable") >= 1


def test_undecodable_requests_are_invalid_argument_and_dead_lettered(receiver: Receiver) -> None:
    code, _, status = _raw_export(receiver.endpoint, b"\xff\xff\xff not protobuf")
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert status is not None and not status.details  # no RetryInfo: not retryable
    assert receiver.refused("undecodable") == 1
    assert [reason for reason, _ in receiver.intake.dead] == ["undecodable"]


def test_too_large_requests_are_resource_exhausted_without_retry_info() -> None:
    with Receiver(max_body_bytes=1000) as small:
        big = trace_service_pb2.ExportTraceServiceRequest()
        scope = big.resource_spans.add().scope_spans.add()
        for n in range(40):
            span = scope.spans.add()
            span.trace_id = bytes(range(1, 17))
            span.span_id = n.to_bytes(8, "big")
            span.name = f"span-{n}"
        body = big.SerializeToString()
        assert 1000 < len(body) <= 2000
        code, message, status = _raw_export(small.endpoint, body)
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED and "smaller batches" in message
        assert status is not None and not status.details  # no RetryInfo: the exporter must not retry
        assert small.refused("too_large") == 1
        assert small.intake.requests == []


def test_partial_success_counts_rejected_spans(receiver: Receiver) -> None:
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    good, bad = scope.spans.add(), scope.spans.add()
    good.trace_id, good.span_id, good.name = bytes(range(1, 17)), b"\x01" * 8, "good"
    bad.trace_id, bad.span_id, bad.name = b"\x00" * 16, b"\x02" * 8, "bad"
    with grpc.insecure_channel(receiver.endpoint) as channel:
        call = channel.unary_unary(
            f"/{SERVICE}/Export",
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )
        reply = call(request.SerializeToString(), timeout=20)
    assert reply.partial_success.rejected_spans == 1
    assert [s.name for s in receiver.intake.spans] == ["good"]


def test_the_agent_receives_grpc_and_http_by_default() -> None:
    agent = AgentProcess()
    try:
        agent.wait_ready()
        export_spans(f"127.0.0.1:{agent.grpc_port}", ["retrieve"], Compression.Gzip)
        scrape = agent.wait_for(lambda s: s.total("ragpulse_spans_received_total", source="otlp_grpc") >= 2)
        assert scrape.total("ragpulse_spans_received_total", source="otlp_grpc") == 2
    finally:
        agent.stop()


def test_an_empty_grpc_listen_disables_the_receiver() -> None:
    agent = AgentProcess(env={"RAGPULSE_OTLP_GRPC_LISTEN": ""})
    try:
        agent.wait_ready()
        with grpc.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as channel, pytest.raises(grpc.RpcError):
            channel.unary_unary(f"/{SERVICE}/Export")(b"", timeout=2)
    finally:
        agent.stop()
