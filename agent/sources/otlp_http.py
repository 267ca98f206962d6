"""OTLP/HTTP receiver: `POST /v1/traces` with protobuf or JSON bodies, as the OTLP spec says.

`POST /v1/logs` takes log records the same way (same limits, refusals and pause): the GenAI
events they carry join their spans (agent/otlp/logs.py); it answers an ExportLogsServiceResponse.

- 200 with an ExportTraceServiceResponse in the request's encoding; `partial_success` counts the
  spans that were rejected (e.g. malformed ids) and says why.
- 400 with a google.rpc.Status when the body cannot be decoded or decompressed (not retryable);
  the body is dead-lettered. No input produces a 500: an unexpected failure is a 400, logged.
- 413 when the body is larger than `otlp_max_body_bytes`, 415 for other content types.
- 503 with Retry-After while intake is paused (evaluation queue full, judge unavailable), so the
  exporter retries later.

Every refused request, including the 400s aiohttp sends itself for malformed HTTP, is counted in
`ragpulse_requests_refused_total{source="otlp_http",reason}` (see agent/sources/refusals.py).

Compressed bodies are inflated (bounded by `otlp_max_body_bytes`) and bodies larger than
`DECODE_INLINE_BYTES` are decoded in a worker thread, and a decoded request is handed to the
pipeline in slices of whole traces (agent/sources/handover.py), so that neither a 32 MiB body nor a
gzip bomb holds the event loop (health checks, /metrics, other requests) for long.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestPayloadError
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agent.config import OtlpSettings
from agent.infra.endpoint_security import EndpointSecurity, otlp_bearer_token, otlp_security
from agent.infra.listening import base_url, start_site
from agent.otlp.decode import DecodedRequest, Encoding, UndecodableError, decode_request
from agent.otlp.logs import DecodedLogs, decode_logs
from agent.sources import refusals
from agent.sources.base import Intake, Source
from agent.sources.composite import CompositeSource
from agent.sources.handover import ACCEPT_SLICE_SPANS, DECODE_INLINE_BYTES, InFlight, slices
from agent.sources.refusals import RateLimitFilter, Refusals
from agent.telemetry import IntakeTelemetry

log = logging.getLogger(__name__)
# aiohttp logs every malformed request with a traceback; through this logger, once per 10 s.
_server_log = logging.getLogger(f"{__name__}.server")


def _not_a_refused_body(record: logging.LogRecord) -> bool:
    # aiohttp logs the corrupt-compression error again when it drains the refused body: it was
    # answered (400) and counted already.
    error = record.exc_info[1] if record.exc_info else None
    return not isinstance(error, (RequestPayloadError, ContentEncodingError))


_server_log.addFilter(_not_a_refused_body)
_server_log.addFilter(RateLimitFilter())
_error_log = logging.getLogger(f"{__name__}.errors")
_error_log.addFilter(RateLimitFilter())

SOURCE = "otlp_http"
_CONTENT_TYPES: dict[str, Encoding] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
_CONTENT_ENCODINGS = ("identity", "gzip", "deflate")
# How long the rest of a refused body is drained before the connection is closed.
_LINGER_SECONDS = 2.0
# The response key a handler sets to name why it refused the request (read by the access log).
# (aiohttp >= 3.12 wants a typed key; older versions take the string.)
_REFUSAL: Any = (
    web.ResponseKey("ragpulse.refusal", str) if hasattr(web, "ResponseKey") else "ragpulse.refusal"
)


def _encode(
    message: status_pb2.Status | ExportTraceServiceResponse | ExportLogsServiceResponse, encoding: Encoding
) -> bytes:
    if encoding == "json":
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def _content_type(encoding: Encoding) -> str:
    return "application/json" if encoding == "json" else "application/x-protobuf"


def _status_response(
    http_status: int, code: int, message: str, encoding: Encoding, reason: str
) -> web.Response:
    body = _encode(status_pb2.Status(code=code, message=message), encoding)
    response = web.Response(status=http_status, body=body, content_type=_content_type(encoding))
    response[_REFUSAL] = reason
    return response


def _refusal_log(count: refusals.Refusals) -> type[AbstractAccessLogger]:
    """An aiohttp access logger that logs nothing and counts every response >= 400.

    aiohttp calls it for every response it sends, including the 400s for requests it could not
    parse (which never reach a handler or a middleware), so this is the one place refusals are
    counted: the reason a handler set on its response, else one derived from the status.
    """

    class RefusalLog(AbstractAccessLogger):
        def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
            if response.status >= 400:
                count.count(response.get(_REFUSAL) or refusals.reason_for_status(response.status))

    return RefusalLog


class _TooLarge(Exception):
    """The body inflates past the size limit."""


def _inflate(body: bytes, content_encoding: str, limit: int) -> bytes:
    """The body without its gzip or deflate encoding, at most `limit` bytes (else _TooLarge).

    Raises:
        UndecodableError: the body is not valid data in that encoding.
    """
    if content_encoding == "identity":
        return body
    # gzip: a gzip header (wbits 16+); deflate: zlib-wrapped as the RFC says, or raw as some send.
    attempts = (16 + zlib.MAX_WBITS,) if content_encoding == "gzip" else (zlib.MAX_WBITS, -zlib.MAX_WBITS)
    error: zlib.error | None = None
    for wbits in attempts:
        try:
            out = bytearray()
            data = body
            while data:  # concatenated gzip members are one body
                inflater = zlib.decompressobj(wbits)
                out += inflater.decompress(data, limit + 1 - len(out))
                if len(out) > limit:
                    raise _TooLarge
                if not inflater.eof:
                    if inflater.unconsumed_tail:  # more output than allowed is waiting
                        raise _TooLarge
                    raise zlib.error("truncated stream")
                data = inflater.unused_data
            return bytes(out)
        except zlib.error as exc:
            error = exc
    raise UndecodableError(f"body cannot be decompressed ({content_encoding}): {error}")


def _inflate_and_decode(body: bytes, content_encoding: str, encoding: Encoding, limit: int) -> DecodedRequest:
    return decode_request(_inflate(body, content_encoding, limit), encoding)


def _inflate_and_decode_logs(
    body: bytes, content_encoding: str, encoding: Encoding, limit: int
) -> DecodedLogs:
    return decode_logs(_inflate(body, content_encoding, limit), encoding)


class OtlpHttpSource:
    name = SOURCE

    def __init__(
        self,
        host: str,
        port: int,
        max_body_bytes: int,
        telemetry: IntakeTelemetry | None = None,
        security: EndpointSecurity | None = None,
    ) -> None:
        self._security = security or EndpointSecurity()
        self._host = host
        self._port = port
        self._max_body_bytes = max_body_bytes
        self._refusals = Refusals(telemetry, SOURCE)
        self._runner: web.AppRunner | None = None
        self._intake: Intake | None = None
        self._decoder: ThreadPoolExecutor | None = None
        self._in_flight = InFlight()  # bodies read, not yet handed to the pipeline
        self.bound_port: int | None = None

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        # One decoding thread: decoding is CPU work under the GIL, more threads would not help.
        self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="otlp-decode")
        security = self._security  # TLS and bearer token (agent/infra/endpoint_security.py), off by default
        app = web.Application(client_max_size=self._max_body_bytes, middlewares=security.middlewares)
        app.router.add_post("/v1/traces", self._handle)
        app.router.add_post("/v1/logs", self._handle_logs)  # GenAI events as log records (otlp/logs.py)
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=log,
            access_log_class=_refusal_log(self._refusals),
            logger=_server_log,
            # Bodies are inflated here, in the decoding thread, never on the event loop.
            auto_decompress=False,
            # After a refusal (413) the rest of the body is read and dropped for at most this long,
            # so the sender sees the answer instead of a reset connection, and then cut off.
            lingering_time=_LINGER_SECONDS,
        )
        await self._runner.setup()
        self.bound_port = await start_site(
            self._runner, "otlp_listen", self._host, self._port, security.ssl_context
        )
        log.info("OTLP/HTTP receiver on %s/v1/traces", self.url)

    @property
    def url(self) -> str | None:
        """scheme://host:port of the receiver once started, with the port it bound (otlp_listen's
        port 0 means any free one), for a client in this process such as the demo's traffic."""
        if self.bound_port is None:
            return None
        return base_url(self._security.scheme, self._host, self.bound_port)

    def ready(self) -> bool:
        return self._runner is not None

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        decoder, self._decoder = self._decoder, None
        if decoder is not None:
            decoder.shutdown(wait=False, cancel_futures=True)

    async def flush(self) -> None:
        """Hand every request body already read to the pipeline (those being decoded or sliced
        now); the receiver keeps accepting requests."""
        await self._in_flight.drained()

    async def shutdown(self, timeout: float) -> None:
        await self.stop()

    async def _handle_logs(self, request: web.Request) -> web.Response:
        return await self._handle(request, logs=True)

    async def _handle(self, request: web.Request, logs: bool = False) -> web.Response:
        try:
            return await (self._receive_logs(request) if logs else self._receive(request))
        except (asyncio.CancelledError, ConnectionError):
            raise  # the client went away: there is no one to answer
        except Exception as exc:  # never a 500: a body that trips a bug must not be retried forever
            _error_log.exception("OTLP/HTTP request failed; answered 400 and dead-lettered (%r)", exc)
            if self._intake is not None:
                self._intake.dead_letter(refusals.INTERNAL_ERROR, f"request handling failed: {exc!r}")
            return _status_response(
                400,
                code_pb2.INTERNAL,
                "the agent could not process this body",
                "protobuf",
                refusals.INTERNAL_ERROR,
            )

    async def _read(self, request: web.Request) -> tuple[bytes, str, Encoding] | web.Response:
        """The request's body, content encoding and encoding; or the refusal to answer with."""
        intake = self._intake
        assert intake is not None
        media_type = request.content_type
        encoding = _CONTENT_TYPES.get(media_type)
        if encoding is None:
            return _status_response(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported Content-Type {media_type!r}; send application/x-protobuf or application/json",
                "protobuf",
                refusals.UNSUPPORTED_MEDIA_TYPE,
            )
        content_encoding = request.headers.get("Content-Encoding", "identity").lower()
        if content_encoding not in _CONTENT_ENCODINGS:
            return _status_response(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported Content-Encoding {content_encoding!r}",
                encoding,
                refusals.UNSUPPORTED_MEDIA_TYPE,
            )
        if request.content_length is not None and request.content_length > self._max_body_bytes:
            return self._too_large(encoding)
        try:
            # client_max_size bounds the body as sent; _inflate bounds it once inflated.
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large(encoding)
        except (RequestPayloadError, ContentEncodingError) as exc:
            return self._undecodable(f"body cannot be read ({content_encoding}): {exc}", encoding)
        # Refused after reading: a server that closes with unread input resets the connection, and
        # the sender would never see the 503 and its Retry-After.
        reason = intake.pause_reason()
        if reason is not None:
            response = _status_response(
                503, code_pb2.UNAVAILABLE, f"intake paused ({reason}); retry later", encoding, reason
            )
            response.headers["Retry-After"] = str(max(1, round(intake.retry_after_seconds())))
            return response
        return body, content_encoding, encoding

    async def _decode(self, work: Any, size: int, identity: bool) -> Any:
        if (identity and size <= DECODE_INLINE_BYTES) or self._decoder is None:
            return work()
        return await asyncio.get_running_loop().run_in_executor(self._decoder, work)

    async def _receive_logs(self, request: web.Request) -> web.Response:
        read = await self._read(request)
        if isinstance(read, web.Response):
            return read
        body, content_encoding, encoding = read
        intake = self._intake
        assert intake is not None
        work = functools.partial(
            _inflate_and_decode_logs, body, content_encoding, encoding, self._max_body_bytes
        )
        with self._in_flight.request():
            try:
                decoded = await self._decode(work, len(body), content_encoding == "identity")
            except _TooLarge:
                return self._too_large(encoding)
            except UndecodableError as exc:
                return self._undecodable(str(exc), encoding)
            intake.accept_logs(decoded, SOURCE)
        reply = ExportLogsServiceResponse()
        return web.Response(body=_encode(reply, encoding), content_type=_content_type(encoding))

    async def _receive(self, request: web.Request) -> web.Response:
        read = await self._read(request)
        if isinstance(read, web.Response):
            return read
        body, content_encoding, encoding = read
        intake = self._intake
        assert intake is not None
        work = functools.partial(_inflate_and_decode, body, content_encoding, encoding, self._max_body_bytes)
        with self._in_flight.request():
            try:
                decoded: DecodedRequest = await self._decode(work, len(body), content_encoding == "identity")
            except _TooLarge:
                return self._too_large(encoding)
            except UndecodableError as exc:
                return self._undecodable(str(exc), encoding)
            del body, work
            for part in slices(decoded, ACCEPT_SLICE_SPANS):
                if part is not decoded:
                    await asyncio.sleep(0)  # let health checks and other requests in between slices
                intake.accept(part, SOURCE)

        reply = ExportTraceServiceResponse()
        if decoded.rejected:
            reply.partial_success.rejected_spans = len(decoded.rejected)
            reply.partial_success.error_message = (
                f"{len(decoded.rejected)} span(s) rejected: trace id must be 16 non-zero bytes "
                "and span id 8 bytes"
            )
        return web.Response(body=_encode(reply, encoding), content_type=_content_type(encoding))

    def _undecodable(self, message: str, encoding: Encoding) -> web.Response:
        assert self._intake is not None
        self._intake.dead_letter("undecodable", message)
        return _status_response(400, code_pb2.INVALID_ARGUMENT, message, encoding, refusals.UNDECODABLE)

    def _too_large(self, encoding: Encoding) -> web.Response:
        assert self._intake is not None
        message = f"body exceeds {self._max_body_bytes} bytes; send smaller batches"
        self._intake.dead_letter("too_large", message)
        return _status_response(413, code_pb2.INVALID_ARGUMENT, message, encoding, refusals.TOO_LARGE)


def http_receiver(source: Source) -> OtlpHttpSource | None:
    """The OTLP/HTTP receiver of `source` (alone, or beside OTLP/gRPC in a composite), if any."""
    if isinstance(source, OtlpHttpSource):
        return source
    if isinstance(source, CompositeSource):
        return next((s for s in source.sources if isinstance(s, OtlpHttpSource)), None)
    return None


def build(section: OtlpSettings, telemetry: IntakeTelemetry) -> Source:
    """The embedded receivers of `section`: OTLP/HTTP, and OTLP/gRPC beside it unless disabled,
    with the same TLS, mTLS and bearer-token settings (refusals counted with the receivers'
    other refusals, reason "unauthorized")."""
    secret = section.bearer_token.get_secret_value() if section.bearer_token is not None else None
    token = otlp_bearer_token(secret, section.bearer_token_file)
    tls = (section.tls_cert_file, section.tls_key_file, section.tls_client_ca_file)
    http = OtlpHttpSource(
        *section.address,
        max_body_bytes=section.max_body_bytes,
        telemetry=telemetry,
        security=otlp_security(cert_file=tls[0], key_file=tls[1], client_ca_file=tls[2], token=token),
    )
    if section.grpc_address is None:
        return http
    # Imported here so that disabling gRPC never loads grpcio.
    from agent.sources.grpc_security import interceptors, server_credentials
    from agent.sources.otlp_grpc import SOURCE as GRPC_SOURCE
    from agent.sources.otlp_grpc import OtlpGrpcSource

    grpc = OtlpGrpcSource(
        *section.grpc_address,
        max_body_bytes=section.max_body_bytes,
        refused=telemetry.requests_refused,
        credentials=server_credentials(*tls),
        interceptors=interceptors(token, telemetry.requests_refused.labels(GRPC_SOURCE, "unauthorized").inc),
    )
    return CompositeSource([http, grpc])
