"""The agent's own HTTP server: /metrics for Prometheus, /healthz and /readyz, and the event-loop
lag monitor that measures what the server (and everything else on the loop) suffers.

Event-loop lag: everything the agent serves (intake, /healthz, /metrics, judge I/O) shares one
event loop, so CPU work that does not yield stalls all of it. The monitor sleeps `interval`
seconds in a loop and records how much later than asked it woke, as
`ragpulse_event_loop_lag_seconds` (a histogram, for alerts) and
`ragpulse_event_loop_lag_max_seconds` (the longest stall since start, for benchmarks).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from agent.config import ServerSettings
from agent.infra.endpoint_security import EndpointSecurity, load_web_config
from agent.infra.lifecycle import Periodic
from agent.infra.listening import base_url, start_site
from agent.infra.waiting import Dependencies
from agent.telemetry import Telemetry

log = logging.getLogger(__name__)

_STALL_WARNING_SECONDS = 1.0  # a stall this long is logged (at most once per _LOG_INTERVAL)
_LOG_INTERVAL = 60.0


class LoopLagMonitor:
    """Sleeps `interval` seconds in a loop and records how much later than asked it woke, into
    the instruments it is handed: `histogram` (every lag) and `longest` (the longest so far)."""

    def __init__(self, histogram: Histogram, longest: Gauge, interval: float = 0.1) -> None:
        self._histogram = histogram
        self._max_gauge = longest
        self._interval = interval
        self._max = 0.0
        self._last_log = float("-inf")
        self._woke = 0.0
        self._ticker = Periodic("event-loop-lag", interval, self._tick)

    @property
    def longest(self) -> float:
        return self._max

    async def start(self) -> None:
        if not self._ticker.running:
            self._woke = time.monotonic()
            self._ticker.start()

    async def _tick(self) -> None:
        now = time.monotonic()
        self.record(now - self._woke - self._interval)
        self._woke = now

    def record(self, lag: float) -> None:
        lag = max(0.0, lag)
        self._histogram.observe(lag)
        if lag > self._max:
            self._max = lag
            self._max_gauge.set(lag)
        if lag >= _STALL_WARNING_SECONDS:
            now = time.monotonic()
            if now - self._last_log >= _LOG_INTERVAL:
                self._last_log = now
                log.warning(
                    "event loop blocked for %.2fs: intake, health checks and /metrics waited; "
                    "see ragpulse_event_loop_lag_seconds and docs/limits.md",
                    lag,
                )

    async def flush(self) -> None:
        """Nothing held: the instruments are scraped."""

    async def shutdown(self, timeout: float) -> None:
        await self._ticker.stop()


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
        self.bound_port = await start_site(
            self._runner, "metrics_listen", self._host, self._port, security.ssl_context
        )
        log.info("metrics on %s/metrics", self.url)

    @property
    def url(self) -> str | None:
        """scheme://host:port once started, with the port it bound (metrics_listen's port 0 means
        any free one)."""
        if self.bound_port is None:
            return None
        return base_url(self._security.scheme, self._host, self.bound_port)

    async def flush(self) -> None:
        """Nothing held: the registry is scraped."""

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


def build(
    section: ServerSettings,
    telemetry: Telemetry,
    checks: Mapping[str, Callable[[], bool | str]],
    *,
    dependencies: Dependencies,
) -> MetricsServer:
    """The server of `section`, serving `telemetry`'s registry and recording the event loop's lag
    into it: TLS and basic auth from its Prometheus web config file, if any (refusals counted as
    ragpulse_requests_refused_total{source="metrics",reason="unauthorized"})."""
    refused = telemetry.intake.requests_refused.labels("metrics", "unauthorized").inc
    security = (
        load_web_config(section.web_config_file).security(refused)
        if section.web_config_file
        else EndpointSecurity()
    )
    runtime = telemetry.runtime
    host, port = section.address
    return MetricsServer(
        telemetry.registry,
        host,
        port,
        checks,
        security=security,
        loop_lag=LoopLagMonitor(runtime.event_loop_lag, runtime.event_loop_lag_max),
        dependencies=dependencies,
    )
