"""Every setting of ragpulse, in one typed, frozen object grouped in sections.

Settings come from, in increasing precedence: defaults here, an optional YAML file
(`--config` or `RAGPULSE_CONFIG`), `RAGPULSE_<NAME>` environment variables, and command-line
flags. Each setting has one flat name (`kafka_topic`), which is its environment variable
(`RAGPULSE_KAFKA_TOPIC`), its `--set` name and a YAML key; in YAML it may also sit in its section
(`kafka: {topic: x}`). In code it is read as `settings.kafka.topic`, and only by the composition
root (agent/build.py) and the CLI commands.

This module checks the shape of every value (types, ranges, HOST:PORT, URLs). What needs the
rest of ragpulse to check (metric names, keep rules, redaction patterns, calibration files) is
checked by agent/build.py, which raises the same `ConfigError`.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from agent.model import Criterion

ENV_PREFIX = "RAGPULSE_"
CONFIG_ENV = "RAGPULSE_CONFIG"

log = logging.getLogger(__name__)

LOCAL_JUDGES = ("lexical", "embedding")

# Absolute quality thresholds are opt-in (docs/runbooks.md): a score's scale belongs to its judge
# (the local judge's healthy context relevancy is about 0.2), so by default none is set and the
# quality alert compares each series with its own baseline instead.
DEFAULT_ALERT_THRESHOLDS: dict[str, float] = {}


class _HttpHeaders:
    """Marks a setting that holds HTTP headers (a mapping, or NAME=VALUE entries): wherever
    settings are shown, the values of credential headers are masked (agent/infra/secrets.py)."""

    def __repr__(self) -> str:
        return "HTTP_HEADERS"


HTTP_HEADERS = _HttpHeaders()


class ConfigError(ValueError):
    """A setting is missing, unknown or invalid; the message names it and says what to do."""


def split_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:4318), got {value!r}")
    return host.strip("[]"), int(port)


# Flat names (environment variables without RAGPULSE_, `--set` names) are `<section>_<field>`,
# except those users have always known by another name: this table is the one place they live.
_LEGACY_PREFIXES = {
    "server": "metrics_",
    "sampling": "sample_",
    "alerts": "alert_",
    "security": "redact_",
    "pipeline": "",
    "trust": "",
}
_LEGACY_NAMES = {
    ("assembly", "route_attributes"): "route_attributes",
    ("series", "max_routes"): "max_label_values",
    ("series", "max_pairs"): "max_label_pairs",
    ("security", "log_prompts"): "log_prompts",
}


def flat_name(section: str, field: str) -> str:
    """The flat name of `field` of settings section `section`."""
    legacy = _LEGACY_NAMES.get((section, field))
    if legacy is not None:
        return legacy
    return _LEGACY_PREFIXES.get(section, f"{section}_") + field


def _section(section: str) -> ConfigDict:
    # The alias of a field is its flat name.
    return ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=functools.partial(flat_name, section),
    )


class ServerSettings(BaseModel):
    """The HTTP server of /metrics, /healthz and /readyz."""

    model_config = _section("server")

    listen: str = Field("127.0.0.1:9464", description="HOST:PORT serving /metrics, /healthz and /readyz.")
    web_config_file: str | None = Field(
        None,
        description="Prometheus web configuration file (tls_server_config, basic_auth_users) for "
        "/metrics, /healthz and /readyz.",
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_host_port(value)
        return value

    @property
    def address(self) -> tuple[str, int]:
        return split_host_port(self.listen)


class OtlpSettings(BaseModel):
    """The embedded OTLP receivers (source otlp-http) and their security."""

    model_config = _section("otlp")

    listen: str = Field("127.0.0.1:4318", description="HOST:PORT of the OTLP/HTTP receiver.")
    # OTLP/gRPC beside OTLP/HTTP in the embedded default (most SDKs and the Collector default to it).
    grpc_listen: str = Field(
        "127.0.0.1:4317",
        description="HOST:PORT of the OTLP/gRPC receiver run beside OTLP/HTTP (source otlp-http); "
        "empty to disable.",
    )
    max_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Largest OTLP/HTTP body accepted (after decompression)."
    )
    tls_cert_file: str | None = Field(None, description="PEM certificate: serve OTLP/HTTP over TLS.")
    tls_key_file: str | None = Field(None, description="PEM private key of otlp_tls_cert_file.")
    tls_client_ca_file: str | None = Field(
        None, description="CA bundle: require OTLP clients to present a certificate it signed (mTLS)."
    )
    bearer_token: SecretStr | None = Field(
        None, description="Require 'Authorization: Bearer <token>' on OTLP requests."
    )
    bearer_token_file: str | None = Field(
        None, description="File holding the OTLP bearer token (re-read at start; for mounted secrets)."
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        split_host_port(value)
        return value

    @field_validator("grpc_listen")
    @classmethod
    def _optional_host_port(cls, value: str) -> str:
        if value:
            split_host_port(value)
        return value

    @property
    def address(self) -> tuple[str, int]:
        return split_host_port(self.listen)

    @property
    def grpc_address(self) -> tuple[str, int] | None:
        return split_host_port(self.grpc_listen) if self.grpc_listen else None


class KafkaSettings(BaseModel):
    """The Kafka consumer group (source kafka) and the connection the results producer shares."""

    model_config = _section("kafka")

    bootstrap: tuple[str, ...] = Field(
        ("127.0.0.1:9092",), description="Kafka bootstrap servers, comma-separated HOST:PORT."
    )
    topic: str = Field(
        "otlp_spans", min_length=1, description="Topic the Collector's kafka exporter writes to."
    )
    group_id: str = Field("ragpulse", min_length=1, description="Consumer group shared by all replicas.")
    encoding: Literal["otlp_proto", "otlp_json"] = Field(
        "otlp_proto", description="Encoding set on the Collector's kafka exporter."
    )
    auto_offset_reset: Literal["latest", "earliest"] = Field(
        "latest",
        description="Where a new consumer group starts: latest skips the backlog, earliest backfills.",
    )
    max_partition_fetch_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="Largest fetch per partition; must exceed the largest message."
    )
    fetch_max_bytes: int = Field(64 * 1024 * 1024, gt=0, description="Largest fetch response.")
    session_timeout_ms: int = Field(10_000, gt=0, description="Group session timeout.")
    heartbeat_interval_ms: int = Field(3_000, gt=0, description="Group heartbeat interval.")
    max_poll_interval_ms: int = Field(300_000, gt=0, description="Max time between polls.")
    commit_interval_seconds: float = Field(1.0, gt=0, description="How often finished offsets are committed.")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="How the brokers are reached."
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = Field(
        None, description="SASL mechanism (security_protocol SASL_*)."
    )
    sasl_username: str | None = Field(None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(None, description="SASL password.")
    ssl_cafile: str | None = Field(None, description="CA bundle to verify the brokers.")
    ssl_certfile: str | None = Field(None, description="Client certificate for mutual TLS.")
    ssl_keyfile: str | None = Field(None, description="Client key for mutual TLS.")

    @field_validator("bootstrap")
    @classmethod
    def _servers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for server in value:
            split_host_port(server)
        return value


class ResultsSettings(BaseModel):
    """Where each evaluated interaction is published (off unless a topic or endpoint is set)."""

    model_config = _section("results")

    topic: str | None = Field(
        None, description="Kafka topic receiving each evaluated interaction as OTLP (unset = off)."
    )
    include_text: bool = Field(False, description="Include the query and response text in published results.")
    otlp_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP endpoint (e.g. http://collector:4318) receiving each evaluated "
        "interaction as a span with gen_ai.evaluation.result events (unset = off).",
    )
    otlp_headers: Annotated[tuple[str, ...], HTTP_HEADERS] = Field(
        (),
        repr=False,
        description="Headers sent to results_otlp_endpoint, NAME=VALUE, comma-separated (credential "
        "headers shown as ***).",
    )
    otlp_timeout_seconds: float = Field(
        10.0, gt=0, description="Timeout of one POST to results_otlp_endpoint (then retried)."
    )
    file: str | None = Field(
        None,
        description="JSONL file receiving each evaluated interaction as one OTLP JSON line, the record "
        "of the results topic (unset = off); read by `ragpulse label-queue --results-file`.",
    )
    file_max_bytes: int = Field(
        50_000_000, ge=1024, description="Size at which results_file is rotated to results_file.1, .2, ..."
    )
    file_keep: int = Field(
        5, ge=0, le=1000, description="Rotated results files kept beside results_file (the oldest removed)."
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"expected an http(s):// URL such as http://collector:4318, got {value!r}")
            _port_of(parts)
        return value

    @field_validator("otlp_headers")
    @classmethod
    def _header_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            name, sep, _ = entry.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"expected NAME=VALUE, got {entry!r}")
        return value

    @property
    def otlp_header_map(self) -> dict[str, str]:
        return dict(item.partition("=")[::2] for item in self.otlp_headers)


def _port_of(parts: Any) -> int | None:
    try:
        return int(parts.port) if parts.port is not None else None
    except ValueError:
        raise ValueError(f"the port of {parts.geturl()!r} is not a number from 0 to 65535") from None


class JudgeSettings(BaseModel):
    """Which judge answers the metrics' questions, and how it is called."""

    model_config = _section("judge")

    model: str = Field(
        "lexical",
        min_length=1,
        description="'lexical' (built-in local judge), 'embedding' (local MiniLM judge, extra "
        "[embedding] and its weights, docs/judges.md), else a litellm model string.",
    )
    api_base: str | None = Field(None, description="Base URL of an OpenAI-compatible judge.")
    api_key: SecretStr | None = Field(None, description="API key passed to the judge.")
    timeout_seconds: float = Field(30.0, gt=0, description="Timeout of one judge call.")
    max_retries: int = Field(
        3, ge=0, description="Retries of a judge call after 429 / 5xx / timeout (never after other errors)."
    )
    retry_max_elapsed_seconds: float = Field(
        60.0, gt=0, description="Cap on the time one judge question may spend retrying."
    )
    breaker_failures: int = Field(
        5, gt=0, description="Consecutive failed judge calls that open the circuit breaker."
    )
    breaker_cooldown_seconds: float = Field(
        30.0, gt=0, description="How long an open breaker refuses calls before one probe call."
    )
    max_concurrency: int = Field(
        64, gt=0, description="Judge calls in flight at once (per replica; 429s back off)."
    )
    structured_output: Literal["auto", "json_schema", "json_object", "off"] = Field(
        "auto",
        description="Response format asked of the judge; auto: JSON schema where litellm says the "
        "model supports it, else JSON mode.",
    )
    logprobs: bool = Field(
        True,
        description="Ask for log-probabilities where litellm says the provider returns them, so that "
        "metrics average the judge's confidence in each verdict; false keeps LLM verdicts binary.",
    )
    max_text_chars: int = Field(
        32_768,
        gt=0,
        description="Texts (query, response, each chunk) longer than this are cut before judging (counted).",
    )
    self_check: bool = Field(
        True, description="At start, one small call to an LLM judge; a failure is logged clearly."
    )
    defer_max_attempts: int = Field(
        5,
        gt=0,
        description="Retryable judge failures of one interaction, while the judge answers others, "
        "before it is recorded as an error instead of retried.",
    )

    @property
    def is_local(self) -> bool:
        return self.model in LOCAL_JUDGES

    @property
    def checked_at_start(self) -> bool:
        """Whether the judge answers one small call before anything is scored: an LLM judge, unless
        `judge_self_check` is off (a local judge has no endpoint to reach)."""
        return self.self_check and not self.is_local


class RedisSettings(BaseModel):
    """The shared Redis (verdict cache, idempotency keys, judge budget, drift state)."""

    model_config = _section("redis")

    url: str | None = Field(
        None, description="redis://... for the shared verdict cache; unset = in-process LRU."
    )

    @field_validator("url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"expected redis://HOST:PORT[/DB], rediss://... (TLS) or unix:///PATH, got scheme "
                f"{parts.scheme or 'none'!r}"
            )
        if parts.scheme == "unix":
            if not parts.path:
                raise ValueError("a unix:// URL needs the socket's path, e.g. unix:///run/redis.sock")
            return value
        if not parts.hostname:
            raise ValueError("the URL names no host, e.g. redis://cache.local:6379/0")
        _port_of(parts)
        database = parts.path.strip("/")
        if database and not database.isdigit():
            raise ValueError(f"the database in the path must be a number, got {database!r}")
        return value


class CacheSettings(BaseModel):
    """The verdict cache (Redis when redis_url is set, else an in-process LRU)."""

    model_config = _section("cache")

    ttl_seconds: int = Field(7 * 24 * 3600, gt=0, description="Lifetime of a cached verdict.")
    max_entries: int = Field(100_000, gt=0, description="Size of the in-process LRU cache.")
    key_prefix: str = Field(
        "ragpulse:v1:verdict:", min_length=1, description="Prefix of verdict keys in Redis."
    )


class SamplingSettings(BaseModel):
    """Which interactions are scored."""

    model_config = _section("sampling")

    rate: float = Field(1.0, ge=0.0, le=1.0, description="Fraction of interactions scored.")
    rates: tuple[str, ...] = Field(
        (), description="Rates per service or route: service=RATE or service/route=RATE, comma-separated."
    )
    keep_rules: tuple[str, ...] = Field(
        (),
        description="Interactions always scored when a span attribute matches, e.g. feedback.score < 0.",
    )
    keep_max_per_minute: float | None = Field(
        600.0,
        gt=0,
        description="Interactions per minute (per replica) that keep rules may force past the rate "
        "and the budget; beyond it they are sampled like the rest. Unset = no cap.",
    )


class BudgetSettings(BaseModel):
    """Judge spend across replicas; sampling slows above it."""

    model_config = _section("budget")

    calls_per_minute: float | None = Field(
        None, gt=0, description="Judge calls per minute across all replicas; sampling slows above it."
    )
    usd_per_hour: float | None = Field(
        None, gt=0, description="Judge spend in USD per hour across all replicas; sampling slows above it."
    )


class IdempotencySettings(BaseModel):
    """Leases that keep an interaction scored once across replicas."""

    model_config = _section("idempotency")

    lease_seconds: float = Field(
        60.0, gt=0, description="How long a replica's lease on an interaction blocks the others."
    )
    ttl_seconds: float = Field(
        3600.0, gt=0, description="How long a scored interaction id is remembered (redelivery window)."
    )


class AssemblySettings(BaseModel):
    """How spans are joined into interactions, and the bounds of the trace buffer."""

    model_config = _section("assembly")

    route_attributes: tuple[str, ...] = Field(
        ("http.route",),
        description="Span attributes tried in order for the route label; the span name is the fallback.",
    )
    wait_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a trace waits after its latest span for the rest of the trace (its root, "
        "the LLM call) before it is assembled from what arrived (at most 10 waits after its first span).",
    )
    max_traces: int = Field(
        10_000, gt=0, description="Traces buffered at once; beyond it the oldest is evicted (counted)."
    )
    max_spans_per_trace: int = Field(
        1_000,
        gt=0,
        description="RAG spans kept per buffered trace, and (separately) other spans kept to link them; "
        "later spans of a full trace are evicted.",
    )
    max_chunk_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="Bytes buffered across traces: the text of chunks, queries and responses plus ~400 "
        "bytes per buffered span of any kind; beyond it the oldest traces are evicted.",
    )


class SeriesSettings(BaseModel):
    """The series budget: bounds on the label values of every exported series."""

    model_config = _section("series")

    max_routes: int = Field(
        100,
        gt=0,
        description="Distinct routes per service before that service's others are '__other__'.",
    )
    max_pairs: int = Field(
        500,
        gt=0,
        description="Series budget: distinct (service, route) label pairs; beyond it an interaction is "
        "labelled (service, '__other__') or ('__other__', '__other__'). Every series with service and "
        "route labels is bounded by it.",
    )


class PipelineSettings(BaseModel):
    """The evaluation worker pool and its admission control."""

    model_config = _section("pipeline")

    eval_concurrency: int = Field(
        32, gt=0, description="Interactions evaluated concurrently (each waits on judge calls)."
    )
    max_pending: int = Field(
        1000, gt=0, description="Interactions waiting for evaluation before intake answers 503."
    )
    shutdown_timeout_seconds: float = Field(
        10.0, ge=0, description="How long shutdown waits for in-flight evaluations."
    )


class DriftSettings(BaseModel):
    """The drift detectors (per service, route and metric)."""

    model_config = _section("drift")

    baseline_size: int = Field(
        1000, ge=10, description="Scores per series learnt as the baseline before drift is judged."
    )
    window: int = Field(200, ge=10, description="Recent scores compared with the baseline.")
    threshold: float = Field(12.0, gt=0, description="CUSUM alarm threshold, in baseline sd.")
    alpha: float = Field(1e-5, gt=0, lt=1, description="p-value the window test must reach.")
    max_series: int = Field(2000, gt=0, description="Series tracked for drift (LRU beyond).")
    save_interval_seconds: float = Field(
        10.0, gt=0, description="How often drift detector state is saved to Redis (when redis_url is set)."
    )
    state_ttl_seconds: int = Field(
        30 * 24 * 3600, gt=0, description="Lifetime in Redis of a drift series that receives no scores."
    )


MAX_DOCUMENTS_KEY_CHARS = 100


class DocumentsSettings(BaseModel):
    """The documents behind low scores: a bounded top-N per service (agent/exporters/documents.py)."""

    model_config = _section("documents")

    top_n: int = Field(
        20,
        gt=0,
        le=1000,
        description="Documents exported per service and verdict (useless, useful, irrelevant) as "
        "ragpulse_document_verdicts; counted in memory bounded by 10x this, whatever their number.",
    )
    key: str | None = Field(
        None,
        description="Metadata key naming documents in ragpulse_document_verdicts and the results "
        "(e.g. source, file_name, url), read from each retrieved document's metadata; unset: the "
        "chunk id (no metadata is read). A document without the key is named by its chunk id.",
    )

    @field_validator("key", mode="before")
    @classmethod
    def _one_key(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f"expected one metadata key such as source, got {value!r}")
        value = value.strip()
        if not value:
            return None
        if len(value) > MAX_DOCUMENTS_KEY_CHARS:
            raise ValueError(
                f"a metadata key of at most {MAX_DOCUMENTS_KEY_CHARS} characters, got {len(value)}"
            )
        if "," in value or not value.isprintable():
            raise ValueError(
                f"expected one metadata key (no commas or control characters) such as source, got {value!r}"
            )
        return value


class SignalsSettings(BaseModel):
    """Signals on every interaction, before sampling, without a judge (agent/signals.py)."""

    model_config = _section("signals")

    overlap_per_second: float = Field(
        100.0,
        ge=0,
        description="Interactions per second whose response-to-context word overlap is computed (about "
        "30 us each); beyond it the first ones of each second. 0 turns the overlap signal off.",
    )
    drift_batch: int = Field(
        10,
        ge=1,
        le=1000,
        description="Interactions averaged into one observation of a signal's drift detector (the "
        "drift section's baseline and window are counted in interactions all the same).",
    )


class ActivitySettings(BaseModel):
    """What `ragpulse run` says about the traffic it sees (agent/activity.py)."""

    model_config = _section("activity")

    summary_seconds: float = Field(
        60.0,
        ge=0,
        description="Period of the one-line traffic summary in the log (spans, interactions, scored, "
        "means, drift alarms); no line for a period with no traffic. 0 turns it off.",
    )
    recent: int = Field(
        300, ge=1, le=100_000, description="Recent scored interactions kept for `ragpulse run --live`."
    )


class AlertSettings(BaseModel):
    """Opt-in absolute thresholds of the quality alert, exported as
    ragpulse_quality_threshold{service,metric}; none by default (docs/runbooks.md)."""

    model_config = _section("alerts")

    # The Prometheus rules compare the recorded means with the exported thresholds, so thresholds
    # change without editing the rules.
    thresholds: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_ALERT_THRESHOLDS),
        description="Opt-in score means below which RagpulseQualityBelowThreshold fires, "
        "metric=VALUE or service/metric=VALUE (one service), comma-separated; none by default "
        "(a score's scale depends on the judge: the default quality alert is relative to each "
        "series' own baseline).",
    )

    @field_validator("thresholds", mode="before")
    @classmethod
    def _thresholds(cls, value: Any) -> dict[str, float]:
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, list | tuple):
            pairs: dict[str, Any] = {}
            for item in value:
                name, sep, number = str(item).partition("=")
                if not sep:
                    raise ValueError(f"expected metric=VALUE or service/metric=VALUE, got {item!r}")
                pairs[name.strip()] = number.strip()
            value = pairs
        if not isinstance(value, Mapping):
            raise ValueError("expected metric=VALUE entries or a mapping of metric to value")
        merged = dict(DEFAULT_ALERT_THRESHOLDS)
        for name, number in value.items():
            try:
                threshold = float(number)
            except (TypeError, ValueError):
                raise ValueError(f"threshold of {name} must be a number, got {number!r}") from None
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(f"threshold of {name} must be within [0, 1], got {threshold}")
            merged[str(name)] = threshold
        return merged


class TrustSettings(BaseModel):
    """Human labels, judge calibration and prediction-powered estimates (docs/trust.md)."""

    model_config = _section("trust")

    label_sample_rate: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Fraction of scored interactions drawn for human labelling, marked on published "
        "results; turns on the ragpulse_quality_estimate gauges (0 = off).",
    )
    label_oversample: float = Field(
        1.0,
        ge=1.0,
        description="How many times more often an interaction with a low-confidence verdict is drawn; "
        "labels carry weight 1/probability, so estimates stay unbiased.",
    )
    label_uncertain_low: float = Field(
        0.3, ge=0.0, le=1.0, description="Metric values from here to label_uncertain_high are low-confidence."
    )
    label_uncertain_high: float = Field(
        0.7, ge=0.0, le=1.0, description="Upper end of the low-confidence band of metric values."
    )
    label_max_pending: int = Field(
        100_000, gt=0, description="Drawn interactions remembered while awaiting labels (oldest forgotten)."
    )
    calibration_file: str | None = Field(
        None, description="Calibration JSON from `ragpulse calibrate`; estimates use calibrated scores."
    )
    ppi_window_seconds: float = Field(
        3600.0, gt=0, description="Length of the windows of prediction-powered estimates."
    )
    ppi_min_labels: int = Field(
        30, ge=2, description="Labels a window needs before its estimate is exported."
    )
    ppi_windows_kept: int = Field(
        2, ge=1, description="Windows per series kept open for late labels (the newest with enough is shown)."
    )

    @model_validator(mode="after")
    def _uncertain_band(self) -> TrustSettings:
        if self.label_uncertain_high < self.label_uncertain_low:
            raise ValueError(
                f"label_uncertain_high: must be >= label_uncertain_low ({self.label_uncertain_low}), "
                f"got {self.label_uncertain_high}"
            )
        return self


class SecuritySettings(BaseModel):
    """What is redacted before text leaves for a judge, and what may be logged (docs/security.md)."""

    model_config = _section("security")

    pii: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Replace personal data with placeholders before text leaves for a judge; "
        "auto = on for LLM judges, off for the local judges (which send nothing).",
    )
    kinds: tuple[str, ...] = Field(
        ("email", "phone", "card", "iban", "ip"), description="Built-in kinds of personal data redacted."
    )
    patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Custom kinds to redact, KIND: regex (YAML mapping, or a JSON object in the env var).",
    )
    allow: tuple[str, ...] = Field(
        (), description="Values never redacted (e.g. your public support address), comma-separated."
    )
    phone_regions: tuple[str, ...] = Field(
        ("US", "GB", "DE", "FR", "IN"),
        description="Regions whose national phone formats are recognised (+ numbers always are).",
    )
    log_prompts: bool = Field(
        False,
        description="Let litellm/openai log judge prompt bodies at DEBUG (off: they never log).",
    )

    @field_validator("pii", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML reads a bare on/off as a boolean.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("patterns", mode="before")
    @classmethod
    def _patterns_from_json(cls, value: Any) -> Any:
        # An environment variable gives the mapping as a JSON object.
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                example = '{"EMPLOYEE_ID": "E\\\\d{6}"}'
                raise ValueError(f"expected a JSON object such as {example}: {exc}") from None
        return value


class ProbeEndpoint(BaseModel):
    """One app endpoint the prober asks each golden question (docs/probes.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("app", min_length=1, description="Names the endpoint on the prober's span.")
    url: str = Field(description="The app's URL, e.g. http://rag-app:8000/ask.")
    method: Literal["POST", "PUT", "GET"] = "POST"
    body: Any = Field(
        default_factory=lambda: {"question": "{question}"},
        description='JSON body template; "{question}" in any string is replaced by the question.',
    )
    headers: Annotated[dict[str, str], HTTP_HEADERS] = Field(
        default_factory=dict,
        repr=False,
        description="Extra request headers; values of credential headers (authorization, "
        "x-api-key, ...) are shown as *** wherever settings are shown.",
    )
    answer_path: str = Field(
        "answer",
        description="Where the answer is in the JSON response, dotted (data.answer, choices.0.text); "
        "an empty or missing answer is a failure (no_answer).",
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value


class ProbeSettings(BaseModel):
    """Golden probes: `ragpulse probe` sends a golden set through the live app; the agent scores
    the probe traces with the reference-based metrics, apart from production (docs/probes.md)."""

    model_config = _section("probes")

    golden_set: str | None = Field(
        None,
        description="Golden set in the `ragpulse eval` input format (question, reference, relevant ids).",
    )
    set_name: str = Field(
        "golden", min_length=1, max_length=64, description="Name of the golden set (label probe_set)."
    )
    endpoints: tuple[ProbeEndpoint, ...] = Field(
        (),
        description="App endpoints asked each golden question: a YAML list, or a JSON array in the env "
        "var, of {name, url, method, body, headers, answer_path}.",
    )
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318",
        description="Where the prober exports its spans over OTLP/HTTP: the agent, or the Collector.",
    )
    interval_seconds: float = Field(
        900.0, gt=0, description="Seconds between rounds of `ragpulse probe --schedule`."
    )
    timeout_seconds: float = Field(30.0, gt=0, description="Timeout of one probe request.")
    concurrency: int = Field(2, gt=0, le=64, description="Probe requests in flight at once.")
    pass_score: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="A probe item passes when its context_recall and answer_correctness are at least this.",
    )
    k: int = Field(5, gt=0, description="Cut-off of the probes' rank metrics (as `ragpulse eval --k`).")
    max_sets: int = Field(
        20, gt=0, description="Distinct probe_set labels the agent exports (then __other__)."
    )

    @field_validator("endpoints", mode="before")
    @classmethod
    def _endpoints_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):  # the environment variable
            try:
                return json.loads(value) if value.strip() else ()
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f'expected a JSON array such as [{{"url": "http://app:8000/ask"}}]: {exc}'
                ) from None
        return value


class CanarySettings(BaseModel):
    """The judge canary: a frozen human-labelled set re-judged on a schedule (docs/probes.md)."""

    model_config = _section("canary")

    items_file: str | None = Field(
        None,
        description="The frozen items in the `ragpulse eval` input format (question, contexts, response).",
    )
    labels_file: str | None = Field(
        None, description="Human labels of those items by id (the `ragpulse calibrate` labels format)."
    )
    state_file: str = Field(
        "ragpulse-canary.json", description="Where the last accepted run is kept (a persistent volume)."
    )
    interval_seconds: float = Field(
        86400.0, gt=0, description="Seconds between runs of `ragpulse canary --schedule` (daily)."
    )
    max_mean_shift: float = Field(
        0.1, gt=0, le=1, description="The judge moved when its mean on the set shifts more than this."
    )
    max_agreement_drop: float = Field(
        0.1, gt=0, le=1, description="The judge moved when AUROC or balanced accuracy drops more than this."
    )


# Section attribute → its model, in the order `validate-config --list` shows them.
SECTIONS: dict[str, type[BaseModel]] = {
    "server": ServerSettings,
    "otlp": OtlpSettings,
    "kafka": KafkaSettings,
    "results": ResultsSettings,
    "judge": JudgeSettings,
    "redis": RedisSettings,
    "cache": CacheSettings,
    "sampling": SamplingSettings,
    "budget": BudgetSettings,
    "idempotency": IdempotencySettings,
    "assembly": AssemblySettings,
    "series": SeriesSettings,
    "pipeline": PipelineSettings,
    "drift": DriftSettings,
    "documents": DocumentsSettings,
    "signals": SignalsSettings,
    "activity": ActivitySettings,
    "alerts": AlertSettings,
    "trust": TrustSettings,
    "security": SecuritySettings,
    "probes": ProbeSettings,
    "canary": CanarySettings,
}


class Settings(BaseModel):
    """ragpulse configuration: a few top-level settings and one section per component.

    Construct it with flat names (`Settings(kafka_topic="x")`) or sections
    (`Settings(kafka={"topic": "x"})`); read it by section (`settings.kafka.topic`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Literal["otlp-http", "kafka"] = Field(
        "otlp-http",
        description="Where spans come from: otlp-http (embedded receiver) or kafka (consumer group).",
    )
    # None: the judge's default, chosen by the composition root (agent/build.py, metric_choice) from
    # what the judge measures well (agent/judges/standing.py); read it through metric_choice.
    metrics: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        description="Metrics scored on sampled interactions; unset: the reference-free metrics the "
        "judge measures better than chance (lexical, embedding: all but answer_relevancy; an LLM "
        "judge: all four). `ragpulse validate-config` shows the set and why.",
    )
    criteria: tuple[Criterion, ...] = Field(
        (),
        description="Custom criteria judged by the LLM judge as metrics of their own, each "
        "{name, question, reads, scale, anchors, higher_is_better} (docs/criteria.md); in YAML, "
        "or JSON in the environment variable. Defined means scored.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of ragpulse (DEBUG also lets third-party clients log)."
    )
    server: ServerSettings = ServerSettings()
    otlp: OtlpSettings = OtlpSettings()
    kafka: KafkaSettings = KafkaSettings()
    results: ResultsSettings = ResultsSettings()
    judge: JudgeSettings = JudgeSettings()
    redis: RedisSettings = RedisSettings()
    cache: CacheSettings = CacheSettings()
    sampling: SamplingSettings = SamplingSettings()
    budget: BudgetSettings = BudgetSettings()
    idempotency: IdempotencySettings = IdempotencySettings()
    assembly: AssemblySettings = AssemblySettings()
    series: SeriesSettings = SeriesSettings()
    pipeline: PipelineSettings = PipelineSettings()
    drift: DriftSettings = DriftSettings()
    documents: DocumentsSettings = DocumentsSettings()
    signals: SignalsSettings = SignalsSettings()
    activity: ActivitySettings = ActivitySettings()
    alerts: AlertSettings = AlertSettings()
    trust: TrustSettings = TrustSettings()
    security: SecuritySettings = SecuritySettings()
    probes: ProbeSettings = ProbeSettings()
    canary: CanarySettings = CanarySettings()

    # Where each flat setting came from ("config file", "environment", "command line"); absent = default.
    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_names(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        nested: dict[str, Any] = {}
        for key, value in data.items():
            flat = _FLAT.get(key)
            if flat is not None and flat.section:
                nested.setdefault(flat.section, {})[key] = value
            elif key in SECTIONS and isinstance(value, Mapping):
                nested.setdefault(key, {}).update(value)
            else:
                nested[key] = value
        return nested

    @field_validator("metrics")
    @classmethod
    def _metric_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        # Which names exist is checked by agent/build.py; here only that each is a bare name.
        scoped = [name for name in value or () if "/" in name]
        if scoped:
            raise ValueError(
                f"{scoped} name a service; metrics are scored for every service, so give bare metric "
                "names (per-service thresholds go in alert_thresholds as service/metric=VALUE)"
            )
        return value

    @field_validator("criteria", mode="before")
    @classmethod
    def _criteria_json(cls, value: Any) -> Any:
        # The environment variable and `--set` give the list as JSON text.
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected a JSON list of criteria ({exc.msg})") from None
        return value

    @field_validator("criteria")
    @classmethod
    def _criteria_names(cls, value: tuple[Criterion, ...]) -> tuple[Criterion, ...]:
        names = [c.name for c in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"criteria {twice} are defined twice; each name is one metric")
        return value

    @model_validator(mode="after")
    def _kafka_needs_servers(self) -> Settings:
        if self.source == "kafka" and not self.kafka.bootstrap:
            raise ValueError(
                "kafka_bootstrap: source is kafka but no bootstrap server is given (HOST:PORT,...)"
            )
        return self

    @property
    def redacts(self) -> bool:
        """Whether judge inputs are redacted: on, or auto with an LLM (remote) judge."""
        pii = self.security.pii
        return pii == "on" or (pii == "auto" and not self.judge.is_local)

    def origin(self, name: str) -> str:
        """Where the flat setting `name` came from: a layer's name, or "default"."""
        return self._origins.get(name, "default")

    def error(self, name: str, message: str) -> ConfigError:
        """A ConfigError about the flat setting `name`, naming where it came from and its env var."""
        return ConfigError(f"invalid configuration:\n  {_about(name, self.origin(name))}: {message}")

    def value(self, name: str) -> Any:
        """The value of the flat setting `name` (for messages and `validate-config`)."""
        field = _FLAT[name]
        holder = getattr(self, field.section) if field.section else self
        return getattr(holder, field.attribute)

    def with_defaults(self, defaults: Mapping[str, Any]) -> Settings:
        """These flat settings where the user set nothing (a command's own defaults, e.g. the demo's)."""
        unset = {name: value for name, value in defaults.items() if name not in self._origins}
        if not unset:
            return self
        flat = {name: self.value(name) for name in self._origins}
        updated = Settings.model_validate({**flat, **unset})
        updated._origins = dict(self._origins)
        return updated


class _FlatName:
    """One setting as users name it: flat name → (section, attribute, field)."""

    __slots__ = ("attribute", "field", "section")

    def __init__(self, section: str, attribute: str, field: Any) -> None:
        self.section = section
        self.attribute = attribute
        self.field = field


def _flat_names() -> dict[str, _FlatName]:
    names: dict[str, _FlatName] = {}
    for attribute, field in Settings.model_fields.items():
        if attribute not in SECTIONS:
            names[attribute] = _FlatName("", attribute, field)
    for section, model in SECTIONS.items():
        for attribute, field in model.model_fields.items():
            flat = field.alias or attribute
            assert flat not in names, f"two settings are named {flat}"
            names[flat] = _FlatName(section, attribute, field)
    return names


_FLAT = _flat_names()
# Lists, also where unset means "the default of something else" (metrics: the judge's).
_LIST_FIELDS = {
    name for name, f in _FLAT.items() if f.field.annotation in (tuple[str, ...], tuple[str, ...] | None)
}


def setting_names() -> Iterator[str]:
    """Every flat setting name, top-level ones first, then section by section."""
    return iter(_FLAT)


def _about(name: str, where: str) -> str:
    return f"{name} (from {where}; env {ENV_PREFIX}{name.upper()})"


def _flatten(
    mapping: Mapping[str, Any], prefix: str = "", written: dict[str, str] | None = None, path: str = ""
) -> dict[str, Any]:
    """YAML's nesting to flat names: a section's own keys (`kafka: {topic}`, `sampling: {rate}`) and
    prefixes (`sample: {rate}`, `route: {attributes}`) both work. `written` receives each flat
    name's key as the file spells it (`judge.modle`), for messages about it."""
    flat: dict[str, Any] = {}
    written = {} if written is None else written

    def put(name: str, value: Any, as_written: str) -> None:
        flat[name] = value
        written[name] = as_written

    for raw_key, value in mapping.items():
        key = str(raw_key).replace("-", "_")
        name = f"{prefix}{key}"
        where = f"{path}{raw_key}"
        if not prefix and key in SECTIONS and isinstance(value, Mapping):
            model = SECTIONS[key]
            for raw_inner, inner_value in value.items():
                inner = str(raw_inner).replace("-", "_")
                field = model.model_fields.get(inner)
                if field is not None:
                    put(field.alias or inner, inner_value, f"{where}.{raw_inner}")
                elif inner in _FLAT and _FLAT[inner].section == key:  # `series: {max_label_pairs: 5}`
                    put(inner, inner_value, f"{where}.{raw_inner}")
                else:
                    flat.update(_flatten({raw_inner: inner_value}, f"{key}_", written, f"{where}."))
        elif isinstance(value, Mapping) and name not in _FLAT:
            flat.update(_flatten(value, f"{name}_", written, f"{where}."))
        else:
            put(name, value, where)
    return flat


def _from_yaml(path: Path, written: dict[str, str]) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of settings, not {type(loaded).__name__}")
    return _flatten(loaded, written=written)


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """RAGPULSE_<NAME> variables that name a setting; the others are warned about and ignored.

    Unknown variables are not fatal: Kubernetes injects RAGPULSE_SERVICE_HOST, RAGPULSE_PORT, ...
    into every pod of a namespace holding a Service named `ragpulse`.
    """
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == CONFIG_ENV:
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name in _FLAT:
            values[name] = raw
        else:
            unknown.append(key)
    if unknown:
        log.warning(
            "ignoring environment variable(s) that name no ragpulse setting: %s; "
            "`ragpulse validate-config --list` lists the settings",
            ", ".join(_with_suggestion(key) for key in sorted(unknown)),
        )
    return values


def _with_suggestion(env_name: str) -> str:
    """`RAGPULSE_SAMPLE_RAT (did you mean RAGPULSE_SAMPLE_RATE?)` for a likely typo."""
    name = env_name[len(ENV_PREFIX) :].lower()
    close = difflib.get_close_matches(name, list(_FLAT), n=1, cutoff=0.85)
    return f"{env_name} (did you mean {ENV_PREFIX}{close[0].upper()}?)" if close else env_name


def _closest_setting(key: str) -> str | None:
    """The known setting `key` (a flat name, or a YAML key as written: `judge.modle`) most likely
    meant, spelt the same way (`judge.model`); None when none is close."""
    parts = key.replace("-", "_").split(".")
    if len(parts) == 2 and parts[0] in SECTIONS:  # `judge: {modle: ...}`: the section's own keys
        section = parts[0]
        known = [*SECTIONS[section].model_fields, *(n for n, f in _FLAT.items() if f.section == section)]
        close = difflib.get_close_matches(parts[1], known, n=1, cutoff=0.7)
        if close:
            return f"{section}.{close[0]}"
    # Flat names, and `<section>_<field>`, which users guess for one (sampling_rate → sample_rate).
    guesses = {name: name for name in _FLAT}
    for name, flat in _FLAT.items():
        if flat.section:
            guesses.setdefault(f"{flat.section}_{flat.attribute}", name)
    close = difflib.get_close_matches("_".join(parts), list(guesses), n=1, cutoff=0.7)
    if not close:
        return None
    meant = guesses[close[0]]
    # Keep the user's nesting where the name allows it (`sample: {rat: }` → sample.rate).
    prefix = "_".join(parts[:-1]) + "_"
    if len(parts) > 1 and meant.startswith(prefix):
        return ".".join(parts[:-1]) + "." + meant[len(prefix) :]
    return meant


def load_settings(
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the one Settings object from file, environment and flags (highest wins)."""
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get(CONFIG_ENV)
    written: dict[str, str] = {}  # flat name → the config file's key as written (`judge.modle`)
    layers = {
        "config file": _from_yaml(Path(config_file), written) if config_file else {},
        "environment": _from_env(environ),
        "command line": {k: v for k, v in (overrides or {}).items() if v is not None},
    }
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for where, layer in layers.items():
        merged.update(layer)
        origin.update(dict.fromkeys(layer, where))
    for name in _LIST_FIELDS & merged.keys():
        # Env vars and flags give lists as "a,b"; YAML may give a real list.
        if isinstance(merged[name], str):
            merged[name] = [item.strip() for item in merged[name].split(",") if item.strip()]
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin, written)) from None
    settings._origins = origin
    return settings


def _flat_name(loc: tuple[Any, ...]) -> str:
    if not loc:
        return "?"
    head = str(loc[0])
    if head in SECTIONS and len(loc) > 1:
        inner = str(loc[1])
        field = SECTIONS[head].model_fields.get(inner)
        return (field.alias or inner) if field is not None else inner
    return head


def _describe(exc: ValidationError, origin: Mapping[str, str], written: Mapping[str, str]) -> str:
    lines = ["invalid configuration:"]
    for error in exc.errors():
        loc = tuple(error["loc"])
        name = _flat_name(loc)
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            key = written.get(name, name) if origin.get(name) == "config file" else name
            close = _closest_setting(key)
            hint = f"; did you mean {close}?" if close else ""
            lines.append(
                f"  {key} (from {origin.get(name, 'default')}): unknown setting{hint} "
                "(`ragpulse validate-config --list` lists every setting)"
            )
            continue
        if loc[:1] == ("criteria",) and len(loc) > 2:
            # Which criterion and which of its keys (the list's own checks name the criterion).
            if error["type"] == "unexpected_keyword_argument":
                message = f"unknown key; a criterion has {', '.join(Criterion.__dataclass_fields__)}"
            message = f"criterion {int(loc[1]) + 1}, {'.'.join(map(str, loc[2:]))}: {message}"
        if not loc or (len(loc) == 1 and loc[0] in SECTIONS):
            # A check across settings names its setting first ("kafka_bootstrap: ...").
            name, _, message = message.partition(": ")
        lines.append(f"  {_about(name, origin.get(name, 'default'))}: {message}")
    return "\n".join(lines)


def describe_settings() -> str:
    """One line per setting: YAML key, env var, default, meaning."""
    rows = []
    for name, flat in _FLAT.items():
        default = flat.field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            continue
        if isinstance(default, tuple):
            default = ",".join(default)
        elif isinstance(default, dict):
            default = ",".join(f"{k}={v}" for k, v in default.items())
        rows.append(
            f"{name:<26} {ENV_PREFIX + name.upper():<36} {default!s:<22} {flat.field.description or ''}"
        )
    return "\n".join(rows)
