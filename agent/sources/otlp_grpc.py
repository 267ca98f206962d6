"""OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export`, as the OTLP
spec says, on 127.0.0.1:4317 by default (what most SDKs and the Collector send when unconfigured).

- OK with an ExportTraceServiceResponse; `partial_success` counts the spans that were rejected.
- INVALID_ARGUMENT when the request cannot be decoded (not retryable; dead-lettered).
- RESOURCE_EXHAUSTED without RetryInfo when the request is larger than `otlp_max_body_bytes`
  (the spec: not retryable without RetryInfo; send smaller batches).
- UNAVAILABLE with a google.rpc.RetryInfo detail while intake is paused (evaluation queue full,
  judge unavailable): the exporter retries after that delay.
- gzip (grpc-encoding) is inflated by gRPC itself; the size limit applies to the inflated request.
- `opentelemetry.proto.collector.logs.v1.LogsService/Export` on the same server, with the same
  limits and pause: the GenAI events of log records join their spans (agent/otlp/logs.py).

The request bytes are decoded by agent/otlp/decode.py, the same decoder as OTLP/HTTP and Kafka,
so every receiver rejects and dead-letters the same spans for the same reasons; as on OTLP/HTTP,
requests above `DECODE_INLINE_BYTES` are decoded in a worker thread and handed to the pipeline in
slices of whole traces, so the event loop stays free. Refused requests are counted in
ragpulse_requests_refused_total{source="otlp_grpc",reason} with the reasons of
agent/sources/refusals.py (the intake's pause reason for UNAVAILABLE).

grpcio is imported here only, so the Kafka deployment never loads it unless this receiver runs.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf import duration_pb2
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from prometheus_client import Counter

from agent.infra.listening import check_bindable, listen_error
from agent.otlp.decode import UndecodableError, decode_request
from agent.otlp.logs import decode_logs
from agent.sources import refusals
from agent.sources.base import Intake
from agent.sources.handover import ACCEPT_SLICE_SPANS, DECODE_INLINE_BYTES, InFlight, slices

log = logging.getLogger(__name__)

SOURCE = "otlp_grpc"
_Response = trace_service_pb2.ExportTraceServiceResponse
SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
LOGS_SERVICE = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name
# gRPC core refuses anything beyond this multiple of the limit before the handler sees it (uncounted);
# between 1x and this, the handler refuses it and counts it as too_large.
_CORE_LIMIT_FACTOR = 2


def build_grpc_server(
    address: str,
    handlers: grpc.GenericRpcHandler,
    max_message_bytes: int,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    setting: str = "otlp_grpc_listen",
) -> tuple[grpc.aio.Server, int]:
    """The one place a gRPC server is made: plaintext, or TLS when `credentials` are given.

    Returns the server (not started) and the port it bound (useful with port 0); raises
    ListenError, naming `setting`, when the address cannot be bound.
    """
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", 4 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ],
        compression=grpc.Compression.NoCompression,
        interceptors=tuple(interceptors),
    )
    server.add_generic_rpc_handlers((handlers,))
    host, _, port_text = address.rpartition(":")
    # gRPC reports a failed bind as a RuntimeError after its C++ core logged to stderr: try the
    # address first, so a busy port is one line naming the setting (agent/infra/listening.py).
    check_bindable(setting, host.strip("[]"), int(port_text))
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:  # taken between the check and the bind
        raise listen_error(setting, host, int(port_text), OSError(errno.EADDRINUSE, str(exc))) from None
    if port == 0:
        raise listen_error(setting, host, int(port_text), OSError(errno.EADDRINUSE, "cannot bind"))
    return server, port


async def _abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str, retry_after: float | None = None
) -> None:
    """End the call with `code`, and the google.rpc.Status trailer (`grpc-status-details-bin`)
    saying the same, with RetryInfo when `retry_after` is set. (It raises: the call is over.)"""
    status = status_pb2.Status(code=code.value[0], message=message)
    if retry_after is not None:
        seconds = max(1, math.ceil(retry_after))
        detail = AnyProto()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds)))
        status.details.append(detail)
    await context.abort(code, message, (("grpc-status-details-bin", status.SerializeToString()),))


class OtlpGrpcSource:
    """The receiver; one Source of the pipeline (see agent/sources/base.py)."""

    name = SOURCE

    def __init__(
        self,
        host: str,
        port: int,
        max_body_bytes: int,
        refused: Counter | None = None,
        credentials: grpc.ServerCredentials | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        self._interceptors = tuple(interceptors)  # e.g. the bearer-token check
        self._address = f"{host}:{port}"
        self._host = host
        self._max_body_bytes = max_body_bytes
        self._refused = refused
        self._credentials = credentials
        self._server: grpc.aio.Server | None = None
        self._decoder: ThreadPoolExecutor | None = None
        self._intake: Intake | None = None
        self._in_flight = InFlight()  # requests received, not yet handed to the pipeline
        self.bound_port: int | None = None

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="otlp-grpc-decode")
        handlers = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                # Raw bytes in (no deserializer): agent.otlp.decode decodes, as for every source.
                "Export": grpc.unary_unary_rpc_method_handler(
                    self._export,
                    response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
                )
            },
        )
        self._server, self.bound_port = build_grpc_server(
            self._address,
            handlers,
            self._max_body_bytes * _CORE_LIMIT_FACTOR,
            self._credentials,
            self._interceptors,
        )
        # The LogsService on the same server: GenAI events as log records (agent/otlp/logs.py).
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    LOGS_SERVICE,
                    {
                        "Export": grpc.unary_unary_rpc_method_handler(
                            self._export_logs,
                            response_serializer=logs_service_pb2.ExportLogsServiceResponse.SerializeToString,
                        )
                    },
                ),
            )
        )
        await self._server.start()
        # The port bound, not the one asked for: port 0 means any free port.
        log.info("OTLP/gRPC receiver on %s:%d", self._host, self.bound_port)

    def ready(self) -> bool:
        return self._server is not None

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            # In-flight exports finish (their spans are accepted); new ones are refused.
            await server.stop(grace=2.0)
        decoder, self._decoder = self._decoder, None
        if decoder is not None:
            decoder.shutdown(wait=False)

    async def flush(self) -> None:
        """Hand every request already received to the pipeline (those being decoded or sliced
        now); the receiver keeps accepting requests."""
        await self._in_flight.drained()

    async def shutdown(self, timeout: float) -> None:
        await self.stop()

    def _refuse(self, reason: str) -> None:
        if self._refused is not None:
            self._refused.labels(SOURCE, reason).inc()

    async def _export_logs(
        self, body: bytes, context: grpc.aio.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        intake = self._intake
        assert intake is not None
        await self._admit(intake, body, context)
        with self._in_flight.request():
            try:
                decoded = decode_logs(body, "protobuf")
            except UndecodableError as exc:
                await self._undecodable(intake, str(exc), context)
            intake.accept_logs(decoded, SOURCE)
        return logs_service_pb2.ExportLogsServiceResponse()

    async def _admit(self, intake: Intake, body: bytes, context: grpc.aio.ServicerContext) -> None:
        """Abort the call when the body is too large or intake is paused."""
        if len(body) > self._max_body_bytes:
            message = f"request of {len(body)} bytes exceeds {self._max_body_bytes}; send smaller batches"
            self._refuse(refusals.TOO_LARGE)
            intake.dead_letter("too_large", message)
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        reason = intake.pause_reason()
        if reason is not None:
            message = f"intake paused ({reason}); retry later"
            self._refuse(reason)
            await _abort(context, grpc.StatusCode.UNAVAILABLE, message, intake.retry_after_seconds())

    async def _undecodable(self, intake: Intake, reason: str, context: grpc.aio.ServicerContext) -> None:
        """Count and dead-letter a body that does not decode, and end its call."""
        self._refuse(refusals.UNDECODABLE)
        intake.dead_letter("undecodable", reason)
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, reason)

    async def _export(
        self, body: bytes, context: grpc.aio.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        intake = self._intake
        assert intake is not None
        await self._admit(intake, body, context)
        with self._in_flight.request():
            try:
                if len(body) <= DECODE_INLINE_BYTES or self._decoder is None:
                    decoded = decode_request(body, "protobuf")
                else:
                    loop = asyncio.get_running_loop()
                    decoded = await loop.run_in_executor(self._decoder, decode_request, body, "protobuf")
            except (UndecodableError, ValueError) as exc:  # a decode bug must not become UNKNOWN
                await self._undecodable(intake, str(exc), context)
            del body
            for part in slices(decoded, ACCEPT_SLICE_SPANS):
                if part is not decoded:
                    await asyncio.sleep(0)  # let health checks and other requests in between slices
                intake.accept(part, SOURCE)
        reply = trace_service_pb2.ExportTraceServiceResponse()
        if decoded.rejected:
            reply.partial_success.rejected_spans = len(decoded.rejected)
            reply.partial_success.error_message = (
                f"{len(decoded.rejected)} span(s) rejected: trace id must be 16 non-zero bytes "
                "and span id 8 bytes"
            )
        return reply
