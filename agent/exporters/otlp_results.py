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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import aiohttp

from agent.exporters.result_spans import evaluation_request
from agent.model import MetricResult, RagInteraction
from agent.telemetry import Telemetry

log = logging.getLogger(__name__)

_LOG_INTERVAL = 30.0  # seconds between log lines about rejected exports


def traces_url(endpoint: str) -> str:
    """The traces URL for an OTLP endpoint given as a base (`http://host:4318`) or a full URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


class OtlpResultsError(RuntimeError):
    """The endpoint could not take the results now; the interaction is retried later."""


class OtlpResultsExporter:
    """Exporter (agent.exporters.base) to an OTLP/HTTP traces endpoint."""

    def __init__(
        self,
        endpoint: str,
        telemetry: Telemetry,
        *,
        headers: Mapping[str, str] | None = None,
        include_text: bool = False,
        timeout_seconds: float = 10.0,
    ) -> None:
        self._url = traces_url(endpoint)
        self._telemetry = telemetry
        self._headers = {**(headers or {}), "Content-Type": "application/x-protobuf"}
        self._include_text = include_text
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None
        self._last_log = float("-inf")

    @property
    def url(self) -> str:
        return self._url

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout)

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        if self._session is None:
            raise RuntimeError("OTLP results exporter used before start()")
        body = evaluation_request(interaction, results, include_text=self._include_text).SerializeToString()
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

    async def shutdown(self, timeout: float) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
