"""The one place that knows the topology: Source → decode → assemble → sample → evaluate → export.

`build_agent` wires the stages from Settings; `Pipeline` is the running intake and evaluation
loop: sources hand it decoded requests, it assembles and samples them synchronously, and a fixed
pool of asyncio workers evaluates the sampled interactions so that intake never waits on a judge.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from agent.aggregate import DriftAggregator
from agent.budget import BudgetController, MemoryLedger, RedisLedger, SpendLedger
from agent.config import Settings
from agent.drift import DriftConfig
from agent.evaluate import Evaluator
from agent.exporters.base import Exporter
from agent.exporters.prometheus import MetricsServer, PrometheusExporter
from agent.idempotency import Claim, IdempotencyStore, MemoryIdempotency, RedisIdempotency
from agent.judges.factory import build_judge
from agent.labels import LabelLimiter
from agent.metrics import METRICS
from agent.model import RagInteraction
from agent.otlp import mark_own_telemetry
from agent.otlp.assemble import Assembler, Assembly, Labeller, TraceAssembler
from agent.otlp.conventions.genai import GenAI
from agent.otlp.conventions.manual import Manual
from agent.otlp.conventions.openinference import OpenInference
from agent.otlp.conventions.openllmetry import OpenLLMetry
from agent.otlp.decode import DecodedRequest
from agent.sampling import KeepRule, RateTable, RuleSampler, Sampler
from agent.sources.base import Source
from agent.sources.otlp_http import SOURCE as SOURCE_OTLP_HTTP
from agent.sources.otlp_http import OtlpHttpSource
from agent.sources.security import EndpointSecurity, load_web_config, otlp_security
from agent.telemetry import Telemetry

log = logging.getLogger(__name__)

_DEAD_LETTER_LOG_INTERVAL = 10.0  # seconds between log lines per reason; counters see every one
_EXPIRY_TICKS_PER_WAIT = 10  # the assembler's wait is overrun by at most a tenth


class Pipeline:
    """Intake (synchronous, on the event loop) and the evaluation worker pool."""

    def __init__(
        self,
        *,
        assembler: Assembler,
        sampler: Sampler,
        evaluator: Evaluator,
        exporters: Sequence[Exporter],
        telemetry: Telemetry,
        max_pending: int,
        concurrency: int,
        idempotency: IdempotencyStore,
        busy_retry_seconds: float = 1.0,
        assembly_wait_seconds: float = 30.0,
    ) -> None:
        self._idempotency = idempotency
        self._busy_retry_seconds = busy_retry_seconds
        self._idle = asyncio.Event()
        self._idle.set()
        self._assembler = assembler
        self._sampler = sampler
        self._evaluator = evaluator
        self._exporters = tuple(exporters)
        self._telemetry = telemetry
        self._max_pending = max_pending
        self._concurrency = concurrency
        self._queue: asyncio.Queue[tuple[int, RagInteraction]] = asyncio.Queue()
        # Request sequence numbers of interactions queued or under evaluation, with counts.
        self._in_flight: Counter[int] = Counter()
        self._pending = 0  # sum of _in_flight's counts
        self._next_sequence = 0
        self._watermark = 0
        self._workers: list[asyncio.Task[None]] = []
        self._expiry: asyncio.Task[None] | None = None
        self._expiry_interval = min(1.0, assembly_wait_seconds / _EXPIRY_TICKS_PER_WAIT)
        self._last_dead_letter_log: dict[str, float] = {}

    # -- Intake ---------------------------------------------------------------------------------

    def accepting(self) -> bool:
        return self.pause_reason() is None

    def pause_reason(self) -> str | None:
        return "queue_full" if self._pending >= self._max_pending else None

    def retry_after_seconds(self) -> float:
        return 1.0

    def accept(self, request: DecodedRequest, source: str) -> int:
        sequence = self._next_sequence
        self._next_sequence += 1
        telemetry = self._telemetry
        received = len(request.spans) + len(request.rejected)
        if received:
            telemetry.spans_received.labels(source).inc(received)
        for reason in request.rejected:
            self.dead_letter(reason, "span with a malformed trace or span id")
        self._take(self._assembler.add(request.spans, sequence))
        return sequence

    def low_watermark(self) -> int:
        return self._watermark

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self._telemetry.dead_letters.labels(reason).inc(count)
        now = time.monotonic()
        if now - self._last_dead_letter_log.get(reason, float("-inf")) >= _DEAD_LETTER_LOG_INTERVAL:
            self._last_dead_letter_log[reason] = now
            log.warning("dead letter (%s): %s", reason, detail)

    def _publish_watermark(self) -> None:
        # Recomputed on the event loop after every change and read as one int from any thread.
        pending = [self._next_sequence]
        if self._in_flight:
            pending.append(min(self._in_flight))
        buffered = self._assembler.oldest_pending()
        if buffered is not None:
            pending.append(buffered)
        self._watermark = min(pending)

    def _take(self, assembly: Assembly) -> None:
        telemetry = self._telemetry
        if assembly.assembled_spans:
            telemetry.spans_assembled.inc(assembly.assembled_spans)
        for reason, count in assembly.skipped.items():
            telemetry.spans_skipped.labels(reason).inc(count)
        for reason, count in assembly.evictions.items():
            telemetry.assembler_evictions.labels(reason).inc(count)
        telemetry.assembler_buffered_spans.set(assembly.buffered_spans)
        telemetry.assembler_buffered_traces.set(assembly.buffered_traces)
        for origin, interaction in zip(assembly.origins, assembly.interactions, strict=True):
            labels = (interaction.service, interaction.route)
            telemetry.interactions.labels(*labels).inc()
            telemetry.sample_ratio.labels(interaction.service).set(self._sampler.ratio(interaction.service))
            if self._sampler.decide(interaction).keep:
                telemetry.interactions_sampled.labels(*labels).inc()
                # The queue is unbounded on purpose: admission control happens per request in
                # accepting(), so a request that was accepted is never half-enqueued.
                self._queue.put_nowait((origin, interaction))
                self._in_flight[origin] += 1
                self._pending += 1
                self._idle.clear()
        telemetry.queue_depth.set(self._queue.qsize())
        self._publish_watermark()

    # -- Evaluation -----------------------------------------------------------------------------

    async def start(self) -> None:
        for exporter in self._exporters:
            await exporter.start()
        self._workers = [
            asyncio.create_task(self._work(), name=f"evaluate-{i}") for i in range(self._concurrency)
        ]
        self._expiry = asyncio.create_task(self._expire(), name="assembly-expiry")

    async def _expire(self) -> None:
        """Tick the assembler so traces whose root never arrives are assembled after the wait."""
        while True:
            await asyncio.sleep(self._expiry_interval)
            try:
                self._take(self._assembler.expire(time.monotonic()))
            except Exception:  # stage boundary: log and keep ticking
                log.exception("assembly expiry failed")

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await self._queue.get()
            self._telemetry.queue_depth.set(self._queue.qsize())
            origin, interaction = item
            if await self._process(interaction):
                self._finish(origin)
            else:
                # Another replica holds the claim, or an export failed: try again a little later.
                loop.call_later(self._busy_retry_seconds, self._queue.put_nowait, item)

    async def _process(self, interaction: RagInteraction) -> bool:
        """Evaluate and export once; False when the interaction must be retried later."""
        claim = await self._claim(interaction)
        if claim is Claim.DONE:
            self._telemetry.duplicates.inc()
            return True
        if claim is Claim.BUSY:
            return False
        try:
            results = await self._evaluator.evaluate(interaction)
        except Exception:  # stage boundary: a bug must not kill the worker; count and move on
            log.exception("evaluation of %s failed", interaction.interaction_id)
            results = []
        # Durable exporters come first: when one fails, the interaction is retried later and the
        # in-process ones (Prometheus, drift) have not counted it yet.
        for exporter in self._exporters:
            try:
                await exporter.export(interaction, results)
            except Exception as exc:
                self._telemetry.export_failures.labels(type(exporter).__name__).inc()
                log.warning("export of %s failed, will retry: %s", interaction.interaction_id, exc)
                await self._release(interaction)
                return False
        try:
            await self._idempotency.complete(interaction.interaction_id)
        except Exception as exc:
            self._telemetry.idempotency_errors.inc()
            log.warning("cannot mark %s scored: %s", interaction.interaction_id, exc)
        return True

    async def _release(self, interaction: RagInteraction) -> None:
        try:
            await self._idempotency.release(interaction.interaction_id)
        except Exception as exc:
            self._telemetry.idempotency_errors.inc()
            log.warning("cannot release claim on %s: %s", interaction.interaction_id, exc)

    async def _claim(self, interaction: RagInteraction) -> Claim:
        try:
            return await self._idempotency.claim(interaction.interaction_id)
        except Exception as exc:
            # Without the store a duplicate may be scored twice; losing the score would be worse.
            self._telemetry.idempotency_errors.inc()
            log.warning("idempotency store unavailable, evaluating anyway: %s", exc)
            return Claim.CLAIMED

    def _finish(self, origin: int) -> None:
        self._pending -= 1
        self._in_flight[origin] -= 1
        if not self._in_flight[origin]:
            del self._in_flight[origin]
        if not self._in_flight:
            self._idle.set()
        self._publish_watermark()

    async def shutdown(self, timeout: float) -> None:
        """Flush the assembler, finish queued evaluations within `timeout`, then stop workers."""
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        self._take(self._assembler.flush())
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            log.warning(
                "shutdown: %d interaction(s) left unevaluated after %.1fs; they stay uncommitted",
                self._pending,
                timeout,
            )
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for exporter in self._exporters:
            await exporter.shutdown(timeout)


@dataclass
class Agent:
    """Everything `ragpulse run` starts, in start order."""

    settings: Settings
    telemetry: Telemetry
    source: Source
    pipeline: Pipeline
    budget: BudgetController
    metrics_server: MetricsServer
    redis: Any = None  # the one redis.asyncio client (verdict cache, idempotency keys, budget), if configured

    async def start(self) -> None:
        mark_own_telemetry()  # any OpenTelemetry SDK set up in this process tags its spans as ours
        await self.metrics_server.start()
        await self.budget.start()
        await self.pipeline.start()
        await self.source.start(self.pipeline)

    async def shutdown(self) -> None:
        timeout = self.settings.shutdown_timeout_seconds
        await self.source.stop()
        await self.pipeline.shutdown(timeout)
        await self.source.shutdown(timeout)
        await self.budget.shutdown(timeout)
        await self.metrics_server.shutdown(timeout)
        if self.redis is not None:
            await self.redis.aclose()


def drift_config(settings: Settings) -> DriftConfig:
    return DriftConfig(
        baseline_size=settings.drift_baseline_size,
        window=settings.drift_window,
        threshold=settings.drift_threshold,
        alpha=settings.drift_alpha,
    )


def kafka_connection(settings: Settings) -> dict[str, Any]:
    """kafka-python options shared by the consumer and the results producer."""
    password = settings.kafka_sasl_password
    optional = {
        "sasl_mechanism": settings.kafka_sasl_mechanism,
        "sasl_plain_username": settings.kafka_sasl_username,
        "sasl_plain_password": password.get_secret_value() if password else None,
        "ssl_cafile": settings.kafka_ssl_cafile,
        "ssl_certfile": settings.kafka_ssl_certfile,
        "ssl_keyfile": settings.kafka_ssl_keyfile,
    }
    return {
        "bootstrap_servers": list(settings.kafka_bootstrap),
        "security_protocol": settings.kafka_security_protocol,
        **{k: v for k, v in optional.items() if v is not None},
    }


def build_source(settings: Settings, telemetry: Telemetry) -> Source:
    if settings.source == "kafka":
        # Imported here so the embedded default never loads the Kafka client.
        from agent.sources.kafka import KafkaSource, KafkaSourceConfig

        config = KafkaSourceConfig(
            connection=kafka_connection(settings),
            topic=settings.kafka_topic,
            group_id=settings.kafka_group_id,
            encoding=settings.kafka_encoding,
            auto_offset_reset=settings.kafka_auto_offset_reset,
            session_timeout_ms=settings.kafka_session_timeout_ms,
            heartbeat_interval_ms=settings.kafka_heartbeat_interval_ms,
            max_poll_interval_ms=settings.kafka_max_poll_interval_ms,
            max_partition_fetch_bytes=settings.kafka_max_partition_fetch_bytes,
            fetch_max_bytes=settings.kafka_fetch_max_bytes,
            commit_interval_seconds=settings.kafka_commit_interval_seconds,
        )
        return KafkaSource(config, telemetry)
    refused = telemetry.requests_refused.labels(SOURCE_OTLP_HTTP, "unauthorized").inc
    return OtlpHttpSource(
        *settings.otlp_address,
        max_body_bytes=settings.otlp_max_body_bytes,
        security=otlp_security(settings, refused),
    )


def build_exporters(settings: Settings, telemetry: Telemetry) -> list[Exporter]:
    exporters: list[Exporter] = []
    if settings.results_topic:
        from agent.exporters.kafka_results import KafkaResultsExporter

        exporters.append(
            KafkaResultsExporter(
                kafka_connection(settings), settings.results_topic, include_text=settings.results_include_text
            )
        )
    # In-process exporters last: they count an interaction only once the durable ones succeeded.
    exporters.append(PrometheusExporter(telemetry))
    exporters.append(DriftAggregator(telemetry, drift_config(settings), settings.drift_max_series))
    return exporters


def build_agent(settings: Settings, registry: CollectorRegistry | None = None) -> Agent:
    telemetry = Telemetry(registry if registry is not None else CollectorRegistry())
    redis = None
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    idempotency: IdempotencyStore
    ledger: SpendLedger
    if settings.redis_url:
        from agent.judges.redis_cache import redis_client

        redis = redis_client(settings.redis_url)
        idempotency = RedisIdempotency(
            redis, owner, settings.idempotency_lease_seconds, settings.idempotency_ttl_seconds
        )
        ledger = RedisLedger(redis)
    else:
        idempotency = MemoryIdempotency(
            owner, settings.idempotency_lease_seconds, settings.idempotency_ttl_seconds
        )
        ledger = MemoryLedger()
    budget = BudgetController(
        ledger,
        telemetry,
        calls_per_minute=settings.budget_calls_per_minute,
        usd_per_hour=settings.budget_usd_per_hour,
    )
    keep_rules = [KeepRule.parse(rule) for rule in settings.sample_keep_rules]
    sampler = RuleSampler(RateTable.parse(settings.sample_rate, settings.sample_rates), keep_rules, budget)
    labeller = Labeller(
        settings.route_attributes,
        limit_service=LabelLimiter(settings.max_label_values),
        limit_route=LabelLimiter(settings.max_label_values),
    )
    judge = build_judge(settings, telemetry, redis)
    pipeline = Pipeline(
        assembler=TraceAssembler(
            [OpenInference(), OpenLLMetry(), GenAI(), Manual()],
            labeller,
            wait_seconds=settings.assembly_wait_seconds,
            max_traces=settings.assembly_max_traces,
            max_spans_per_trace=settings.assembly_max_spans_per_trace,
            max_chunk_bytes=settings.assembly_max_chunk_bytes,
            capture=[rule.attribute for rule in keep_rules],
        ),
        sampler=sampler,
        evaluator=Evaluator([METRICS[name]() for name in settings.metrics], judge),
        exporters=build_exporters(settings, telemetry),
        telemetry=telemetry,
        max_pending=settings.max_pending,
        concurrency=settings.eval_concurrency,
        idempotency=idempotency,
        assembly_wait_seconds=settings.assembly_wait_seconds,
    )
    source = build_source(settings, telemetry)
    readiness = {"source": source.ready, "judge": judge.healthy}
    metrics_security = EndpointSecurity()
    if settings.metrics_web_config_file:
        refused = telemetry.requests_refused.labels("metrics", "unauthorized").inc
        metrics_security = load_web_config(settings.metrics_web_config_file).security(refused)
    metrics_server = MetricsServer(
        telemetry.registry, *settings.metrics_address, checks=readiness, security=metrics_security
    )
    return Agent(settings, telemetry, source, pipeline, budget, metrics_server, redis)
