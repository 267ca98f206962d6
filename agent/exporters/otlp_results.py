"""Send every evaluated interaction as OTLP/HTTP to any trace backend, beside the trace it scores.

The request is the one the Kafka results topic carries (`agent.exporters.result_spans`): a
`ragpulse.evaluation` span, child of the scored span, with one `gen_ai.evaluation.result` event
per metric. It goes to an OTLP/HTTP traces endpoint (an OpenTelemetry Collector, Phoenix, Jaeger,
Tempo) as `application/x-protobuf`, so per-interaction results are visible without Kafka.

Delivery: `export` returns once the endpoint answered 2xx. Connection errors, timeouts, 429 and
5xx raise, so the pipeline retries the interaction later and nothing is lost while the backend is
down. Other 4xx answers are permanent (a wrong path, a rejected payload): retrying would never
succeed and would stall scoring, so they are counted in `ragpulse_export_failures_total` and
logged at a bounded rate, and the interaction is done.

An endpoint that does not accept connections at start-up is waited for (agent/infra/waiting.py);
until it does, `export` raises and the interaction is retried later.
A URL that is not http(s)://host... is a configuration error, reported before anything starts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp

from agent.config import ConfigError
from agent.exporters.result_spans import evaluation_request
from agent.infra.waiting import Dependencies, Waiter, cancel, reachable
from agent.model import Evaluated
from agent.telemetry import EvaluationTelemetry

log = logging.getLogger(__name__)

_LOG_INTERVAL = 30.0  # seconds between log lines about rejected exports


def traces_url(endpoint: str) -> str:
    """The traces URL for an OTLP endpoint given as a base (`http://host:4318`) or a full URL."""
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ConfigError(f"results_otlp_endpoint (env RAGPULSE_RESULTS_OTLP_ENDPOINT): {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            "results_otlp_endpoint (env RAGPULSE_RESULTS_OTLP_ENDPOINT): expected an http:// or "
            f"https:// URL such as http://collector:4318, got {endpoint!r}"
        )
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


class OtlpResultsError(RuntimeError):
    """The endpoint could not take the results now; the interaction is retried later."""


class OtlpResultsExporter:
    """Exporter (agent.exporters.base) to an OTLP/HTTP traces endpoint."""

    def __init__(
        self,
        endpoint: str,
        telemetry: EvaluationTelemetry,
        *,
        headers: Mapping[str, str] | None = None,
        include_text: bool = False,
        documents_key: str | None = None,
        timeout_seconds: float = 10.0,
        dependencies: Dependencies | None = None,
    ) -> None:
        self._url = traces_url(endpoint)
        self._telemetry = telemetry
        self._headers = {**(headers or {}), "Content-Type": "application/x-protobuf"}
        self._include_text = include_text
        self._documents_key = documents_key
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None
        self._last_log = float("-inf")
        self.dependency = (dependencies or Dependencies()).add("the OTLP results endpoint", self._url)
        self._waiter = Waiter(self.dependency, self._probe)
        self._connecting: asyncio.Task[bool] | None = None

    @property
    def url(self) -> str:
        return self._url

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        if not await self._waiter.try_once():
            self._connecting = asyncio.create_task(self._waiter.until_up(), name="otlp-results-endpoint")

    async def _probe(self) -> bool:
        """The endpoint accepts TCP connections (what it thinks of requests, export reports)."""
        parts = urlsplit(self._url)
        assert parts.hostname is not None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        await reachable([f"[{parts.hostname}]:{port}"], port)
        return True

    async def export(self, evaluated: Evaluated) -> None:
        if self._session is None:
            raise RuntimeError("OTLP results exporter used before start()")
        if not self.dependency.ready:
            raise OtlpResultsError(self.dependency.detail)
        body = evaluation_request(
            evaluated.interaction,
            evaluated.results,
            include_text=self._include_text,
            documents_key=self._documents_key,
        ).SerializeToString()
        try:
            async with self._session.post(self._url, data=body, headers=self._headers) as response:
                status = response.status
                detail = (await response.read())[:200]
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise OtlpResultsError(f"POST {self._url}: {exc!r}") from exc
        if status < 300:
            return
        if status == 429 or status >= 500:
            raise OtlpResultsError(f"POST {self._url} answered {status}")
        self._telemetry.export_failures.labels(type(self).__name__).inc()
        now = time.monotonic()
        if now - self._last_log >= _LOG_INTERVAL:
            self._last_log = now
            log.warning(
                "OTLP results endpoint %s rejected results with %d (%r); not retried. "
                "Check results_otlp_endpoint points at an OTLP/HTTP traces receiver",
                self._url,
                status,
                detail,
            )

    async def flush(self) -> None:
        """Nothing held: each export returns once the endpoint answered."""

    async def shutdown(self, timeout: float) -> None:
        connecting, self._connecting = self._connecting, None
        await cancel(connecting)
        session, self._session = self._session, None
        if session is not None:
            await session.close()
