"""The composition root: the one place that reads Settings and wires the agent from them.

Besides the CLI commands, nothing else reads `Settings`: each component here gets its own small
frozen config (or the settings section it owns). Every configuration mistake found while
building, including those that need the rest of ragpulse to see (an unknown metric, a keep rule
that does not parse, a calibration file that does not load), is a `ConfigError` that names the
setting, where it came from and its environment variable.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from agent.budget import BudgetController, MemoryLedger, RedisLedger, SpendCounter, SpendLedger
from agent.config import ConfigError, KafkaSettings, Settings, load_settings
from agent.drift import DriftConfig
from agent.drift_store import RedisDriftStore
from agent.evaluate import Evaluator
from agent.exporters.base import Exporter
from agent.exporters.documents import DocumentsConfig, DocumentSummary
from agent.exporters.drift import DriftAggregator
from agent.exporters.prometheus import MetricsServer, PrometheusExporter
from agent.idempotency import IdempotencyStore, MemoryIdempotency, RedisIdempotency
from agent.infra.endpoint_security import EndpointSecurity, load_web_config, otlp_security
from agent.infra.looplag import LoopLagMonitor
from agent.infra.waiting import Dependencies
from agent.judges.base import Judge, SpendSink
from agent.judges.cache import CachedJudge, MemoryVerdictCache, VerdictCache
from agent.judges.instrumented import InstrumentedJudge
from agent.judges.local import LexicalJudge
from agent.judges.offload import BoundedJudge
from agent.judges.redacting import RedactingJudge
from agent.metrics import METRICS
from agent.otlp.assemble import Labeller, TraceAssembler
from agent.otlp.conventions import Convention
from agent.otlp.conventions.genai import GenAI
from agent.otlp.conventions.manual import Manual
from agent.otlp.conventions.openinference import OpenInference
from agent.otlp.conventions.openllmetry import OpenLLMetry
from agent.pipeline import Agent, Pipeline, PipelineConfig, ProbeStage
from agent.probes.results import ProbeResults, ProbeResultsConfig
from agent.probes.scoring import ProbeScorer, ProbeScoring
from agent.sampling import KeepRule, RateTable, RuleSampler
from agent.series_budget import SeriesBudget
from agent.signals import SignalRecorder, SignalsConfig
from agent.sources.base import Source
from agent.sources.otlp_http import OtlpHttpSource
from agent.telemetry import (
    IntakeTelemetry,
    JudgeTelemetry,
    Telemetry,
)
from agent.trust.aggregator import PpiAggregator, PpiConfig, rate_sampled
from agent.trust.calibration import CalibrationError, load_calibrations
from agent.trust.label_sampling import LabelSampler

log = logging.getLogger(__name__)


# -- Checks that need the rest of ragpulse ------------------------------------------------------


def check_settings(settings: Settings) -> None:
    """Raise a ConfigError for a value whose shape is right but which ragpulse cannot use."""
    unknown = [name for name in settings.metrics if name not in METRICS]
    if unknown:
        raise settings.error("metrics", f"unknown metric(s) {unknown}; choose from {sorted(METRICS)}")
    unknown = [key for key in settings.alerts.thresholds if key.rpartition("/")[2] not in METRICS]
    if unknown:
        raise settings.error(
            "alert_thresholds", f"unknown metric(s) {unknown}; choose from {sorted(METRICS)}"
        )
    try:
        RateTable.parse(settings.sampling.rate, settings.sampling.rates)
    except ValueError as exc:
        raise settings.error("sample_rates", str(exc)) from None
    for rule in settings.sampling.keep_rules:
        try:
            KeepRule.parse(rule)
        except ValueError as exc:
            raise settings.error("sample_keep_rules", str(exc)) from None
    _check_redaction(settings)
    if settings.trust.calibration_file is not None:
        try:
            load_calibrations(Path(settings.trust.calibration_file))
        except CalibrationError as exc:
            raise settings.error("calibration_file", str(exc)) from None


def load_checked_settings(**sources: Any) -> Settings:
    """`load_settings(**sources)`, then `check_settings`: what every command runs before it starts."""
    settings = load_settings(**sources)
    check_settings(settings)
    return settings


def _check_redaction(settings: Settings) -> None:
    from agent.redact import BUILTIN_KINDS, RedactionConfigError, RedactionRules, Redactor

    unknown = sorted(set(settings.security.kinds) - set(BUILTIN_KINDS))
    if unknown:
        raise settings.error("redact_kinds", f"unknown kind(s) {unknown}; choose from {list(BUILTIN_KINDS)}")
    try:
        Redactor(RedactionRules(patterns=settings.security.patterns))
    except RedactionConfigError as exc:
        raise settings.error("redact_patterns", str(exc)) from None


# -- Components ----------------------------------------------------------------------------------


# The judge metrics use: cache → instruments → local or LLM judge, behind redaction when it is on.
def build_verdict_cache(settings: Settings, telemetry: JudgeTelemetry, redis: Any = None) -> VerdictCache:
    """Redis when configured (sharing `redis`, the agent's one client, if given), else in-process."""
    if settings.redis.url is None:
        return MemoryVerdictCache(settings.cache.max_entries)
    from agent.judges.redis_cache import RedisVerdictCache, redis_client

    return RedisVerdictCache(
        redis if redis is not None else redis_client(settings.redis.url),
        settings.cache.ttl_seconds,
        telemetry,
        prefix=settings.cache.key_prefix,
    )


def build_inner_judge(settings: Settings, telemetry: JudgeTelemetry, spend: SpendSink | None = None) -> Judge:
    """The judge that does the work, without cache or instruments. An LLM judge reports its token
    usage to `telemetry` and the USD it costs to `spend` (the judge budget)."""
    if settings.judge.model == "embedding":
        from agent.judges.embedding import EmbeddingJudge

        return EmbeddingJudge()
    if settings.judge.is_local:
        return LexicalJudge()
    # Imported here: it loads litellm, which a local-judge deployment never needs.
    from agent.judges.llm import LLMJudge, LLMJudgeOptions

    key = settings.judge.api_key.get_secret_value() if settings.judge.api_key else None
    options = LLMJudgeOptions(
        api_base=settings.judge.api_base,
        api_key=key,
        timeout=settings.judge.timeout_seconds,
        max_retries=settings.judge.max_retries,
        retry_max_elapsed=settings.judge.retry_max_elapsed_seconds,
        breaker_failures=settings.judge.breaker_failures,
        breaker_cooldown=settings.judge.breaker_cooldown_seconds,
        max_concurrency=settings.judge.max_concurrency,
        structured_output=settings.judge.structured_output,
        logprobs=settings.judge.logprobs,
    )
    return LLMJudge(settings.judge.model, options, usage=telemetry, spend=spend)


def build_judge(
    settings: Settings,
    telemetry: JudgeTelemetry,
    redis: Any = None,
    *,
    cached: bool = True,
    spend: SpendSink | None = None,
) -> CachedJudge | RedactingJudge | InstrumentedJudge:
    """The judge metrics use: verdict cache in front of an instrumented local or LLM judge, behind
    redaction of personal data when `settings.redacts` (so cache keys see redacted text only).
    `cached=False` leaves the cache out (for questions whose answers it does not keep, such as a
    report's reasons) and nothing else: redaction stays in front.

    `healthy()` on the result is False while an LLM judge's circuit breaker is open. Texts are cut
    to `judge_max_text_chars`, and local judges compute in worker threads, off the event loop.
    Every call that reaches the judge, and its price, is reported to `spend` (the judge budget).
    """
    bounded = BoundedJudge(
        build_inner_judge(settings, telemetry, spend),
        max_text_chars=settings.judge.max_text_chars,
        offload=settings.judge.is_local,
        on_truncate=telemetry.texts_truncated.inc,
    )
    judge: CachedJudge | InstrumentedJudge = InstrumentedJudge(bounded, telemetry, spend)
    if cached:
        judge = CachedJudge(judge, build_verdict_cache(settings, telemetry, redis), telemetry)
    if not settings.redacts:
        return judge
    from agent.redact import RedactionRules, Redactor

    rules = RedactionRules(
        kinds=settings.security.kinds,
        patterns=settings.security.patterns,
        allow=settings.security.allow,
        phone_regions=settings.security.phone_regions,
    )
    return RedactingJudge(judge, Redactor(rules), telemetry)


def drift_config(settings: Settings) -> DriftConfig:
    drift = settings.drift
    return DriftConfig(
        baseline_size=drift.baseline_size, window=drift.window, threshold=drift.threshold, alpha=drift.alpha
    )


def build_signals(settings: Settings, telemetry: Telemetry, redis: Any) -> SignalRecorder:
    """The signals of every interaction; their drift state in Redis beside the judged scores'."""
    drift = settings.drift
    return SignalRecorder(
        telemetry.signals,
        SignalsConfig(
            overlap_per_second=settings.signals.overlap_per_second,
            drift_batch=settings.signals.drift_batch,
            drift=drift_config(settings),
        ),
        store=RedisDriftStore(redis, drift.state_ttl_seconds) if redis is not None else None,
        save_interval=drift.save_interval_seconds,
        on_store_error=lambda operation: telemetry.drift.state_errors.labels(operation).inc(),
    )


def kafka_connection(kafka: KafkaSettings) -> dict[str, Any]:
    """kafka-python options shared by the consumer, the results producer and `label-queue`."""
    password = kafka.sasl_password
    optional = {
        "sasl_mechanism": kafka.sasl_mechanism,
        "sasl_plain_username": kafka.sasl_username,
        "sasl_plain_password": password.get_secret_value() if password else None,
        "ssl_cafile": kafka.ssl_cafile,
        "ssl_certfile": kafka.ssl_certfile,
        "ssl_keyfile": kafka.ssl_keyfile,
    }
    return {
        "bootstrap_servers": list(kafka.bootstrap),
        "security_protocol": kafka.security_protocol,
        **{k: v for k, v in optional.items() if v is not None},
    }


def build_source(
    settings: Settings, telemetry: Telemetry, dependencies: Dependencies | None = None
) -> Source:
    if settings.source == "kafka":
        # Imported here so the embedded default never loads the Kafka client.
        from agent.sources.kafka import KafkaSource, KafkaSourceConfig

        kafka = settings.kafka
        config = KafkaSourceConfig(
            connection=kafka_connection(kafka),
            topic=kafka.topic,
            group_id=kafka.group_id,
            encoding=kafka.encoding,
            auto_offset_reset=kafka.auto_offset_reset,
            session_timeout_ms=kafka.session_timeout_ms,
            heartbeat_interval_ms=kafka.heartbeat_interval_ms,
            max_poll_interval_ms=kafka.max_poll_interval_ms,
            max_partition_fetch_bytes=kafka.max_partition_fetch_bytes,
            fetch_max_bytes=kafka.fetch_max_bytes,
            commit_interval_seconds=kafka.commit_interval_seconds,
        )
        return KafkaSource(config, telemetry.kafka, dependencies=dependencies)
    otlp = settings.otlp
    http = OtlpHttpSource(
        *otlp.address,
        max_body_bytes=otlp.max_body_bytes,
        telemetry=telemetry.intake,
        # 401s are counted with the receiver's other refusals (reason "unauthorized").
        security=otlp_security(otlp),
    )
    grpc_address = otlp.grpc_address
    if grpc_address is None:
        return http
    # Imported here so that disabling gRPC never loads grpcio.
    from agent.sources.composite import CompositeSource
    from agent.sources.grpc_security import interceptors, server_credentials
    from agent.sources.otlp_grpc import SOURCE as GRPC_SOURCE
    from agent.sources.otlp_grpc import OtlpGrpcSource

    unauthorized = telemetry.intake.requests_refused.labels(GRPC_SOURCE, "unauthorized").inc
    grpc = OtlpGrpcSource(
        *grpc_address,
        max_body_bytes=otlp.max_body_bytes,
        refused=telemetry.intake.requests_refused,
        # The same TLS, mTLS and bearer-token settings as OTLP/HTTP (agent/sources/grpc_security.py).
        credentials=server_credentials(otlp),
        interceptors=interceptors(otlp, unauthorized),
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
    results = settings.results
    if results.topic:
        from agent.exporters.kafka_results import KafkaResultsExporter

        exporters.append(
            KafkaResultsExporter(
                kafka_connection(settings.kafka),
                results.topic,
                include_text=results.include_text,
                documents_key=settings.documents.key,
                label_sampler=ppi.sampler if ppi is not None else None,
                dependencies=dependencies,
            )
        )
    if results.otlp_endpoint:
        from agent.exporters.otlp_results import OtlpResultsExporter

        exporters.append(
            OtlpResultsExporter(
                results.otlp_endpoint,
                telemetry.evaluation,
                headers=results.otlp_header_map,
                include_text=results.include_text,
                documents_key=settings.documents.key,
                timeout_seconds=results.otlp_timeout_seconds,
                dependencies=dependencies,
            )
        )
    # In-process exporters last: they count an interaction only once the durable ones succeeded.
    exporters.append(PrometheusExporter(telemetry.evaluation))
    drift = settings.drift
    store = RedisDriftStore(redis, drift.state_ttl_seconds) if redis is not None else None
    exporters.append(
        DriftAggregator(
            telemetry.drift,
            drift_config(settings),
            drift.max_series,
            store=store,
            save_interval=drift.save_interval_seconds,
        )
    )
    documents = DocumentsConfig(
        top_n=settings.documents.top_n, max_services=settings.series.max_pairs, key=settings.documents.key
    )
    exporters.append(DocumentSummary(telemetry.documents, documents))
    if ppi is not None:
        exporters.append(ppi)
    return exporters


def build_ppi(
    settings: Settings,
    telemetry: Telemetry,
    keep_rules: Sequence[KeepRule],
    rates: RateTable,
    budget: BudgetController,
) -> PpiAggregator | None:
    """The streaming prediction-powered estimate as configured; None when label sampling is off."""
    trust = settings.trust
    if trust.label_sample_rate <= 0:
        if trust.calibration_file:
            log.warning("calibration_file is set but label_sample_rate is 0: no estimate uses it")
        return None
    calibrations = load_calibrations(Path(trust.calibration_file)) if trust.calibration_file else None
    for calibration in calibrations.calibrations.values() if calibrations else ():
        judge = calibration.fitted_on.get("judge")
        if judge and judge != settings.judge.model:
            log.warning(
                "calibration of %s was fitted on judge %s, but the judge is %s: re-run ragpulse calibrate",
                calibration.metric, judge, settings.judge.model,
            )  # fmt: skip
        thresholds = ", ".join(
            f"{t.target}>={t.goal:g} below {t.threshold:g}"
            for t in calibration.thresholds
            if t.threshold is not None
        )
        log.info(
            "calibration of %s loaded (%s, %s labels)%s",
            calibration.metric, calibration.method, calibration.fitted_on.get("items", "?"),
            f"; problem thresholds: {thresholds}" if thresholds else "",
        )  # fmt: skip
    return PpiAggregator(
        telemetry.trust,
        PpiConfig(
            window_seconds=trust.ppi_window_seconds,
            min_labels=trust.ppi_min_labels,
            windows_kept=trust.ppi_windows_kept,
            max_series=settings.drift.max_series,
            max_pending=trust.label_max_pending,
        ),
        LabelSampler(
            trust.label_sample_rate,
            trust.label_oversample,
            (trust.label_uncertain_low, trust.label_uncertain_high),
        ),
        calibrations=calibrations,
        uniform=rate_sampled(keep_rules, rates, budget),
    )


def build_probe_stage(settings: Settings, telemetry: Telemetry, redis: Any = None) -> ProbeStage:
    """Probe traces: scored always, with the reference-based metrics, by the configured judge
    through a stack of its own that reports no spend to the budget (its calls are still counted
    in ragpulse_judge_*), into the probe series only."""
    probes = settings.probes
    return ProbeStage(
        ProbeScorer(
            ProbeScoring(tuple(settings.metrics), probes.k), build_judge(settings, telemetry.judge, redis)
        ),
        ProbeResults(
            telemetry.probes, ProbeResultsConfig(pass_score=probes.pass_score, max_sets=probes.max_sets)
        ),
    )


def build_conventions(settings: Settings) -> list[Convention]:
    """The convention adapters, reading the document metadata key documents are named by
    (`documents_key`) and no other metadata: without one, no span's metadata is parsed."""
    keys = (settings.documents.key,) if settings.documents.key else ()
    return [OpenInference(keys), OpenLLMetry(keys), GenAI(keys), Manual(keys)]


def metrics_security(settings: Settings, telemetry: IntakeTelemetry) -> EndpointSecurity:
    if not settings.server.web_config_file:
        return EndpointSecurity()
    refused = telemetry.requests_refused.labels("metrics", "unauthorized").inc
    return load_web_config(settings.server.web_config_file).security(refused)


def build_agent(
    settings: Settings, registry: CollectorRegistry | None = None, observers: Sequence[Exporter] = ()
) -> Agent:
    """The agent `ragpulse run` starts. `observers` are extra in-process exporters that see every
    evaluated interaction after the configured ones (`ragpulse demo`'s live view)."""
    check_settings(settings)
    telemetry = Telemetry(registry if registry is not None else CollectorRegistry())
    for key, threshold in settings.alerts.thresholds.items():
        service, _, metric = key.rpartition("/")
        telemetry.drift.quality_threshold.labels(service, metric).set(threshold)
    redis = None
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    leases = settings.idempotency
    idempotency: IdempotencyStore
    ledger: SpendLedger
    # Kafka, Redis, the OTLP results endpoint: waited for when absent at start (agent/infra/waiting.py).
    dependencies = Dependencies()
    if settings.redis.url:
        from agent.judges.redis_cache import redis_client

        redis = redis_client(settings.redis.url)
        dependencies.watch("Redis", settings.redis.url, redis.ping)
        idempotency = RedisIdempotency(redis, owner, leases.lease_seconds, leases.ttl_seconds)
        ledger = RedisLedger(redis)
    else:
        idempotency = MemoryIdempotency(owner, leases.lease_seconds, leases.ttl_seconds)
        ledger = MemoryLedger()
    # The judge reports each call and its price here as it makes it; the budget reads it back.
    spend = SpendCounter()
    budget = BudgetController(
        ledger,
        spend,
        calls_per_minute=settings.budget.calls_per_minute,
        usd_per_hour=settings.budget.usd_per_hour,
        exhausted=telemetry.sampling.budget_exhausted.set,
    )
    sampling = settings.sampling
    keep_rules = [KeepRule.parse(rule) for rule in sampling.keep_rules]
    rates = RateTable.parse(sampling.rate, sampling.rates)
    sampler = RuleSampler(rates, keep_rules, budget, keep_per_minute=sampling.keep_max_per_minute)
    # Trust: prediction-powered estimates from human labels (None unless label_sample_rate > 0).
    ppi = build_ppi(settings, telemetry, keep_rules, rates, budget)
    series_budget = SeriesBudget(
        settings.series.max_pairs,
        settings.series.max_routes,
        on_overflow=lambda kind: telemetry.assembly.label_overflows.labels(kind).inc(),
    )
    assembly = settings.assembly
    judge = build_judge(settings, telemetry.judge, redis, spend=spend)
    pipeline = Pipeline(
        assembler=TraceAssembler(
            build_conventions(settings),
            Labeller(assembly.route_attributes, series_budget),
            wait_seconds=assembly.wait_seconds,
            max_traces=assembly.max_traces,
            max_spans_per_trace=assembly.max_spans_per_trace,
            max_chunk_bytes=assembly.max_chunk_bytes,
            capture=[rule.attribute for rule in keep_rules],
        ),
        sampler=sampler,
        evaluator=Evaluator([METRICS[name]() for name in settings.metrics], judge),
        exporters=[*build_exporters(settings, telemetry, redis, ppi, dependencies), *observers],
        intake=telemetry.intake,
        assembly=telemetry.assembly,
        sampling=telemetry.sampling,
        evaluation=telemetry.evaluation,
        idempotency=idempotency,
        config=PipelineConfig(
            max_pending=settings.pipeline.max_pending,
            concurrency=settings.pipeline.eval_concurrency,
            assembly_wait_seconds=assembly.wait_seconds,
            lease_seconds=leases.lease_seconds,
            done_seconds=leases.ttl_seconds,
            owner=owner,
            max_deferrals=settings.judge.defer_max_attempts,
        ),
        label_spans=ppi.observe_spans if ppi is not None else None,
        dependencies=dependencies,
        signals=build_signals(settings, telemetry, redis),
        probes=build_probe_stage(settings, telemetry, redis),
    )
    source = build_source(settings, telemetry, dependencies)
    gate = pipeline.gate
    readiness = {"source": source.ready, "judge": lambda: judge.healthy() and not gate.failing}
    metrics_server = MetricsServer(
        telemetry.registry,
        *settings.server.address,
        checks=readiness,
        loop_lag=LoopLagMonitor(telemetry.runtime),
        security=metrics_security(settings, telemetry.intake),
        dependencies=dependencies,
    )
    self_check: Callable[[], Coroutine[Any, Any, object]] | None = None
    if settings.judge.self_check and not settings.judge.is_local:
        from agent.judges.llm import self_check as check_judge

        self_check = functools.partial(check_judge, judge, settings.judge.api_base or "")
    return Agent(
        source,
        pipeline,
        budget,
        metrics_server,
        redis,
        self_check,
        dependencies=dependencies,
        shutdown_timeout=settings.pipeline.shutdown_timeout_seconds,
        # A Kafka source redelivers what is left uncommitted, so incomplete traces stay buffered
        # (uncommitted) for the partition's next owner instead of being assembled half-read.
        flush_incomplete=settings.source != "kafka",
    )


__all__ = ["ConfigError", "build_agent", "check_settings", "kafka_connection", "load_checked_settings"]
