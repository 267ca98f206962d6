"""The composition root: the one place that reads Settings and wires the agent from them.

Besides the CLI commands, nothing else reads `Settings`. Each component takes its own settings
section (the section *is* its config), its telemetry group and its dependencies, through its
module's `build(section, telemetry, ...)`; what is left here is wiring, and the checks that need
more than one section or the rest of ragpulse to see (an unknown metric, a keep rule that does
not parse, a calibration file that does not load). Every configuration mistake is a
`ConfigError` that names the setting, where it came from and its environment variable.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from agent import activity, budget, delivery, redact, sampling, series_budget, server, signals
from agent.budget import SpendCounter
from agent.config import Settings, load_settings
from agent.evaluate import Evaluator
from agent.exporters import documents, drift, results
from agent.exporters.base import Exporter
from agent.exporters.prometheus import PrometheusExporter
from agent.infra.kafka_connect import kafka_connection
from agent.infra.lifecycle import Lifecycle
from agent.infra.redis import RedisConnection, redis_client
from agent.infra.waiting import Dependencies
from agent.judges import stack
from agent.judges.base import Judge, SpendSink
from agent.judges.cache import VerdictCache
from agent.judges.standing import MetricChoice, choose_metrics
from agent.metrics import METRICS, STREAMING_METRICS
from agent.metrics.base import Metric
from agent.metrics.criteria import CriterionMetric, check_criteria
from agent.otlp import assemble
from agent.otlp.conventions import Convention
from agent.otlp.conventions.known import known_conventions
from agent.pipeline import Agent, Pipeline, Route
from agent.probes.results import ProbeResults
from agent.probes.scoring import ProbeScorer
from agent.sampling import KeepRule, RateTable
from agent.sources.base import Source
from agent.telemetry import JudgeTelemetry, Telemetry
from agent.trust import aggregator as trust
from agent.trust.calibration import CalibrationError

log = logging.getLogger(__name__)

# -- Checks that need more than one section, or the rest of ragpulse -----------------------------


def check_settings(settings: Settings) -> None:
    """Raise a ConfigError for a value whose shape is right but which ragpulse cannot use."""
    unknown = [name for name in settings.metrics or () if name not in METRICS]
    if unknown:
        raise settings.error("metrics", f"unknown metric(s) {unknown}; choose from {sorted(METRICS)}")
    try:
        check_criteria(settings.criteria, settings.judge.model, local_judge=settings.judge.is_local)
    except ValueError as exc:
        raise settings.error("criteria", str(exc)) from None
    scored = {*METRICS, *(c.name for c in settings.criteria)}
    unknown = [key for key in settings.alerts.thresholds if key.rpartition("/")[2] not in scored]
    if unknown:
        raise settings.error("alert_thresholds", f"unknown metric(s) {unknown}; choose from {sorted(scored)}")
    try:
        RateTable.parse(settings.sampling.rate, settings.sampling.rates)
    except ValueError as exc:
        raise settings.error("sample_rates", str(exc)) from None
    for rule in settings.sampling.keep_rules:
        try:
            KeepRule.parse(rule)
        except ValueError as exc:
            raise settings.error("sample_keep_rules", str(exc)) from None
    try:
        redact.check(settings.security)
    except redact.UnknownKindError as exc:
        raise settings.error("redact_kinds", str(exc)) from None
    except redact.RedactionConfigError as exc:
        raise settings.error("redact_patterns", str(exc)) from None
    try:
        trust.check(settings.trust)
    except CalibrationError as exc:
        raise settings.error("calibration_file", str(exc)) from None


def metric_choice(settings: Settings) -> MetricChoice:
    """The metrics the agent scores: `metrics` as the user set them, else the streaming metrics
    the judge measures better than chance (agent/judges/standing.py)."""
    return choose_metrics(settings.judge.model, settings.metrics, tuple(STREAMING_METRICS))


def build_metrics(settings: Settings, choice: MetricChoice | None = None) -> list[Metric]:
    """The metrics every interaction of the stream is scored with: the chosen built-in ones
    (`metric_choice` unless given) and one per custom criterion (a criterion defined is a
    criterion scored)."""
    chosen = (choice or metric_choice(settings)).metrics
    return [*(METRICS[name]() for name in chosen), *map(CriterionMetric, settings.criteria)]


def load_checked_settings(**sources: Any) -> Settings:
    """`load_settings(**sources)`, then `check_settings`: what every command runs before it starts."""
    settings = load_settings(**sources)
    check_settings(settings)
    return settings


# -- The judge (also built by the commands) ------------------------------------------------------


def build_verdict_cache(settings: Settings, telemetry: JudgeTelemetry, redis: Any = None) -> VerdictCache:
    """Redis when configured (sharing `redis`, the agent's one client, if given), else in-process."""
    if redis is None and settings.redis.url is not None:
        redis = redis_client(settings.redis.url)
    return stack.build_cache(settings.cache, telemetry, redis)


def build_inner_judge(settings: Settings, telemetry: JudgeTelemetry, spend: SpendSink | None = None) -> Judge:
    return stack.build_inner(settings.judge, telemetry, spend)


def build_judge(
    settings: Settings,
    telemetry: JudgeTelemetry,
    redis: Any = None,
    *,
    cached: bool = True,
    spend: SpendSink | None = None,
) -> stack.StackedJudge:
    """The judge metrics use (agent/judges/stack.py), behind redaction of personal data when
    `settings.redacts`. `cached=False` leaves the cache out (for questions whose answers it does
    not keep, such as a report's reasons) and nothing else: redaction stays in front."""
    return stack.build(
        settings.judge,
        telemetry,
        cache=build_verdict_cache(settings, telemetry, redis) if cached else None,
        redactor=redact.build(settings.security) if settings.redacts else None,
        spend=spend,
    )


def build_conventions(settings: Settings) -> list[Convention]:
    """The convention adapters, reading the document metadata key documents are named by
    (`documents_key`) and no other metadata: without one, no span's metadata is parsed."""
    return known_conventions((settings.documents.key,) if settings.documents.key else ())


def build_source(
    settings: Settings, telemetry: Telemetry, dependencies: Dependencies | None = None
) -> Source:
    if settings.source == "kafka":
        # Imported here so the embedded default never loads the Kafka client.
        from agent.sources import kafka

        return kafka.build(settings.kafka, telemetry.kafka, dependencies)
    from agent.sources import otlp_http

    return otlp_http.build(settings.otlp, telemetry.intake)


# -- The agent -----------------------------------------------------------------------------------


def build_agent(
    settings: Settings, registry: CollectorRegistry | None = None, observers: Sequence[Exporter] = ()
) -> Agent:
    """The agent `ragpulse run` starts. `observers` are extra in-process exporters that see every
    evaluated interaction after the configured ones (the live view of `ragpulse demo` and of
    `ragpulse run --live`)."""
    check_settings(settings)
    metrics = metric_choice(settings)
    if metrics.off or metrics.doubtful:  # said once, at start: a metric left out, or one that says little
        log.log(logging.WARNING if metrics.doubtful else logging.INFO, metrics.describe())
    telemetry = Telemetry(registry if registry is not None else CollectorRegistry())
    telemetry.drift.set_thresholds(settings.alerts.thresholds)
    # Kafka, Redis, the OTLP results endpoint: waited for when absent at start (agent/infra/waiting.py).
    dependencies = Dependencies()
    components: list[Lifecycle] = [dependencies]  # started in order, stopped in reverse
    redis = redis_client(settings.redis.url) if settings.redis.url else None
    if redis is not None:
        dependencies.watch("Redis", str(settings.redis.url), redis.ping)
        components.append(RedisConnection(redis))
    # The judge reports each call and its price here as it makes it; the budget reads it back.
    spend = SpendCounter()
    judge_budget = budget.build(
        settings.budget, spend, redis=redis, exhausted=telemetry.sampling.budget_exhausted.set
    )
    components.append(judge_budget)
    sampler = sampling.build(settings.sampling, judge_budget)
    judge = build_judge(settings, telemetry.judge, redis, spend=spend)
    # Trust: prediction-powered estimates from human labels (None unless label_sample_rate > 0).
    ppi = trust.build(
        settings.trust,
        telemetry.trust,
        max_series=settings.drift.max_series,
        judge_model=settings.judge.model,
    )
    production = Route(
        "production",
        Evaluator(build_metrics(settings, metrics), judge),
        sampler=sampler,
        # Durable exporters first: they must succeed before the in-process ones count an interaction.
        exporters=[
            *results.build(
                settings.results,
                telemetry.evaluation,
                kafka_connection=kafka_connection(settings.kafka),
                documents_key=settings.documents.key,
                dependencies=dependencies,
            ),
            PrometheusExporter(telemetry.evaluation),
            drift.build(settings.drift, telemetry.drift, redis),
            documents.build(settings.documents, telemetry.documents, max_services=settings.series.max_pairs),
            *([ppi] if ppi is not None else []),
            *observers,
        ],
        observers=[
            activity.build(settings.activity, telemetry.registry),
            signals.build(
                settings.signals,
                telemetry.signals,
                drift=settings.drift,
                drift_telemetry=telemetry.drift,
                redis=redis,
            ),
            *([ppi] if ppi is not None else []),
        ],
        markers=[ppi] if ppi is not None else [],
    )
    # Probe traces: scored always, with the reference-based metrics, by the configured judge
    # through a stack of its own that reports no spend to the budget, into the probe series only.
    probe_results = ProbeResults(telemetry.probes, settings.probes)
    probes = Route(
        "probes",
        ProbeScorer(
            settings.probes,
            build_judge(settings, telemetry.judge, redis),
            metrics.metrics,
            criteria=settings.criteria,
        ),
        exporters=[probe_results],
        observers=[probe_results],
    )
    deliver = delivery.build(
        settings.idempotency,
        telemetry.evaluation,
        redis=redis,
        max_deferrals=settings.judge.defer_max_attempts,
    )
    pipeline = Pipeline(
        assemble.build(
            settings.assembly,
            build_conventions(settings),
            series_budget.build(settings.series, telemetry.assembly),
            capture=sampler.rule_attributes,
        ),
        {"production": production, "probes": probes},
        # A probe is always scored and kept out of the production series and sampling.
        lambda interaction: "production" if interaction.probe is None else "probes",
        deliver,
        telemetry.pipeline,
        settings.pipeline,
        assembly_wait_seconds=settings.assembly.wait_seconds,
        dependencies=dependencies,
    )
    source = build_source(settings, telemetry, dependencies)
    metrics_server = server.build(
        settings.server,
        telemetry,
        {
            "source": source.ready,
            "judge": lambda: False if deliver.gate.failing else (judge.problem() or judge.healthy()),
        },
        dependencies=dependencies,
    )
    return Agent(
        source,
        pipeline,
        # The server first (/healthz answers while the rest starts), and last to stop.
        [metrics_server, *components],
        stack.self_check(settings.judge, judge),
        shutdown_timeout=settings.pipeline.shutdown_timeout_seconds,
        dependencies=dependencies,
        # A Kafka source redelivers what is left uncommitted, so incomplete traces stay buffered
        # (uncommitted) for the partition's next owner instead of being assembled half-read.
        flush_incomplete=settings.source != "kafka",
    )


__all__ = [
    "build_agent",
    "check_settings",
    "load_checked_settings",
    "metric_choice",
]
