"""OTLP/HTTP receiver: `POST /v1/traces` with protobuf or JSON bodies, as the OTLP spec says.

- 200 with an ExportTraceServiceResponse in the request's encoding; `partial_success` counts the
  spans that were rejected (e.g. malformed ids) and says why.
- 400 with a google.rpc.Status when the body cannot be decoded (not retryable).
- 413 when the body is larger than `otlp_max_body_bytes`, 415 for other content types.
- 503 with Retry-After while intake is paused (evaluation queue full, judge unavailable), so the
  exporter retries later.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from agent.otlp.decode import Encoding, UndecodableError, decode_request
from agent.sources.base import Intake
from agent.sources.security import EndpointSecurity

log = logging.getLogger(__name__)

SOURCE = "otlp_http"
_CONTENT_TYPES: dict[str, Encoding] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
_CONTENT_ENCODINGS = ("identity", "gzip", "deflate")


def _encode(message: status_pb2.Status | ExportTraceServiceResponse, encoding: Encoding) -> bytes:
    if encoding == "json":
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def _content_type(encoding: Encoding) -> str:
    return "application/json" if encoding == "json" else "application/x-protobuf"


def _status_response(http_status: int, code: int, message: str, encoding: Encoding) -> web.Response:
    body = _encode(status_pb2.Status(code=code, message=message), encoding)
    return web.Response(status=http_status, body=body, content_type=_content_type(encoding))


class OtlpHttpSource:
    name = SOURCE

    def __init__(
        self, host: str, port: int, max_body_bytes: int, security: EndpointSecurity | None = None
    ) -> None:
        self._security = security or EndpointSecurity()
        self._host = host
        self._port = port
        self._max_body_bytes = max_body_bytes
        self._runner: web.AppRunner | None = None
        self._intake: Intake | None = None
        self.bound_port: int | None = None

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        security = self._security  # TLS and bearer token (agent/sources/security.py), off by default
        app = web.Application(client_max_size=self._max_body_bytes, middlewares=security.middlewares)
        app.router.add_post("/v1/traces", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self._host, self._port, reuse_address=True, ssl_context=security.ssl_context
        )
        await site.start()
        self.bound_port = self._runner.addresses[0][1]
        log.info("OTLP/HTTP receiver on %s://%s:%d/v1/traces", security.scheme, self._host, self.bound_port)

    def ready(self) -> bool:
        return self._runner is not None

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def shutdown(self, timeout: float) -> None:
        await self.stop()

    async def _handle(self, request: web.Request) -> web.Response:
        assert self._intake is not None
        media_type = request.content_type
        encoding = _CONTENT_TYPES.get(media_type)
        if encoding is None:
            return _status_response(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported Content-Type {media_type!r}; send application/x-protobuf or application/json",
                "protobuf",
            )
        content_encoding = request.headers.get("Content-Encoding", "identity").lower()
        if content_encoding not in _CONTENT_ENCODINGS:
            return _status_response(
                415, code_pb2.INVALID_ARGUMENT, f"unsupported Content-Encoding {content_encoding!r}", encoding
            )
        try:
            # aiohttp inflates gzip/deflate bodies itself; client_max_size bounds the inflated size.
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large(encoding)
        except ContentEncodingError as exc:
            return self._undecodable(f"body cannot be decompressed: {exc}", encoding)

        reason = self._intake.pause_reason()
        if reason is not None:
            response = _status_response(
                503, code_pb2.UNAVAILABLE, f"intake paused ({reason}); retry later", encoding
            )
            response.headers["Retry-After"] = str(max(1, round(self._intake.retry_after_seconds())))
            return response
        try:
            decoded = decode_request(body, encoding)
        except UndecodableError as exc:
            return self._undecodable(str(exc), encoding)
        self._intake.accept(decoded, SOURCE)

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
        return _status_response(400, code_pb2.INVALID_ARGUMENT, message, encoding)

    def _too_large(self, encoding: Encoding) -> web.Response:
        assert self._intake is not None
        message = f"body exceeds {self._max_body_bytes} bytes; send smaller batches"
        self._intake.dead_letter("too_large", message)
        return _status_response(413, code_pb2.INVALID_ARGUMENT, message, encoding)
