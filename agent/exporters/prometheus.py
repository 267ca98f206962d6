"""Scores into Prometheus: the `ragpulse_score` histogram and `ragpulse_evaluations_total`.

Scores are a histogram, not a gauge of a window mean, so that means across replicas are
`rate(ragpulse_score_sum) / rate(ragpulse_score_count)`. Each observation carries its trace id as
an OpenMetrics exemplar (never a label), so a dashboard leads from a low bucket to the trace;
/metrics answers in the OpenMetrics format, exemplars included, when the scraper asks for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from agent.infra.endpoint_security import EndpointSecurity
from agent.infra.listening import listen_error
from agent.infra.looplag import LoopLagMonitor
from agent.infra.waiting import Dependencies
from agent.model import MetricResult, Outcome, RagInteraction
from agent.telemetry import EvaluationTelemetry

log = logging.getLogger(__name__)


class PrometheusExporter:
    def __init__(self, telemetry: EvaluationTelemetry) -> None:
        self._telemetry = telemetry

    async def export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> None:
        labels = (interaction.service, interaction.route)
        for result in results:
            self._telemetry.evaluations.labels(*labels, result.metric, result.outcome.value).inc()
            if result.outcome is Outcome.OK and result.value is not None:
                self._telemetry.score.labels(*labels, result.metric).observe(
                    result.value, exemplar=trace_exemplar(interaction)
                )

    async def start(self) -> None:
        """Nothing to connect."""

    async def shutdown(self, timeout: float) -> None:
        """Nothing is buffered: the registry is scraped."""


def trace_exemplar(interaction: RagInteraction) -> dict[str, str]:
    """The exemplar labels of an observation: `trace_id` (and `span_id`), as Grafana's
    `exemplarTraceIdDestinations` and Tempo expect; OpenMetrics caps them at 128 characters."""
    return {"trace_id": interaction.trace_id[:32], "span_id": interaction.span_id[:16]}


class MetricsServer:
    """Serves /metrics for Prometheus, /healthz (process up) and /readyz (able to do work).

    /healthz answers 200 as long as the process serves it, also while a dependency is awaited
    (a liveness probe must not restart an agent that is waiting for Kafka). /readyz answers 503
    while a check fails or a dependency is awaited, one line each.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        checks: Mapping[str, Callable[[], bool | str]],
        security: EndpointSecurity | None = None,
        loop_lag: LoopLagMonitor | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self._dependencies = dependencies or Dependencies()
        # TLS and basic auth from a Prometheus web config file (metrics_web_config_file), if any.
        self._security = security or EndpointSecurity()
        self._registry = registry
        self._loop_lag = loop_lag  # runs while the server does: it measures what the server suffers
        self._host = host
        self._port = port
        self._checks = dict(checks)
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None

    async def start(self) -> None:
        if self._loop_lag is not None:
            await self._loop_lag.start()
        security = self._security
        app = web.Application(middlewares=security.middlewares)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self._host, self._port, reuse_address=True, ssl_context=security.ssl_context
        )
        try:
            await site.start()
        except OSError as exc:  # a busy port is the operator's to fix: one line naming the setting
            await self._runner.cleanup()
            raise listen_error("metrics_listen", self._host, self._port, exc) from None
        self.bound_port = self._runner.addresses[0][1]
        log.info("metrics on %s://%s:%d/metrics", security.scheme, self._host, self.bound_port)

    async def shutdown(self, timeout: float) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        if self._loop_lag is not None:
            await self._loop_lag.shutdown(timeout)

    async def _metrics(self, request: web.Request) -> web.Response:
        # OpenMetrics (with exemplars) when the scraper asks for it, as Prometheus does with
        # exemplar storage on; the classic text format otherwise.
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        # Rendering thousands of series takes CPU time; keep it off the event loop.
        body = await asyncio.to_thread(encoder, self._registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        # One line per check, so an operator sees which part is not ready (source, judge), and one
        # per dependency still awaited ("waiting for Kafka at host:9092: <error>").
        # A check answers True (ready), False, or the reason it is not ready (a rejected judge key).
        results = {name: check() for name, check in self._checks.items()}
        body = "".join(f"{name}: {_readiness(result)}\n" for name, result in results.items())
        awaited = self._dependencies.awaited()
        body += "".join(f"{dependency.detail}\n" for dependency in awaited)
        ready = all(result is True for result in results.values()) and not awaited
        return web.Response(status=200 if ready else 503, text=body)


def _readiness(result: bool | str) -> str:
    if result is True:
        return "ok"
    return f"not ready: {result}" if isinstance(result, str) and result else "not ready"
