"""Counting refused requests: `ragpulse_requests_refused_total{source,reason}`.

Every receiver (OTLP/HTTP, OTLP/gRPC) counts each request it does not take in, with one reason from
a bounded set, so an operator sees misconfigured senders (415), oversized batches (413), hostile or
corrupt bodies (400) and back-pressure (503 / UNAVAILABLE, labelled with the intake's pause reason).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

# Reasons, as they label the counter.
TOO_LARGE = "too_large"  # 413: body over otlp_max_body_bytes
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # 415: content type or encoding not OTLP
UNDECODABLE = "undecodable"  # 400: not an ExportTraceServiceRequest (incl. corrupt compression)
BAD_REQUEST = "bad_request"  # 400: malformed HTTP, refused by the HTTP server before any handler
NOT_FOUND = "not_found"  # 404: a path other than /v1/traces
UNAUTHORIZED = "unauthorized"  # 401: missing or wrong bearer token (agent/infra/endpoint_security.py)
METHOD_NOT_ALLOWED = "method_not_allowed"  # 405
INTERNAL_ERROR = "internal_error"  # a bug met while handling the body (answered 400, dead-lettered)
TIMEOUT = "timeout"  # 408 / 504
OTHER = "other"  # any other status >= 400

_BY_STATUS = {
    400: BAD_REQUEST,
    401: UNAUTHORIZED,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    408: TIMEOUT,
    413: TOO_LARGE,
    415: UNSUPPORTED_MEDIA_TYPE,
    431: BAD_REQUEST,
    504: TIMEOUT,
}


def reason_for_status(status: int) -> str:
    """The refusal reason of a response that no handler labelled (e.g. aiohttp's own 400s)."""
    return _BY_STATUS.get(status, OTHER)


class _Counter(Protocol):
    def labels(self, *values: str) -> _Incrementable: ...


class _Incrementable(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Paused(Protocol):
    def pause_reason(self) -> str | None: ...


class _HasRefusals(Protocol):
    @property
    def requests_refused(self) -> _Counter: ...


class Refusals:
    """Counts one source's refused requests; `None` telemetry counts nothing (unit tests)."""

    def __init__(self, telemetry: _HasRefusals | None, source: str) -> None:
        self._counter = telemetry.requests_refused if telemetry is not None else None
        self.source = source

    def count(self, reason: str) -> None:
        if self._counter is not None:
            self._counter.labels(self.source, reason).inc()

    def paused(self, intake: _Paused) -> str | None:
        """The intake's pause reason, counted as a refusal, or None while it accepts."""
        reason = intake.pause_reason()
        if reason is not None:
            self.count(reason)
        return reason


class RateLimitFilter(logging.Filter):
    """Lets one record per `interval` seconds through (per logger and level): hostile clients
    must not flood the log; the refusal counter sees every request."""

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__()
        self._interval = interval
        self._last: dict[tuple[str, int], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno)
        now = time.monotonic()
        if now - self._last.get(key, float("-inf")) < self._interval:
            return False
        self._last[key] = now
        return True
