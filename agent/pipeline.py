"""The running pipeline: Source → decode → assemble → route → sample → evaluate → mark → export.

`Pipeline` is the intake and evaluation loop: sources hand it decoded requests, it assembles them
and sends each interaction down its route synchronously, and a fixed pool of asyncio workers
evaluates what the routes kept, so that intake never waits on a judge. A route is one kind of
traffic with its own chain (production: sampled, evaluated by the configured metrics, exported to
Prometheus, drift, results; probes: always kept, their own scorer and series), and observers hang
on each route's list. The pipeline knows no feature: `Agent` holds it with the other components.
Both are wired from the settings in agent/build.py, and only there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.config import PipelineSettings
from agent.delivery import Delivery, Job, Retry, WorkLedger
from agent.evaluate import Evaluation
from agent.exporters.base import Exporter
from agent.infra.lifecycle import Lifecycle
from agent.infra.lockless_metrics import CounterChild
from agent.infra.throttled_log import ThrottledLog
from agent.infra.waiting import Dependencies
from agent.model import Evaluated, Mark, MetricResult, RagInteraction, SamplingDecision
from agent.observers import Marker, Observer
from agent.otlp import mark_own_telemetry
from agent.otlp.assemble import Assembler, Assembly
from agent.otlp.decode import DecodedRequest
from agent.otlp.logs import DecodedLogs
from agent.sampling import THROTTLED_REASONS, Sampler
from agent.sources.base import Source
from agent.telemetry import PipelineTelemetry

log = logging.getLogger(__name__)

_DEAD_LETTER_LOG_INTERVAL = 10.0  # seconds between log lines per reason; counters see every one
_EXPIRY_TICKS_PER_WAIT = 10  # the assembler's wait is overrun by at most a tenth
ALWAYS = SamplingDecision(True, "route")  # the decision of a route without a sampler


class Assessor(Protocol):
    async def assess(self, interaction: RagInteraction) -> Evaluation: ...


@dataclass(frozen=True)
class Route:
    """One kind of traffic and its own chain: sampled by `sampler` (None: every interaction is
    kept, outside the sampling series), evaluated by `evaluator`, marked by `markers`, exported
    by `exporters` in order (durable ones first: when one fails the interaction is retried and
    the in-process ones have not counted it yet), watched by `observers`."""

    name: str
    evaluator: Assessor
    exporters: Sequence[Exporter]
    sampler: Sampler | None = None
    observers: Sequence[Observer] = ()
    markers: Sequence[Marker] = ()


def _unique(items: Sequence[Any]) -> list[Any]:
    return list({id(item): item for item in items}.values())


class Pipeline:
    """Intake (synchronous, on the event loop) and the evaluation worker pool.

    What is promised about each interaction (leased once, deferred while the judge is away,
    committed only when finished) lives in agent/delivery.py; this class wires the stages.
    """

    def __init__(
        self,
        assembler: Assembler,
        routes: Mapping[str, Route],
        route_of: Callable[[RagInteraction], str],
        delivery: Delivery,
        telemetry: PipelineTelemetry,
        settings: PipelineSettings | None = None,
        *,
        assembly_wait_seconds: float = 30.0,
        dependencies: Dependencies | None = None,
    ) -> None:
        """`route_of` names the route of each assembled interaction; `delivery` keeps the promises
        about each (agent/delivery.py); `dependencies` are awaited at start-up (intake waits);
        `assembly_wait_seconds` is the assembler's bounded wait, which its expiry ticks follow."""
        self._assembler = assembler
        self._routes = dict(routes)
        self._route_of = route_of
        self._delivery = delivery
        self._leases = delivery.leases
        self.gate = delivery.gate
        self._dependencies = dependencies or Dependencies()
        self._intake = telemetry.intake
        self._assembly = telemetry.assembly
        self._sampling = telemetry.sampling
        self._evaluation = telemetry.evaluation
        settings = settings or PipelineSettings()
        self._max_pending = settings.max_pending
        self._concurrency = settings.eval_concurrency
        observers: list[Observer] = _unique([o for r in self._routes.values() for o in r.observers])
        self._observers = tuple(observers)  # on_spans and on_assembly: all intake
        exporters: list[Exporter] = _unique([e for r in self._routes.values() for e in r.exporters])
        # Started in this order, shut down in reverse: exporters, observers (each once, whatever
        # roles it has), then the leases, whose done marks are written before the exporters close.
        self._components: tuple[Lifecycle, ...] = (*_unique([*exporters, *observers]), self._leases)
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._ledger = WorkLedger()
        self._workers: list[asyncio.Task[None]] = []
        self._expiry: asyncio.Task[None] | None = None
        self._expiry_interval = min(1.0, assembly_wait_seconds / _EXPIRY_TICKS_PER_WAIT)
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
        for observer in self._observers:
            observer.on_spans(request.spans, source)
        self._take(self._assembler.add(request.spans, sequence))
        return sequence

    def accept_logs(self, logs: DecodedLogs, source: str) -> None:
        # GenAI events written as log records wait in the assembler for their span.
        self._assembler.add_logs(logs.events)

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
        for observer in self._observers:
            observer.on_assembly(assembly)
        services: set[tuple[Sampler, str]] = set()
        routes, route_of = self._routes, self._route_of
        for origin, interaction in zip(assembly.origins, assembly.interactions, strict=True):
            name = route_of(interaction)
            route = routes[name]
            for observer in route.observers:
                observer.on_interaction(interaction)
            sampler = route.sampler
            if sampler is None:
                decision = ALWAYS
            else:
                labels = (interaction.service, interaction.route)
                counters = self._counters.get(labels)
                if counters is None:  # bounded: labels come from the series budget
                    counters = self._counters[labels] = (
                        sampling.interactions.labels(*labels),
                        sampling.sampled.labels(*labels),
                    )
                counters[0].inc()
                services.add((sampler, interaction.service))
                decision = sampler.decide(interaction)
                if decision.keep:
                    counters[1].inc()
                elif decision.reason in THROTTLED_REASONS:
                    sampling.rejected.inc()
            if decision.keep:
                # The queue is unbounded on purpose: admission control happens per request in
                # accepting(), so a request that was accepted is never half-enqueued.
                self._queue.put_nowait(Job(origin, interaction, decision, name))
                self._ledger.add(origin)
        for sampler, service in services:
            sampling.ratio.labels(service).set(sampler.ratio(service))
        self._intake.queue_depth.set(self._queue.qsize())
        self._publish_watermark()

    # -- Evaluation -----------------------------------------------------------------------------

    async def start(self) -> None:
        for component in self._components:
            await component.start()
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

    async def _assess(self, job: Job) -> Evaluation:
        return await self._routes[job.route].evaluator.assess(job.interaction)

    async def _export(self, job: Job, results: Sequence[MetricResult]) -> bool:
        """Mark, then export to every exporter of the job's route; False (retry later) when one
        fails. Marks are decided once here, so every exporter reads the same decision."""
        route, interaction = self._routes[job.route], job.interaction
        marks: tuple[Mark, ...] = ()
        for marker in route.markers:
            mark = marker.mark(interaction, results)
            if mark is not None:
                marks = (*marks, mark)
        evaluated = Evaluated(interaction, results, job.decision, marks)
        for exporter in route.exporters:
            try:
                await exporter.export(evaluated)
            except Exception as exc:
                name = type(exporter).__name__
                self._evaluation.export_failures.labels(name).inc()
                self._export_failures.warning(
                    name, "export of %s by %s failed, will retry: %s", interaction.interaction_id, name, exc
                )
                return False
        for observer in route.observers:
            observer.on_evaluated(evaluated)
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
        self._publish_watermark()
        for component in reversed(self._components):
            await component.shutdown(timeout)

    @property
    def components(self) -> tuple[Lifecycle, ...]:
        """The exporters and observers of every route (each once), then the leases: in start order."""
        return self._components

    async def flush(self) -> None:
        for component in self._components:
            await component.flush()


@dataclass
class Agent:
    """Everything `ragpulse run` starts: the source, the pipeline and the other components.

    `components` (the metrics server, dependencies, the Redis client, the judge budget) start in
    order before the pipeline and the source, and stop in reverse after them. The commit order
    (agent/delivery.py) is kept here and only here: stop intake, finish or hand back the
    evaluations, commit only what is finished, then stop the rest.
    """

    source: Source
    pipeline: Pipeline
    components: Sequence[Lifecycle] = ()
    # A start-up call that reports a misconfigured LLM judge by a clear log line (None: no check).
    self_check: Callable[[], Coroutine[Any, Any, object]] | None = None
    shutdown_timeout: float = 10.0
    # Sources that cannot redeliver (OTLP) assemble what is buffered at shutdown; Kafka keeps it.
    flush_incomplete: bool = True
    # Kafka, Redis, the OTLP results endpoint: what start-up waits for (one of `components`).
    dependencies: Dependencies = field(default_factory=Dependencies)
    _self_check_task: asyncio.Task[object] | None = field(default=None, init=False)

    async def start(self) -> None:
        mark_own_telemetry()  # any OpenTelemetry SDK set up in this process tags its spans as ours
        for component in self.components:
            await component.start()
        await self.pipeline.start()
        await self.source.start(self.pipeline)
        if self.self_check is not None:
            # In the background: a slow judge must not hold up intake or readiness.
            self._self_check_task = asyncio.create_task(self.self_check(), name="judge-self-check")

    async def flush(self) -> None:
        """Hand on what every part holds: the source's input reaches the pipeline (and Kafka
        commits what is finished), then the pipeline's and the other components' state is sent."""
        await self.source.flush()
        await self.pipeline.flush()
        for component in self.components:
            await component.flush()

    async def shutdown(self) -> None:
        """Stop intake, finish or hand back evaluations, then commit only what is finished."""
        timeout = self.shutdown_timeout
        if self._self_check_task is not None:
            self._self_check_task.cancel()
            await asyncio.gather(self._self_check_task, return_exceptions=True)
        await self.source.stop()
        await self.pipeline.shutdown(timeout, flush_incomplete=self.flush_incomplete)
        await self.source.shutdown(timeout)
        for component in reversed(self.components):
            await component.shutdown(timeout)
