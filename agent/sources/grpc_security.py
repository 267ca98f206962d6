"""TLS, mutual TLS and the bearer token for the OTLP/gRPC receiver: the same settings as OTLP/HTTP
(`otlp_tls_cert_file`, `otlp_tls_key_file`, `otlp_tls_client_ca_file`, `otlp_bearer_token[_file]`).

Imported only where the gRPC receiver is built, so deployments without it never load grpcio.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from agent.config import ConfigError
from agent.infra.endpoint_security import Refused, bearer_matches, check_otlp_tls

log = logging.getLogger(__name__)

_REFUSAL_LOG_INTERVAL = 10.0


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting} {path}: {exc.strerror}") from None


def server_credentials(
    cert_file: str | None, key_file: str | None, client_ca_file: str | None
) -> grpc.ServerCredentials | None:
    """TLS credentials for the gRPC receiver, None for plaintext; mTLS with a client CA."""
    if not check_otlp_tls(cert_file, key_file, client_ca_file):
        return None
    assert cert_file and key_file
    return grpc.ssl_server_credentials(
        [(_read(key_file, "otlp_tls_key_file"), _read(cert_file, "otlp_tls_cert_file"))],
        root_certificates=_read(client_ca_file, "otlp_tls_client_ca_file") if client_ca_file else None,
        require_client_auth=bool(client_ca_file),
    )


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without `authorization: Bearer <token>` metadata with UNAUTHENTICATED."""

    def __init__(self, token: str, refused: Refused | None = None) -> None:
        self._token = token
        self._refused = refused
        self._last_log = float("-inf")
        self._since_log = 0

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        metadata = dict(handler_call_details.invocation_metadata or ())
        header = metadata.get("authorization")
        if bearer_matches(header if isinstance(header, str) else None, self._token):
            return await continuation(handler_call_details)
        self._refuse()
        return grpc.unary_unary_rpc_method_handler(self._deny)

    def _refuse(self) -> None:
        if self._refused is not None:
            self._refused()
        self._since_log += 1
        now = time.monotonic()
        if now - self._last_log >= _REFUSAL_LOG_INTERVAL:
            log.warning(
                "OTLP/gRPC receiver: refused %d unauthenticated call(s) (missing or wrong bearer "
                "token); check the client's credentials",
                self._since_log,
            )
            self._last_log, self._since_log = now, 0

    @staticmethod
    async def _deny(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")


def interceptors(token: str | None, refused: Refused | None = None) -> tuple[grpc.aio.ServerInterceptor, ...]:
    """The bearer-token check (`token` from otlp_bearer_token / otlp_bearer_token_file), if any."""
    return (BearerTokenInterceptor(token, refused),) if token else ()
