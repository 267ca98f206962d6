"""The one place that knows the topology: Source → decode → assemble → sample → evaluate → export.

`build_agent` wires the stages from Settings; `Pipeline` is the running intake and evaluation
loop: sources hand it decoded requests, it assembles and samples them synchronously, and a fixed
pool of asyncio workers evaluates the sampled interactions so that intake never waits on a judge.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from agent.aggregate import DriftAggregator, RedisDriftStore
from agent.budget import BudgetController, MemoryLedger, RedisLedger, SpendLedger
from agent.config import Settings
from agent.delivery import Claims, Delivery, Job, JudgeGate, Retry, WorkLedger
from agent.drift import DriftConfig
from agent.evaluate import Evaluator
from agent.exporters.base import Exporter
from agent.exporters.prometheus import MetricsServer, PrometheusExporter
from agent.idempotency import IdempotencyStore, MemoryIdempotency, RedisIdempotency
from agent.infra.waiting import Dependencies
from agent.judges.factory import build_judge
from agent.labels import SeriesBudget
from agent.looplag import LoopLagMonitor
from agent.metrics import METRICS
from agent.model import MetricResult, RagInteraction, Span
from agent.otlp import mark_own_telemetry
from agent.otlp.assemble import Assembler, Assembly, Labeller, TraceAssembler
from agent.otlp.conventions.genai import GenAI
from agent.otlp.conventions.manual import Manual
from agent.otlp.conventions.openinference import OpenInference
from agent.otlp.conventions.openllmetry import OpenLLMetry
from agent.otlp.decode import DecodedRequest
from agent.sampling import THROTTLED_REASONS, KeepRule, RateTable, RuleSampler, Sampler
from agent.sources.base import Source
from agent.sources.otlp_http import OtlpHttpSource
from agent.sources.security import EndpointSecurity, load_web_config, otlp_security
from agent.telemetry import Telemetry
from agent.throttled_log import ThrottledLog
from agent.trust.aggregator import PpiAggregator, ppi_aggregator

log = logging.getLogger(__name__)

_DEAD_LETTER_LOG_INTERVAL = 10.0  # seconds between log lines per reason; counters see every one
_EXPIRY_TICKS_PER_WAIT = 10  # the assembler's wait is overrun by at most a tenth


class Pipeline:
    """Intake (synchronous, on the event loop) and the evaluation worker pool.

    What is promised about each interaction (claimed once, deferred while the judge is away,
    committed only when finished) lives in agent/delivery.py; this class wires the stages.
    """

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
        lease_seconds: float = 60.0,
        done_seconds: float = 3600.0,
        owner: str = "ragpulse",
        gate: JudgeGate | None = None,
        max_deferrals: int = 5,
        label_spans: Callable[[Sequence[Span]], None] | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self._dependencies = dependencies or Dependencies()  # awaited at start-up: intake waits
        self._label_spans = label_spans  # human labels in annotation spans (agent/trust)
        self._assembler = assembler
        self._sampler = sampler
        self._evaluator = evaluator
        self._exporters = tuple(exporters)
        self._telemetry = telemetry
        self._max_pending = max_pending
        self._concurrency = concurrency
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._ledger = WorkLedger()
        self.gate = gate or JudgeGate()
        self._claims = Claims(
            idempotency,
            owner,
            lease_seconds=lease_seconds,
            done_seconds=done_seconds,
            errors=telemetry.idempotency_errors.inc,
        )
        self._delivery = Delivery(
            self._claims,
            self.gate,
            _Counters(telemetry),
            busy_retry_seconds=busy_retry_seconds,
            max_deferrals=max_deferrals,
        )
        self._workers: list[asyncio.Task[None]] = []
        self._expiry: asyncio.Task[None] | None = None
        self._expiry_interval = min(1.0, assembly_wait_seconds / _EXPIRY_TICKS_PER_WAIT)
        self._dead_letters = ThrottledLog(log, _DEAD_LETTER_LOG_INTERVAL)
        self._export_failures = ThrottledLog(log, _DEAD_LETTER_LOG_INTERVAL)
        self._paused: str | None = None

    # -- Intake ---------------------------------------------------------------------------------

    def accepting(self) -> bool:
        return self.pause_reason() is None

    def pause_reason(self) -> str | None:
        if not self._dependencies.ready():
            reason: str | None = "waiting_for_dependency"
        elif self.gate.failing:
            reason = "judge_unavailable"
        elif self._ledger.pending >= self._max_pending:
            reason = "queue_full"
        else:
            reason = None
        if reason != self._paused:
            if self._paused is not None:
                self._telemetry.intake_paused.labels(self._paused).set(0)
            if reason is not None:
                self._telemetry.intake_paused.labels(reason).set(1)
            self._paused = reason
        return reason

    def retry_after_seconds(self) -> float:
        return self.gate.retry_after()

    def accept(self, request: DecodedRequest, source: str) -> int:
        sequence = self._ledger.begin()
        telemetry = self._telemetry
        received = len(request.spans) + len(request.rejected)
        if received:
            telemetry.spans_received.labels(source).inc(received)
        for reason in request.rejected:
            self.dead_letter(reason, "span with a malformed trace or span id")
        if self._label_spans is not None:
            self._label_spans(request.spans)
        self._take(self._assembler.add(request.spans, sequence))
        return sequence

    def low_watermark(self) -> int:
        return self._ledger.watermark

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self._telemetry.dead_letters.labels(reason).inc(count)
        self._dead_letters.warning(reason, "dead letter (%s): %s", reason, detail)

    def _publish_watermark(self) -> None:
        # Recomputed on the event loop after every change and read as one int from any thread.
        self._ledger.publish(self._assembler.oldest_pending())

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
        telemetry.assembler_buffered_bytes.set(assembly.buffered_bytes)
        for origin, interaction in zip(assembly.origins, assembly.interactions, strict=True):
            labels = (interaction.service, interaction.route)
            telemetry.interactions.labels(*labels).inc()
            telemetry.sample_ratio.labels(interaction.service).set(self._sampler.ratio(interaction.service))
            decision = self._sampler.decide(interaction)
            if decision.keep:
                telemetry.interactions_sampled.labels(*labels).inc()
                # The queue is unbounded on purpose: admission control happens per request in
                # accepting(), so a request that was accepted is never half-enqueued.
                self._queue.put_nowait(Job(origin, interaction))
                self._ledger.add(origin)
            elif decision.reason in THROTTLED_REASONS:
                telemetry.interactions_rejected.inc()
        telemetry.queue_depth.set(self._queue.qsize())
        self._publish_watermark()

    # -- Evaluation -----------------------------------------------------------------------------

    async def start(self) -> None:
        for exporter in self._exporters:
            await exporter.start()
        await self._claims.start()
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
                self._telemetry.oldest_unfinished.set(self._ledger.oldest_age())
                self.pause_reason()  # keeps ragpulse_intake_paused current when no source asks
            except Exception:  # stage boundary: log and keep ticking
                log.exception("assembly expiry failed")

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            job = await self._queue.get()
            self._telemetry.queue_depth.set(self._queue.qsize())
            try:
                retry = await self._delivery.deliver(job, self._evaluator.assess, self._export)
            except asyncio.CancelledError:
                raise
            except Exception:  # stage boundary: a bug must not kill the worker or lose the job
                log.exception("delivery of %s failed; retrying it", job.interaction.interaction_id)
                retry = Retry(self._delivery.busy_retry_seconds)
            self.pause_reason()  # keeps ragpulse_intake_paused in step with the judge gate
            if retry is None:
                self._finish(job.origin)
            elif retry.delay <= 0:
                self._queue.put_nowait(job)
            else:
                # Another replica holds the claim, or an export failed: try again a little later.
                loop.call_later(retry.delay, self._queue.put_nowait, job)

    async def _export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> bool:
        """Export to every exporter; False (retry later) when one fails."""
        # Durable exporters come first: when one fails, the interaction is retried later and the
        # in-process ones (Prometheus, drift) have not counted it yet.
        for exporter in self._exporters:
            try:
                await exporter.export(interaction, results)
            except Exception as exc:
                name = type(exporter).__name__
                self._telemetry.export_failures.labels(name).inc()
                self._export_failures.warning(
                    name, "export of %s by %s failed, will retry: %s", interaction.interaction_id, name, exc
                )
                return False
        return True

    def _finish(self, origin: int) -> None:
        self._ledger.finish(origin)
        if not self._ledger.pending:
            self.gate.nothing_waiting()
        self._publish_watermark()

    async def shutdown(self, timeout: float, *, flush_incomplete: bool = True) -> None:
        """Finish queued evaluations within `timeout`, hand back the rest, stop workers.

        With `flush_incomplete` (sources that cannot redeliver, e.g. OTLP/HTTP) the traces still
        buffered are assembled from what arrived and evaluated; without it (Kafka) they stay
        buffered, so the watermark keeps their messages uncommitted for the next owner.
        """
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        if flush_incomplete:
            self._take(self._assembler.flush())
        if self.gate.failing:
            timeout = 0.0  # the judge is away: hand the work back now rather than wait for it
        try:
            await asyncio.wait_for(self._ledger.idle.wait(), timeout)
        except TimeoutError:
            log.warning(
                "shutdown: %d interaction(s) left unevaluated after %.1fs; they stay uncommitted and "
                "their claims are handed back",
                self._ledger.pending,
                timeout,
            )
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        await self._claims.shutdown()
        self._publish_watermark()
        for exporter in self._exporters:
            await exporter.shutdown(timeout)


class _Counters:
    """Delivery's counters, on the agent's telemetry."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def duplicate(self) -> None:
        self._telemetry.duplicates.inc()

    def deferred(self, reason: str) -> None:
        self._telemetry.evaluations_deferred.labels(reason).inc()


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
    # A start-up call that reports a misconfigured LLM judge by a clear log line (None: no check).
    self_check: Callable[[], Coroutine[Any, Any, object]] | None = None
    # Kafka, Redis, the OTLP results endpoint: waited for when absent at start (agent/infra/waiting.py).
    dependencies: Dependencies = field(default_factory=Dependencies)
    _self_check_task: asyncio.Task[object] | None = None

    async def start(self) -> None:
        mark_own_telemetry()  # any OpenTelemetry SDK set up in this process tags its spans as ours
        await self.metrics_server.start()
        await self.dependencies.start()
        await self.budget.start()
        await self.pipeline.start()
        await self.source.start(self.pipeline)
        if self.self_check is not None:
            # In the background: a slow judge must not hold up intake or readiness.
            self._self_check_task = asyncio.create_task(self.self_check(), name="judge-self-check")

    async def shutdown(self) -> None:
        """Stop intake, finish or hand back evaluations, then commit only what is finished."""
        timeout = self.settings.shutdown_timeout_seconds
        if self._self_check_task is not None:
            self._self_check_task.cancel()
            await asyncio.gather(self._self_check_task, return_exceptions=True)
        await self.dependencies.shutdown()
        await self.source.stop()
        # A Kafka source redelivers what is left uncommitted, so incomplete traces stay buffered
        # (uncommitted) for the partition's next owner instead of being assembled half-read.
        await self.pipeline.shutdown(timeout, flush_incomplete=self.settings.source != "kafka")
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


def build_source(
    settings: Settings, telemetry: Telemetry, dependencies: Dependencies | None = None
) -> Source:
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
        return KafkaSource(config, telemetry, dependencies=dependencies)
    http = OtlpHttpSource(
        *settings.otlp_address,
        max_body_bytes=settings.otlp_max_body_bytes,
        telemetry=telemetry,
        # 401s are counted with the receiver's other refusals (reason "unauthorized").
        security=otlp_security(settings),
    )
    grpc_address = settings.otlp_grpc_address
    if grpc_address is None:
        return http
    # Imported here so that disabling gRPC never loads grpcio.
    from agent.sources.composite import CompositeSource
    from agent.sources.grpc_security import interceptors, server_credentials
    from agent.sources.otlp_grpc import SOURCE as GRPC_SOURCE
    from agent.sources.otlp_grpc import OtlpGrpcSource

    unauthorized = telemetry.requests_refused.labels(GRPC_SOURCE, "unauthorized").inc
    grpc = OtlpGrpcSource(
        *grpc_address,
        max_body_bytes=settings.otlp_max_body_bytes,
        refused=telemetry.requests_refused,
        # The same TLS, mTLS and bearer-token settings as OTLP/HTTP (agent/sources/grpc_security.py).
        credentials=server_credentials(settings),
        interceptors=interceptors(settings, unauthorized),
    )
    return CompositeSource([http, grpc])


def build_exporters(
    settings: Settings,
    telemetry: Telemetry,
    redis: Any = None,
    ppi: PpiAggregator | None = None,
    dependencies: Dependencies | None = None,
) -> list[Exporter]:
    exporters: list[Exporter] = []
    if settings.results_topic:
        from agent.exporters.kafka_results import KafkaResultsExporter

        exporters.append(
            KafkaResultsExporter(
                kafka_connection(settings),
                settings.results_topic,
                include_text=settings.results_include_text,
                label_sampler=ppi.sampler if ppi is not None else None,
                dependencies=dependencies,
            )
        )
    if settings.results_otlp_endpoint:
        from agent.exporters.otlp_results import OtlpResultsExporter

        headers = dict(item.partition("=")[::2] for item in settings.results_otlp_headers)
        exporters.append(
            OtlpResultsExporter(
                settings.results_otlp_endpoint,
                telemetry,
                headers=headers,
                include_text=settings.results_include_text,
                timeout_seconds=settings.results_otlp_timeout_seconds,
                dependencies=dependencies,
            )
        )
    # In-process exporters last: they count an interaction only once the durable ones succeeded.
    exporters.append(PrometheusExporter(telemetry))
    store = RedisDriftStore(redis, settings.drift_state_ttl_seconds) if redis is not None else None
    exporters.append(
        DriftAggregator(
            telemetry,
            drift_config(settings),
            settings.drift_max_series,
            store=store,
            save_interval=settings.drift_save_interval_seconds,
        )
    )
    if ppi is not None:
        exporters.append(ppi)
    return exporters


def build_agent(
    settings: Settings, registry: CollectorRegistry | None = None, observers: Sequence[Exporter] = ()
) -> Agent:
    """The agent `ragpulse run` starts. `observers` are extra in-process exporters that see every
    evaluated interaction after the configured ones (`ragpulse demo`'s live view)."""
    telemetry = Telemetry(registry if registry is not None else CollectorRegistry())
    for key, threshold in settings.alert_thresholds.items():
        service, _, metric = key.rpartition("/")
        telemetry.quality_threshold.labels(service, metric).set(threshold)
    redis = None
    dependencies = Dependencies()
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    idempotency: IdempotencyStore
    ledger: SpendLedger
    if settings.redis_url:
        from agent.judges.redis_cache import redis_client

        redis = redis_client(settings.redis_url)
        dependencies.watch("Redis", settings.redis_url, redis.ping)
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
        exhausted=telemetry.budget_exhausted.set,
    )
    keep_rules = [KeepRule.parse(rule) for rule in settings.sample_keep_rules]
    rates = RateTable.parse(settings.sample_rate, settings.sample_rates)
    sampler = RuleSampler(rates, keep_rules, budget, keep_per_minute=settings.sample_keep_max_per_minute)
    # Trust: prediction-powered estimates from human labels (None unless label_sample_rate > 0).
    ppi = ppi_aggregator(settings, telemetry, keep_rules, rates, budget)
    series_budget = SeriesBudget(
        settings.max_label_pairs,
        settings.max_label_values,
        on_overflow=lambda kind: telemetry.label_overflows.labels(kind).inc(),
    )
    labeller = Labeller(settings.route_attributes, series_budget)
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
        exporters=[*build_exporters(settings, telemetry, redis, ppi, dependencies), *observers],
        telemetry=telemetry,
        max_pending=settings.max_pending,
        concurrency=settings.eval_concurrency,
        idempotency=idempotency,
        assembly_wait_seconds=settings.assembly_wait_seconds,
        lease_seconds=settings.idempotency_lease_seconds,
        done_seconds=settings.idempotency_ttl_seconds,
        owner=owner,
        max_deferrals=settings.judge_defer_max_attempts,
        label_spans=ppi.observe_spans if ppi is not None else None,
        dependencies=dependencies,
    )
    source = build_source(settings, telemetry, dependencies)
    gate = pipeline.gate
    readiness = {"source": source.ready, "judge": lambda: judge.healthy() and not gate.failing}
    metrics_security = EndpointSecurity()
    if settings.metrics_web_config_file:
        refused = telemetry.requests_refused.labels("metrics", "unauthorized").inc
        metrics_security = load_web_config(settings.metrics_web_config_file).security(refused)
    metrics_server = MetricsServer(
        telemetry.registry,
        *settings.metrics_address,
        checks=readiness,
        loop_lag=LoopLagMonitor(telemetry),
        security=metrics_security,
        dependencies=dependencies,
    )
    self_check: Callable[[], Coroutine[Any, Any, object]] | None = None
    if settings.judge_self_check and not settings.judge_is_local:
        from agent.judges.llm import self_check as check_judge

        self_check = functools.partial(check_judge, judge, settings.judge_api_base or "")
    return Agent(
        settings, telemetry, source, pipeline, budget, metrics_server, redis, self_check, dependencies
    )
