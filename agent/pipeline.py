"""The one place that knows the topology: Source → decode → assemble → sample → evaluate → export.

`build_agent` wires the stages from Settings; `Pipeline` is the running intake and evaluation
loop: sources hand it decoded requests, it assembles and samples them synchronously, and a fixed
pool of asyncio workers evaluates the sampled interactions so that intake never waits on a judge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from agent.config import ConfigError, Settings
from agent.evaluate import Evaluator
from agent.exporters.base import Exporter
from agent.exporters.prometheus import MetricsServer, PrometheusExporter
from agent.judges.base import Judge
from agent.judges.cache import CachedJudge, MemoryVerdictCache
from agent.judges.instrumented import InstrumentedJudge
from agent.judges.local import LexicalJudge
from agent.labels import LabelLimiter
from agent.metrics import STREAMING_METRICS
from agent.model import RagInteraction
from agent.otlp import mark_own_telemetry
from agent.otlp.assemble import Assembler, Assembly, Labeller, TraceAssembler
from agent.otlp.conventions.genai import GenAI
from agent.otlp.conventions.manual import Manual
from agent.otlp.conventions.openinference import OpenInference
from agent.otlp.conventions.openllmetry import OpenLLMetry
from agent.otlp.decode import DecodedRequest
from agent.sampling import Sampler, TraceIdRatioSampler
from agent.sources.base import Source
from agent.sources.otlp_http import OtlpHttpSource
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
        assembly_wait_seconds: float = 30.0,
    ) -> None:
        self._assembler = assembler
        self._sampler = sampler
        self._evaluator = evaluator
        self._exporters = tuple(exporters)
        self._telemetry = telemetry
        self._max_pending = max_pending
        self._concurrency = concurrency
        self._queue: asyncio.Queue[RagInteraction] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._expiry: asyncio.Task[None] | None = None
        self._expiry_interval = min(1.0, assembly_wait_seconds / _EXPIRY_TICKS_PER_WAIT)
        self._last_dead_letter_log: dict[str, float] = {}

    # -- Intake ---------------------------------------------------------------------------------

    def accepting(self) -> bool:
        return self._queue.qsize() < self._max_pending

    def accept(self, request: DecodedRequest, source: str) -> None:
        telemetry = self._telemetry
        received = len(request.spans) + len(request.rejected)
        if received:
            telemetry.spans_received.labels(source).inc(received)
        for reason in request.rejected:
            self.dead_letter(reason, "span with a malformed trace or span id")
        self._take(self._assembler.add(request.spans))

    def dead_letter(self, reason: str, detail: str, count: int = 1) -> None:
        self._telemetry.dead_letters.labels(reason).inc(count)
        now = time.monotonic()
        if now - self._last_dead_letter_log.get(reason, float("-inf")) >= _DEAD_LETTER_LOG_INTERVAL:
            self._last_dead_letter_log[reason] = now
            log.warning("dead letter (%s): %s", reason, detail)

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
        for interaction in assembly.interactions:
            labels = (interaction.service, interaction.route)
            telemetry.interactions.labels(*labels).inc()
            telemetry.sample_ratio.labels(interaction.service).set(self._sampler.ratio(interaction.service))
            if self._sampler.decide(interaction).keep:
                telemetry.interactions_sampled.labels(*labels).inc()
                # The queue is unbounded on purpose: admission control happens per request in
                # accepting(), so a request that was accepted is never half-enqueued.
                self._queue.put_nowait(interaction)
        telemetry.queue_depth.set(self._queue.qsize())

    # -- Evaluation -----------------------------------------------------------------------------

    async def start(self) -> None:
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
        while True:
            interaction = await self._queue.get()
            try:
                results = await self._evaluator.evaluate(interaction)
                for exporter in self._exporters:
                    exporter.export(interaction, results)
            except Exception:  # stage boundary: log, count as errors, keep the worker alive
                log.exception("evaluation of %s failed", interaction.interaction_id)
            finally:
                self._queue.task_done()
                self._telemetry.queue_depth.set(self._queue.qsize())

    async def shutdown(self, timeout: float) -> None:
        """Flush the assembler, finish queued evaluations within `timeout`, then stop workers."""
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        self._take(self._assembler.flush())
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            log.warning(
                "shutdown: %d interaction(s) left unevaluated after %.1fs", self._queue.qsize(), timeout
            )
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for exporter in self._exporters:
            exporter.shutdown(timeout)


@dataclass
class Agent:
    """Everything `ragpulse run` starts, in start order."""

    settings: Settings
    telemetry: Telemetry
    source: Source
    pipeline: Pipeline
    metrics_server: MetricsServer

    async def start(self) -> None:
        mark_own_telemetry()  # any OpenTelemetry SDK set up in this process tags its spans as ours
        await self.metrics_server.start()
        await self.pipeline.start()
        await self.source.start(self.pipeline)

    async def shutdown(self) -> None:
        timeout = self.settings.shutdown_timeout_seconds
        await self.source.shutdown(timeout)
        await self.pipeline.shutdown(timeout)
        await self.metrics_server.shutdown(timeout)


def build_judge(settings: Settings, telemetry: Telemetry) -> Judge:
    if not settings.judge_is_local:
        raise ConfigError(
            f"judge_model {settings.judge_model!r}: only the local 'lexical' judge is available"
        )
    judge: Judge = InstrumentedJudge(LexicalJudge(), telemetry)
    cache = MemoryVerdictCache(settings.cache_max_entries)
    return CachedJudge(judge, cache, telemetry)


def build_agent(settings: Settings, registry: CollectorRegistry | None = None) -> Agent:
    telemetry = Telemetry(registry if registry is not None else CollectorRegistry())
    labeller = Labeller(
        settings.route_attributes,
        limit_service=LabelLimiter(settings.max_label_values),
        limit_route=LabelLimiter(settings.max_label_values),
    )
    pipeline = Pipeline(
        assembler=TraceAssembler(
            [OpenInference(), OpenLLMetry(), GenAI(), Manual()],
            labeller,
            wait_seconds=settings.assembly_wait_seconds,
            max_traces=settings.assembly_max_traces,
            max_spans_per_trace=settings.assembly_max_spans_per_trace,
            max_chunk_bytes=settings.assembly_max_chunk_bytes,
        ),
        sampler=TraceIdRatioSampler(settings.sample_rate),
        evaluator=Evaluator(
            [STREAMING_METRICS[name]() for name in settings.metrics], build_judge(settings, telemetry)
        ),
        exporters=[PrometheusExporter(telemetry)],
        telemetry=telemetry,
        max_pending=settings.max_pending,
        concurrency=settings.eval_concurrency,
        assembly_wait_seconds=settings.assembly_wait_seconds,
    )
    source = OtlpHttpSource(*settings.otlp_address, max_body_bytes=settings.otlp_max_body_bytes)
    metrics_server = MetricsServer(telemetry.registry, *settings.metrics_address, ready=source.ready)
    return Agent(settings, telemetry, source, pipeline, metrics_server)
