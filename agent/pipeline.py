"""The running pipeline: Source → decode → assemble → sample → evaluate → export.

`Pipeline` is the intake and evaluation loop: sources hand it decoded requests, it assembles and
samples them synchronously, and a fixed pool of asyncio workers evaluates the sampled
interactions so that intake never waits on a judge. `Agent` starts and stops it with its source,
budget and server. Both are wired from the settings in agent/build.py, and only there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.budget import BudgetController
from agent.delivery import Delivery, Job, JudgeGate, Leases, Retry, WorkLedger
from agent.evaluate import Evaluation, Evaluator
from agent.exporters.base import Exporter
from agent.exporters.prometheus import MetricsServer
from agent.idempotency import IdempotencyStore
from agent.infra.lockless_metrics import CounterChild
from agent.infra.throttled_log import ThrottledLog
from agent.infra.waiting import Dependencies
from agent.model import MetricResult, RagInteraction, Span
from agent.otlp import mark_own_telemetry
from agent.otlp.assemble import Assembler, Assembly
from agent.otlp.decode import DecodedRequest
from agent.probes.results import ProbeResults
from agent.probes.scoring import ProbeScorer
from agent.sampling import THROTTLED_REASONS, Sampler
from agent.signals import SignalRecorder
from agent.sources.base import Source
from agent.telemetry import (
    AssemblyTelemetry,
    EvaluationTelemetry,
    IntakeTelemetry,
    SamplingTelemetry,
)

log = logging.getLogger(__name__)

_DEAD_LETTER_LOG_INTERVAL = 10.0  # seconds between log lines per reason; counters see every one
_EXPIRY_TICKS_PER_WAIT = 10  # the assembler's wait is overrun by at most a tenth


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """How much work the pipeline holds and how long it keeps a lease (settings: pipeline, idempotency)."""

    max_pending: int = 1000
    concurrency: int = 32
    busy_retry_seconds: float = 1.0
    assembly_wait_seconds: float = 30.0
    lease_seconds: float = 60.0
    done_seconds: float = 3600.0
    owner: str = "ragpulse"
    max_deferrals: int = 5


@dataclass(frozen=True, slots=True)
class ProbeStage:
    """Where probe interactions go instead (docs/probes.md): always scored, by their own scorer
    (reference-based metrics, a judge outside the budget), into the probe series only."""

    scorer: ProbeScorer
    results: ProbeResults


class Pipeline:
    """Intake (synchronous, on the event loop) and the evaluation worker pool.

    What is promised about each interaction (leased once, deferred while the judge is away,
    committed only when finished) lives in agent/delivery.py; this class wires the stages.
    """

    def __init__(
        self,
        *,
        assembler: Assembler,
        sampler: Sampler,
        evaluator: Evaluator,
        exporters: Sequence[Exporter],
        intake: IntakeTelemetry,
        assembly: AssemblyTelemetry,
        sampling: SamplingTelemetry,
        evaluation: EvaluationTelemetry,
        idempotency: IdempotencyStore,
        config: PipelineConfig = PipelineConfig(),
        gate: JudgeGate | None = None,
        label_spans: Callable[[Sequence[Span]], None] | None = None,
        dependencies: Dependencies | None = None,
        signals: SignalRecorder | None = None,
        probes: ProbeStage | None = None,
    ) -> None:
        self._probes = probes
        self._dependencies = dependencies or Dependencies()  # awaited at start-up: intake waits
        self._signals = signals  # free signals on every interaction, before sampling
        self._label_spans = label_spans  # human labels in annotation spans (agent/trust)
        self._assembler = assembler
        self._sampler = sampler
        self._evaluator = evaluator
        self._exporters = tuple(exporters)
        self._intake = intake
        self._assembly = assembly
        self._sampling = sampling
        self._evaluation = evaluation
        self._max_pending = config.max_pending
        self._concurrency = config.concurrency
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._ledger = WorkLedger()
        self.gate = gate or JudgeGate()
        self._leases = Leases(
            idempotency,
            config.owner,
            lease_seconds=config.lease_seconds,
            done_seconds=config.done_seconds,
            errors=evaluation.idempotency_errors.inc,
        )
        self._delivery = Delivery(
            self._leases,
            self.gate,
            evaluation,  # duplicates and deferrals
            busy_retry_seconds=config.busy_retry_seconds,
            max_deferrals=config.max_deferrals,
        )
        self._workers: list[asyncio.Task[None]] = []
        self._expiry: asyncio.Task[None] | None = None
        self._expiry_interval = min(1.0, config.assembly_wait_seconds / _EXPIRY_TICKS_PER_WAIT)
        self._dead_letters = ThrottledLog(log, _DEAD_LETTER_LOG_INTERVAL)
        self._export_failures = ThrottledLog(log, _DEAD_LETTER_LOG_INTERVAL)
        self._paused: str | None = None
        self._counters: dict[tuple[str, str], tuple[CounterChild, CounterChild]] = {}

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
                self._intake.paused.labels(self._paused).set(0)
            if reason is not None:
                self._intake.paused.labels(reason).set(1)
            self._paused = reason
        return reason

    def retry_after_seconds(self) -> float:
        return self.gate.retry_after()

    def accept(self, request: DecodedRequest, source: str) -> int:
        sequence = self._ledger.begin()
        received = len(request.spans) + len(request.rejected)
        if received:
            self._intake.spans_received.labels(source).inc(received)
        for reason in request.rejected:
            self.dead_letter(reason, "span with a malformed trace or span id")
        if self._label_spans is not None:
            self._label_spans(request.spans)
        self._take(self._assembler.add(request.spans, sequence))
        return sequence

    def low_watermark(self) -> int:
        return self._ledger.watermark

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self._intake.dead_letters.labels(reason).inc(count)
        self._dead_letters.warning(reason, "dead letter (%s): %s", reason, detail)

    def _publish_watermark(self) -> None:
        # Recomputed on the event loop after every change and read as one int from any thread.
        self._ledger.publish(self._assembler.oldest_pending())

    def _take(self, assembly: Assembly) -> None:
        assembled, sampling = self._assembly, self._sampling
        if assembly.assembled_spans:
            assembled.spans_assembled.inc(assembly.assembled_spans)
        for reason, count in assembly.skipped.items():
            assembled.spans_skipped.labels(reason).inc(count)
        for reason, count in assembly.evictions.items():
            assembled.evictions.labels(reason).inc(count)
        assembled.buffered_spans.set(assembly.buffered_spans)
        assembled.buffered_traces.set(assembly.buffered_traces)
        assembled.buffered_bytes.set(assembly.buffered_bytes)
        probes = self._probes
        if probes is not None:
            for (probe_set, reason), count in assembly.probe_failures.items():
                probes.results.failed(probe_set, reason, count)
        services: set[str] = set()
        for origin, interaction in zip(assembly.origins, assembly.interactions, strict=True):
            if interaction.probe is not None and probes is not None:
                # A probe is always scored and kept out of the production series and sampling.
                probes.results.assembled(interaction.probe.probe_set)
                self._queue.put_nowait(Job(origin, interaction))
                self._ledger.add(origin)
                continue
            labels = (interaction.service, interaction.route)
            counters = self._counters.get(labels)
            if counters is None:  # bounded: labels come from the series budget
                counters = self._counters[labels] = (
                    sampling.interactions.labels(*labels),
                    sampling.sampled.labels(*labels),
                )
            counters[0].inc()
            services.add(interaction.service)
            if self._signals is not None:
                self._signals.record(interaction)
            decision = self._sampler.decide(interaction)
            if decision.keep:
                counters[1].inc()
                # The queue is unbounded on purpose: admission control happens per request in
                # accepting(), so a request that was accepted is never half-enqueued.
                self._queue.put_nowait(Job(origin, interaction))
                self._ledger.add(origin)
            elif decision.reason in THROTTLED_REASONS:
                sampling.rejected.inc()
        for service in services:
            sampling.ratio.labels(service).set(self._sampler.ratio(service))
        self._intake.queue_depth.set(self._queue.qsize())
        self._publish_watermark()

    # -- Evaluation -----------------------------------------------------------------------------

    async def start(self) -> None:
        for exporter in self._exporters:
            await exporter.start()
        await self._leases.start()
        if self._signals is not None:
            await self._signals.start()
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
                self._intake.oldest_unfinished.set(self._ledger.oldest_age())
                self.pause_reason()  # keeps ragpulse_intake_paused current when no source asks
            except Exception:  # stage boundary: log and keep ticking
                log.exception("assembly expiry failed")

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            job = await self._queue.get()
            self._intake.queue_depth.set(self._queue.qsize())
            try:
                retry = await self._delivery.deliver(job, self._assess, self._export)
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
                # Another replica holds the lease, or an export failed: try again a little later.
                loop.call_later(retry.delay, self._queue.put_nowait, job)

    async def _assess(self, interaction: RagInteraction) -> Evaluation:
        if interaction.probe is not None and self._probes is not None:
            return await self._probes.scorer.assess(interaction)
        return await self._evaluator.assess(interaction)

    async def _export(self, interaction: RagInteraction, results: Sequence[MetricResult]) -> bool:
        """Export to every exporter; False (retry later) when one fails."""
        exporters: Sequence[Exporter] = self._exporters
        if interaction.probe is not None and self._probes is not None:
            exporters = (self._probes.results,)
        # Durable exporters come first: when one fails, the interaction is retried later and the
        # in-process ones (Prometheus, drift) have not counted it yet.
        for exporter in exporters:
            try:
                await exporter.export(interaction, results)
            except Exception as exc:
                name = type(exporter).__name__
                self._evaluation.export_failures.labels(name).inc()
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
                "their leases are handed back",
                self._ledger.pending,
                timeout,
            )
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        await self._leases.shutdown()
        if self._signals is not None:
            await self._signals.shutdown(timeout)
        self._publish_watermark()
        for exporter in self._exporters:
            await exporter.shutdown(timeout)


@dataclass
class Agent:
    """Everything `ragpulse run` starts, in start order."""

    source: Source
    pipeline: Pipeline
    budget: BudgetController
    metrics_server: MetricsServer
    redis: Any = None  # the one redis.asyncio client (verdict cache, idempotency keys, budget), if configured
    # A start-up call that reports a misconfigured LLM judge by a clear log line (None: no check).
    self_check: Callable[[], Coroutine[Any, Any, object]] | None = None
    shutdown_timeout: float = 10.0
    # Sources that cannot redeliver (OTLP) assemble what is buffered at shutdown; Kafka keeps it.
    flush_incomplete: bool = True
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
        timeout = self.shutdown_timeout
        if self._self_check_task is not None:
            self._self_check_task.cancel()
            await asyncio.gather(self._self_check_task, return_exceptions=True)
        await self.dependencies.shutdown()
        await self.source.stop()
        await self.pipeline.shutdown(timeout, flush_incomplete=self.flush_incomplete)
        await self.source.shutdown(timeout)
        await self.budget.shutdown(timeout)
        await self.metrics_server.shutdown(timeout)
        if self.redis is not None:
            await self.redis.aclose()
