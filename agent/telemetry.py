"""The agent's own Prometheus instruments: every name ragpulse exports, defined in one place.

One small group per stage, each built on the injected registry (tests and benchmarks use a fresh
one). A component takes only the group(s) it records into; `Telemetry` builds every group once,
in agent/build.py (and in tests). Labels are bounded: service, route, metric, model, outcome and
reason only; never trace ids or text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from agent.infra.lockless_metrics import LocklessCounter, LocklessHistogram

# `*_created` samples double the exposition size and no dashboard uses them.
disable_created_metrics()

# Scores live in [0, 1]; ten equal buckets keep quantiles readable and series cheap.
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Every signal series exists once per (service, route) pair, up to the series budget's 500 pairs
# (docs/limits.md), so only the two signals whose low tail an operator follows to its traces keep
# buckets. A retriever's scale is its own: cosine similarity and distances in [0, 1] or [0, 2],
# BM25 above.
RETRIEVAL_SCORE_BUCKETS = (0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 5.0, 50.0)
OVERLAP_BUCKETS = (0.2, 0.4, 0.6, 0.8, 0.9, 1.0)
# The other signals show a change as a step of their mean (rate(sum) / rate(count)): a histogram
# without buckets is its sum, its count and the +Inf bucket, which keeps the newest trace id as
# its exemplar; 3 samples per pair instead of 9 to 12.
MEAN_ONLY: tuple[float, ...] = ()
# Chunks keep one bucket, the answers given none: its exemplar leads to an empty retrieval's trace.
CHUNK_BUCKETS = (0,)
LOOP_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class IntakeTelemetry:
    """Sources and the pipeline's intake: what came in, what was refused or dead-lettered, and
    whether intake keeps up (delivery and refusals: what an operator needs to see an outage or a
    stuck replica)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.spans_received = Counter(
            "ragpulse_spans_received", "Spans decoded from any source.", ["source"], registry=registry
        )
        self.requests_refused = Counter(
            "ragpulse_requests_refused",
            "Requests a receiver refused, by source and reason (too_large, unsupported_media_type, "
            "bad_request, undecodable, overloaded, judge_unavailable, unauthorized).",
            ["source", "reason"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "ragpulse_dead_letters",
            "Input that could not be processed, by reason (undecodable, invalid_id, ...).",
            ["reason"],
            registry=registry,
        )
        self.paused = Gauge(
            "ragpulse_intake_paused",
            "1 while intake is paused, by reason (queue_full, judge_unavailable).",
            ["reason"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "ragpulse_evaluation_queue_depth", "Interactions waiting for evaluation.", registry=registry
        )
        self.oldest_unfinished = Gauge(
            "ragpulse_oldest_unfinished_seconds",
            "Age of the oldest interaction taken in and not yet scored (0 when none).",
            registry=registry,
        )


class AssemblyTelemetry:
    """The trace assembler and the series budget of its labels (bounds: docs/limits.md)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.spans_assembled = Counter(
            "ragpulse_spans_assembled", "Spans that became part of an interaction.", registry=registry
        )
        self.spans_skipped = Counter(
            "ragpulse_spans_skipped",
            "Spans that yield no interaction, by reason "
            "(not_rag, incomplete, evicted, self, duplicate, late).",
            ["reason"],
            registry=registry,
        )
        self.evictions = Counter(
            "ragpulse_assembler_evictions",
            "Buffered traces (or spans of a full trace) evicted to bound memory, by reason "
            "(max_traces, max_spans_per_trace, max_chunk_bytes).",
            ["reason"],
            registry=registry,
        )
        self.buffered_spans = Gauge(
            "ragpulse_assembler_buffered_spans",
            "Spans waiting in the assembler for the rest of their trace.",
            registry=registry,
        )
        self.buffered_traces = Gauge(
            "ragpulse_assembler_buffered_traces", "Traces waiting in the assembler.", registry=registry
        )
        self.buffered_bytes = Gauge(
            "ragpulse_assembler_buffered_bytes",
            "Estimated bytes the assembler holds for buffered traces (bounded by assembly_max_chunk_bytes).",
            registry=registry,
        )
        self.label_overflows = Counter(
            "ragpulse_label_overflows",
            "Interactions whose labels were folded into '__other__' by the series budget, by what "
            "overflowed (route: too many routes for the service; pair: the (service, route) budget).",
            ["kind"],
            registry=registry,
        )


class SamplingTelemetry:
    """The sampler's decisions and the judge budget that throttles it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # Counted on the intake's hot path, on the event loop only: lockless (see SignalsTelemetry).
        self.interactions = LocklessCounter(
            "ragpulse_interactions", "Interactions assembled.", ["service", "route"], registry
        )
        self.sampled = LocklessCounter(
            "ragpulse_interactions_sampled",
            "Interactions kept by the sampler for evaluation.",
            ["service", "route"],
            registry,
        )
        self.rejected = Counter(
            "ragpulse_interactions_rejected",
            "Interactions the base sampling rate would judge that the judge budget turned away "
            "(or keep-rule matches over their cap).",
            registry=registry,
        )
        self.ratio = Gauge(
            "ragpulse_sample_ratio", "Effective sampling ratio.", ["service"], registry=registry
        )
        self.budget_exhausted = Gauge(
            "ragpulse_judge_budget_exhausted",
            "1 while the judge budget (calls/min or USD/h) is spent and sampling is throttled.",
            registry=registry,
        )


class EvaluationTelemetry:
    """Scores and the delivery of evaluated interactions (idempotency, deferrals, exporters)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.evaluations = Counter(
            "ragpulse_evaluations",
            "Metric evaluations by outcome (ok, skipped, error).",
            ["service", "route", "metric", "outcome"],
            registry=registry,
        )
        self.score = Histogram(
            "ragpulse_score",
            "Metric values of evaluated interactions.",
            ["service", "route", "metric"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.evaluations_deferred = Counter(
            "ragpulse_evaluations_deferred",
            "Evaluations put back for a later retry after a retryable judge failure, by reason.",
            ["reason"],
            registry=registry,
        )
        self.duplicates = Counter(
            "ragpulse_duplicates",
            "Interactions delivered again after they were scored (skipped by idempotency key).",
            registry=registry,
        )
        self.idempotency_errors = Counter(
            "ragpulse_idempotency_errors", "Failed reads or writes of idempotency keys.", registry=registry
        )
        self.export_failures = Counter(
            "ragpulse_export_failures",
            "Failed exports of evaluated interactions (retried), by exporter.",
            ["exporter"],
            registry=registry,
        )

    # DeliveryCounters, for agent/delivery.py
    def duplicate(self) -> None:
        self.duplicates.inc()

    def deferred(self, reason: str) -> None:
        self.evaluations_deferred.labels(reason).inc()


class JudgeTelemetry:
    """Every judge wrapper's instruments: calls, cache, latency, tokens and cost, redaction, bounds.

    It is also the sink those wrappers report to (CacheStats, UsageSink, RedactionCounter,
    ErrorCounter), so each takes this group and nothing else.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "ragpulse_judge_requests", "Calls to a judge by outcome.", ["model", "outcome"], registry=registry
        )
        self.cache_hits = Counter(
            "ragpulse_judge_cache_hits", "Verdicts served from the cache.", registry=registry
        )
        self.cache_misses = Counter(
            "ragpulse_judge_cache_misses", "Verdicts the cache did not hold.", registry=registry
        )
        self.cache_errors = Counter(
            "ragpulse_judge_cache_errors",
            "Verdict-cache operations that failed (Redis down); evaluation continued uncached.",
            ["operation"],
            registry=registry,
        )
        self.latency = Histogram(
            "ragpulse_judge_latency_seconds",
            "Wall time of one judge call.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter(
            "ragpulse_judge_tokens", "Tokens used by judge calls.", ["model", "kind"], registry=registry
        )
        self.cost = Counter(
            "ragpulse_judge_cost_usd", "Judge cost in USD as litellm prices it.", ["model"], registry=registry
        )
        self.unpriced_calls = Counter(
            "ragpulse_judge_unpriced_calls",
            "Judge calls litellm has no price for (their cost is not in ragpulse_judge_cost_usd).",
            ["model"],
            registry=registry,
        )
        self.redactions = Counter(
            "ragpulse_redactions",
            "Personal data values replaced by placeholders before text left for a judge, by kind "
            "(email, phone, card, iban, ip, or a custom kind).",
            ["kind"],
            registry=registry,
        )
        self.texts_truncated = Counter(
            "ragpulse_judge_texts_truncated",
            "Texts cut to judge_max_text_chars before judging.",
            registry=registry,
        )

    # CacheStats, for CachedJudge
    def hits(self, n: int) -> None:
        if n:
            self.cache_hits.inc(n)

    def misses(self, n: int) -> None:
        if n:
            self.cache_misses.inc(n)

    # UsageSink, for LLMJudge
    def record_usage(
        self, model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None
    ) -> None:
        self.tokens.labels(model, "prompt").inc(prompt_tokens)
        self.tokens.labels(model, "completion").inc(completion_tokens)
        if cost_usd is None:
            self.unpriced_calls.labels(model).inc()
        else:
            self.cost.labels(model).inc(cost_usd)

    # RedactionCounter, for RedactingJudge
    def redacted(self, kind: str, n: int) -> None:
        self.redactions.labels(kind).inc(n)

    # ErrorCounter, for RedisVerdictCache
    def cache_error(self, operation: str) -> None:
        self.cache_errors.labels(operation).inc()


class DriftTelemetry:
    """The drift detectors, and the quality thresholds the alert rules compare score means with
    (exported so alert rules need no editing when the setting changes)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.score = Gauge(
            "ragpulse_drift_score",
            "Evidence of a drop below baseline (CUSUM over its threshold; >= 1 alarms).",
            ["service", "route", "metric"],
            registry=registry,
        )
        self.detected = Gauge(
            "ragpulse_drift_detected",
            "1 while a drop below baseline is detected and confirmed by the window test.",
            ["service", "route", "metric"],
            registry=registry,
        )
        self.state_errors = Counter(
            "ragpulse_drift_state_errors",
            "Failed loads or saves of drift detector state in Redis, by operation (the detector "
            "carries on in memory).",
            ["operation"],
            registry=registry,
        )
        self.quality_threshold = Gauge(
            "ragpulse_quality_threshold",
            "Score mean below which the quality alert fires (setting alert_thresholds); "
            "service is empty for the threshold of every service.",
            ["service", "metric"],
            registry=registry,
        )

    def set_thresholds(self, thresholds: Mapping[str, float]) -> None:
        """Export the quality alert's thresholds, keyed `metric` or `service/metric`."""
        for key, threshold in thresholds.items():
            service, _, metric = key.rpartition("/")
            self.quality_threshold.labels(service, metric).set(threshold)


class KafkaTelemetry:
    """The Kafka source's consumer: lag, partitions owned, offset commits."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.consumer_lag = Gauge(
            "ragpulse_consumer_lag",
            "Messages between the consumer's position and the partition's end.",
            ["topic", "partition"],
            registry=registry,
        )
        self.assigned_partitions = Gauge(
            "ragpulse_kafka_assigned_partitions",
            "Partitions this replica owns in its consumer group.",
            ["topic"],
            registry=registry,
        )
        self.commit_failures = Counter(
            "ragpulse_kafka_commit_failures",
            "Offset commits that failed (messages get redelivered).",
            registry=registry,
        )


class TrustTelemetry:
    """Trust (agent/trust): human labels and prediction-powered estimates of the true quality."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.quality_estimate = Gauge(
            "ragpulse_quality_estimate",
            "Prediction-powered estimate of a metric's true mean in the latest window with enough "
            "human labels: bound=mean, or the low/high end of its 95% confidence interval.",
            ["service", "route", "metric", "bound"],
            registry=registry,
        )
        self.quality_estimate_labels = Gauge(
            "ragpulse_quality_estimate_labels",
            "Human labels behind ragpulse_quality_estimate (its window's labelled interactions).",
            ["service", "route", "metric"],
            registry=registry,
        )
        self.labels_received = Counter(
            "ragpulse_labels",
            "Human labels read from annotation spans, by outcome (joined, not_requested, unmatched, "
            "no_score, expired, duplicate, invalid).",
            ["outcome"],
            registry=registry,
        )
        self.label_requests = Counter(
            "ragpulse_label_requests",
            "Scored interactions drawn for human labelling.",
            ["service", "route"],
            registry=registry,
        )


class RuntimeTelemetry:
    """Event-loop health (hostile input; docs/limits.md)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.event_loop_lag = Histogram(
            "ragpulse_event_loop_lag_seconds",
            "How late the event loop woke a 100 ms timer: time it was blocked by CPU work.",
            buckets=LOOP_LAG_BUCKETS,
            registry=registry,
        )
        self.event_loop_lag_max = Gauge(
            "ragpulse_event_loop_lag_max_seconds",
            "Longest event-loop stall seen since the agent started.",
            registry=registry,
        )


class SignalsTelemetry:
    """Signals on every assembled interaction, before sampling and without a judge (agent/signals.py).

    Recorded on the intake's hot path, so the per-interaction families are lockless (one writer,
    the event loop; agent/infra/lockless_metrics.py); each observation keeps its trace id as the
    bucket's exemplar, as `ragpulse_score` does. Only the top-1 score and the overlap have buckets
    (and chunks one: none); the others are read as means (`MEAN_ONLY`). The drift gauges change
    once per batch of interactions and are ordinary gauges.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["service", "route"]
        every = "every assembled interaction, before sampling"
        self.searches = LocklessHistogram(
            "ragpulse_agent_searches",
            "Searches (retrievals and search-tool calls) that fed each answer, per service and route; "
            f"{every} (no buckets: sum / count is the mean).",
            labels,
            MEAN_ONLY,
            registry,
        )
        self.empty_searches = LocklessCounter(
            "ragpulse_agent_empty_searches",
            f"Searches that returned nothing, per service and route ({every}).",
            labels,
            registry,
        )
        self.tool_errors = LocklessCounter(
            "ragpulse_agent_tool_errors",
            f"Tool calls that failed while an answer was prepared, per service and route ({every}).",
            labels,
            registry,
        )
        self.top_score = LocklessHistogram(
            "ragpulse_retrieval_top_score",
            "Score the application's retriever gave the first-ranked chunk (its own scale: similarity, "
            f"distance or BM25), where the spans carry scores; {every}.",
            labels,
            RETRIEVAL_SCORE_BUCKETS,
            registry,
        )
        self.mean_score = LocklessHistogram(
            "ragpulse_retrieval_mean_score",
            f"Mean retriever score of the chunks that carry one; {every} (no buckets).",
            labels,
            MEAN_ONLY,
            registry,
        )
        self.chunks = LocklessHistogram(
            "ragpulse_retrieved_chunks",
            f"Chunks the answer was given; {every} (one bucket: none).",
            labels,
            CHUNK_BUCKETS,
            registry,
        )
        self.context_characters = LocklessHistogram(
            "ragpulse_context_characters",
            f"Characters of retrieved context the answer was given; {every} (no buckets).",
            labels,
            MEAN_ONLY,
            registry,
        )
        self.response_characters = LocklessHistogram(
            "ragpulse_response_characters",
            f"Characters of the response; {every} that has one (no buckets).",
            labels,
            MEAN_ONLY,
            registry,
        )
        self.empty_retrievals = LocklessCounter(
            "ragpulse_empty_retrievals",
            f"Answers whose retrieval ran and returned no chunk at all; {every}.",
            labels,
            registry,
        )
        self.refusals = LocklessCounter(
            "ragpulse_refusals",
            "Answers that say they do not know or cannot answer from the context (the rule in "
            f"docs/signals.md); {every}.",
            labels,
            registry,
        )
        self.overlap = LocklessHistogram(
            "ragpulse_response_context_overlap",
            "Share of the response's content words found in its context; every interaction up to "
            "signals_overlap_per_second, beyond it the first ones of each second.",
            labels,
            OVERLAP_BUCKETS,
            registry,
        )
        self.drift_score = Gauge(
            "ragpulse_signal_drift_score",
            "Drift statistic of a signal (CUSUM over its threshold; >= 1: the CUSUM alarms; 0 while the "
            "baseline is learnt), per service, route and signal (retrieval_top_score, retrieval_hit, "
            "answered, overlap).",
            ["service", "route", "signal"],
            registry=registry,
        )
        self.drift_detected = Gauge(
            "ragpulse_signal_drift_detected",
            "1 while a signal's drift is confirmed by the window test, per service, route and signal.",
            ["service", "route", "signal"],
            registry=registry,
        )


class DocumentsTelemetry:
    """The documents behind low scores: a bounded top-N per service and verdict (exporters/documents.py)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.verdicts = Gauge(
            "ragpulse_document_verdicts",
            "Times a document was judged useless, useful or irrelevant, for the top documents of each "
            "service and verdict only (documents_top_n); an upper bound (space-saving summary).",
            ["service", "verdict", "document"],
            registry=registry,
        )

    def set(self, service: str, verdict: str, document: str, count: float) -> None:
        self.verdicts.labels(service, verdict, document).set(count)

    def remove(self, service: str, verdict: str, document: str) -> None:
        self.verdicts.remove(service, verdict, document)


class ProbeTelemetry:
    """Golden probes and the judge canary (docs/probes.md), apart from the production series:
    probe interactions never feed ragpulse_score, sampling, drift or the judge budget (their judge
    calls are counted in the judge's own instruments). `probe_set` is bounded by probes_max_sets."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.interactions = Counter(
            "ragpulse_probe_interactions",
            "Probe interactions assembled (always scored, never sampled), per probe set.",
            ["probe_set"],
            registry=registry,
        )
        self.score = Histogram(
            "ragpulse_probe_score",
            "Scores of probe interactions per probe set and metric, reference-based metrics included "
            "(context_recall, answer_correctness, rank metrics such as recall_at_5).",
            ["probe_set", "metric"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.items = Counter(
            "ragpulse_probe_items",
            "Probe items scored, per probe set and outcome (pass: every score at least "
            "probes_pass_score; fail; error: a judge error left a metric unscored).",
            ["probe_set", "outcome"],
            registry=registry,
        )
        self.failures = Counter(
            "ragpulse_probe_failures",
            "Probe items not scored, per probe set and reason: timeout, http_error, no_answer (the "
            "prober's request), trace_missing (the app's spans did not arrive within the assembly wait).",
            ["probe_set", "reason"],
            registry=registry,
        )


class CanaryTelemetry:
    """The judge canary (`ragpulse canary`, docs/probes.md): built by that command on its own
    registry, never by the agents, so an agent exports no canary series it did not measure."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.agreement = Gauge(
            "ragpulse_canary_agreement",
            "Judge canary: agreement of the judge with the frozen human labels, per metric and "
            "statistic (auroc, balanced_accuracy), at the last run.",
            ["metric", "statistic"],
            registry=registry,
        )
        self.mean_shift = Gauge(
            "ragpulse_canary_mean_shift",
            "Judge canary: the judge's mean score on the frozen set minus the last accepted run's, "
            "per metric.",
            ["metric"],
            registry=registry,
        )
        self.moved = Gauge(
            "ragpulse_canary_judge_moved",
            "Judge canary: 1 while the last run found the judge moved (agreement or mean outside tolerance).",
            registry=registry,
        )
        self.last_run = Gauge(
            "ragpulse_canary_last_run_timestamp_seconds",
            "Judge canary: Unix time the last run finished.",
            registry=registry,
        )


class DemoTelemetry:
    """`ragpulse demo` only, on the demo agent's registry: which traffic phase is being sent."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.phase = Gauge(
            "ragpulse_demo_phase",
            "Demo traffic phase: 0 healthy, 1 irrelevant chunks ranked first, 2 missing facts",
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class PipelineTelemetry:
    """The groups the pipeline itself records into (agent/pipeline.py)."""

    intake: IntakeTelemetry
    assembly: AssemblyTelemetry
    sampling: SamplingTelemetry
    evaluation: EvaluationTelemetry


class Telemetry:
    """Every group, built once on one registry. Only the composition root (and tests) hold it;
    components take the group they record into."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.intake = IntakeTelemetry(registry)
        self.assembly = AssemblyTelemetry(registry)
        self.sampling = SamplingTelemetry(registry)
        self.evaluation = EvaluationTelemetry(registry)
        self.judge = JudgeTelemetry(registry)
        self.drift = DriftTelemetry(registry)
        self.kafka = KafkaTelemetry(registry)
        self.trust = TrustTelemetry(registry)
        self.runtime = RuntimeTelemetry(registry)
        self.signals = SignalsTelemetry(registry)
        self.documents = DocumentsTelemetry(registry)
        self.probes = ProbeTelemetry(registry)

    @property
    def pipeline(self) -> PipelineTelemetry:
        return PipelineTelemetry(self.intake, self.assembly, self.sampling, self.evaluation)
