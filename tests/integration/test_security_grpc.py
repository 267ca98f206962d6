"""TLS, mutual TLS and the bearer token on a gRPC OTLP TraceService (agent/sources/grpc_security.py),
tested with the real OpenTelemetry SDK gRPC exporter and certificates the test makes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from agent.config import OtlpSettings  # noqa: E402
from agent.infra.endpoint_security import otlp_bearer_token  # noqa: E402
from agent.sources.grpc_security import interceptors, server_credentials  # noqa: E402
from tests.support.net import free_port  # noqa: E402
from tests.support.tls import Pki  # noqa: E402

pytestmark = pytest.mark.integration
TOKEN = "grpc-token-8d41"


class TraceService:
    """A real gRPC server on a free port with the TraceService/Export method, in a thread."""

    def __init__(self, settings: OtlpSettings) -> None:
        self.received = 0
        self.refused = 0
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(settings), self.loop).result(30)

    async def _start(self, settings: OtlpSettings) -> None:
        async def export(body: bytes, context: object) -> bytes:
            self.received += 1
            return trace_service_pb2.ExportTraceServiceResponse().SerializeToString()

        handlers = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(export)},
        )
        secret = settings.bearer_token.get_secret_value() if settings.bearer_token else None
        token = otlp_bearer_token(secret, settings.bearer_token_file)
        self.server = grpc.aio.server(interceptors=interceptors(token, self._count))
        self.server.add_generic_rpc_handlers((handlers,))
        credentials = server_credentials(
            settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
        )
        address = f"127.0.0.1:{self.port}"
        if credentials is None:
            self.server.add_insecure_port(address)
        else:
            self.server.add_secure_port(address, credentials)
        await self.server.start()

    def _count(self) -> None:
        self.refused += 1

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def export(port: int, ca: Path | None, **options: object) -> SpanExportResult:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("tests").start_as_current_span("rag.query"):
        pass
    credentials = None
    if ca is not None:
        chain = options.pop("client", None)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca.read_bytes(),
            private_key=chain[1].read_bytes() if chain else None,  # type: ignore[index]
            certificate_chain=chain[0].read_bytes() if chain else None,  # type: ignore[index]
        )
    exporter = OTLPSpanExporter(
        endpoint=f"localhost:{port}", insecure=ca is None, credentials=credentials, timeout=5, **options
    )  # type: ignore[arg-type]
    try:
        return exporter.export(memory.get_finished_spans())
    finally:
        exporter.shutdown()


@pytest.fixture
def tls_service(pki: Pki) -> Iterator[TraceService]:
    service = TraceService(
        OtlpSettings(
            otlp_tls_cert_file=str(pki.server_cert),
            otlp_tls_key_file=str(pki.server_key),
            otlp_bearer_token=TOKEN,
        )
    )
    try:
        yield service
    finally:
        service.stop()


def test_grpc_tls_and_bearer_token_with_the_sdk_exporter(tls_service: TraceService, pki: Pki) -> None:
    assert export(tls_service.port, pki.ca) is SpanExportResult.FAILURE
    assert (
        export(tls_service.port, pki.ca, headers={"authorization": "Bearer wrong"})
        is SpanExportResult.FAILURE
    )
    assert tls_service.refused == 2 and tls_service.received == 0
    assert (
        export(tls_service.port, pki.ca, headers={"authorization": f"Bearer {TOKEN}"})
        is SpanExportResult.SUCCESS
    )
    assert tls_service.received == 1
    # A client that does not trust the server's CA never gets to send its token.
    assert export(tls_service.port, pki.other_ca, headers={"authorization": f"Bearer {TOKEN}"}) is (
        SpanExportResult.FAILURE
    )
    assert tls_service.received == 1


def test_grpc_mutual_tls_requires_a_client_certificate(pki: Pki) -> None:
    service = TraceService(
        OtlpSettings(
            otlp_tls_cert_file=str(pki.server_cert),
            otlp_tls_key_file=str(pki.server_key),
            otlp_tls_client_ca_file=str(pki.ca),
        )
    )
    try:
        assert export(service.port, pki.ca) is SpanExportResult.FAILURE
        assert (
            export(service.port, pki.ca, client=(pki.client_cert, pki.client_key)) is SpanExportResult.SUCCESS
        )
        assert service.received == 1
    finally:
        service.stop()


def test_the_agents_grpc_receiver_takes_the_same_tls_and_token_settings(pki: Pki) -> None:
    from tests.support.agent_process import AgentProcess

    agent = AgentProcess(
        env={
            "RAGPULSE_OTLP_TLS_CERT_FILE": str(pki.server_cert),
            "RAGPULSE_OTLP_TLS_KEY_FILE": str(pki.server_key),
            "RAGPULSE_OTLP_BEARER_TOKEN": TOKEN,
        }
    )
    try:
        agent.wait_ready()
        assert export(agent.grpc_port, pki.ca) is SpanExportResult.FAILURE
        assert export(agent.grpc_port, pki.ca, headers={"authorization": "Bearer wrong"}) is (
            SpanExportResult.FAILURE
        )
        assert export(agent.grpc_port, pki.ca, headers={"authorization": f"Bearer {TOKEN}"}) is (
            SpanExportResult.SUCCESS
        )
        labels = {"source": "otlp_grpc", "reason": "unauthorized"}
        result = agent.wait_for(
            lambda s: (
                s.total("ragpulse_spans_received_total", source="otlp_grpc") == 1
                and s.total("ragpulse_requests_refused_total", **labels) == 2
            )
        )
        assert result.total("ragpulse_spans_received_total", source="otlp_grpc") == 1
        assert result.total("ragpulse_requests_refused_total", **labels) == 2
        assert TOKEN not in agent.log()
    finally:
        agent.kill()
