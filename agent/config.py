"""Every setting of ragpulse, in one typed, frozen object.

Settings come from, in increasing precedence: defaults here, an optional YAML file
(`--config` or `RAGPULSE_CONFIG`), `RAGPULSE_<NAME>` environment variables, and command-line
flags. The YAML file may nest sections (`kafka: {topic: x}` is `kafka_topic`). Everything is
validated once at start-up; an error names the bad setting and where it came from.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

ENV_PREFIX = "RAGPULSE_"
CONFIG_ENV = "RAGPULSE_CONFIG"

log = logging.getLogger(__name__)

LOCAL_JUDGES = ("lexical", "embedding")

# Defaults of the quality alert (docs/runbooks.md): a sustained mean below these pages.
DEFAULT_ALERT_THRESHOLDS = {
    "faithfulness": 0.80,
    "context_relevancy": 0.60,
    "answer_relevancy": 0.70,
    "context_precision": 0.70,
}


class ConfigError(ValueError):
    """A setting is missing, unknown or invalid; the message names it and says what to do."""


def _split_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:4318), got {value!r}")
    return host.strip("[]"), int(port)


class Settings(BaseModel):
    """ragpulse configuration. Field names are the YAML keys; env vars are RAGPULSE_<NAME>."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Literal["otlp-http", "kafka"] = Field(
        "otlp-http",
        description="Where spans come from: otlp-http (embedded receiver) or kafka (consumer group).",
    )
    otlp_listen: str = Field("127.0.0.1:4318", description="HOST:PORT of the OTLP/HTTP receiver.")
    # OTLP/gRPC beside OTLP/HTTP in the embedded default (most SDKs and the Collector default to it).
    otlp_grpc_listen: str = Field(
        "127.0.0.1:4317",
        description="HOST:PORT of the OTLP/gRPC receiver run beside OTLP/HTTP (source otlp-http); "
        "empty to disable.",
    )
    otlp_max_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Largest OTLP/HTTP body accepted (after decompression)."
    )
    metrics_listen: str = Field(
        "127.0.0.1:9464", description="HOST:PORT serving /metrics, /healthz and /readyz."
    )

    kafka_bootstrap: tuple[str, ...] = Field(
        ("127.0.0.1:9092",), description="Kafka bootstrap servers, comma-separated HOST:PORT."
    )
    kafka_topic: str = Field("otlp_spans", description="Topic the Collector's kafka exporter writes to.")
    kafka_group_id: str = Field("ragpulse", description="Consumer group shared by all replicas.")
    kafka_encoding: Literal["otlp_proto", "otlp_json"] = Field(
        "otlp_proto", description="Encoding set on the Collector's kafka exporter."
    )
    kafka_auto_offset_reset: Literal["latest", "earliest"] = Field(
        "latest",
        description="Where a new consumer group starts: latest skips the backlog, earliest backfills.",
    )
    kafka_max_partition_fetch_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="Largest fetch per partition; must exceed the largest message."
    )
    kafka_fetch_max_bytes: int = Field(64 * 1024 * 1024, gt=0, description="Largest fetch response.")
    kafka_session_timeout_ms: int = Field(10_000, gt=0, description="Group session timeout.")
    kafka_heartbeat_interval_ms: int = Field(3_000, gt=0, description="Group heartbeat interval.")
    kafka_max_poll_interval_ms: int = Field(300_000, gt=0, description="Max time between polls.")
    kafka_commit_interval_seconds: float = Field(
        1.0, gt=0, description="How often finished offsets are committed."
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: str | None = Field(None, description="CA bundle to verify the brokers.")
    kafka_ssl_certfile: str | None = Field(None, description="Client certificate for mutual TLS.")
    kafka_ssl_keyfile: str | None = Field(None, description="Client key for mutual TLS.")

    results_topic: str | None = Field(
        None, description="Kafka topic receiving each evaluated interaction as OTLP (unset = off)."
    )
    results_include_text: bool = Field(
        False, description="Include the query and response text in published results."
    )

    # Per-interaction results as OTLP/HTTP to any trace backend (agent/exporters/otlp_results.py).
    results_otlp_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP endpoint (e.g. http://collector:4318) receiving each evaluated "
        "interaction as a span with gen_ai.evaluation.result events (unset = off).",
    )
    results_otlp_headers: tuple[str, ...] = Field(
        (), description="Headers sent to results_otlp_endpoint, NAME=VALUE, comma-separated."
    )
    results_otlp_timeout_seconds: float = Field(
        10.0, gt=0, description="Timeout of one POST to results_otlp_endpoint (then retried)."
    )

    judge_model: str = Field(
        "lexical",
        description="'lexical' (built-in local judge), 'embedding' (local MiniLM judge, extra "
        "ragpulse[embedding]), else a litellm model string.",
    )
    judge_api_base: str | None = Field(None, description="Base URL of an OpenAI-compatible judge.")
    judge_api_key: SecretStr | None = Field(None, description="API key passed to the judge.")
    judge_timeout_seconds: float = Field(30.0, gt=0, description="Timeout of one judge call.")
    judge_max_retries: int = Field(
        3, ge=0, description="Retries of a judge call after 429 / 5xx / timeout (never after other errors)."
    )
    judge_retry_max_elapsed_seconds: float = Field(
        60.0, gt=0, description="Cap on the time one judge question may spend retrying."
    )
    judge_breaker_failures: int = Field(
        5, gt=0, description="Consecutive failed judge calls that open the circuit breaker."
    )
    judge_breaker_cooldown_seconds: float = Field(
        30.0, gt=0, description="How long an open breaker refuses calls before one probe call."
    )
    judge_max_concurrency: int = Field(
        64, gt=0, description="Judge calls in flight at once (per replica; 429s back off)."
    )
    judge_structured_output: Literal["auto", "json_schema", "json_object", "off"] = Field(
        "auto",
        description="Response format asked of the judge; auto: JSON schema where litellm says the "
        "model supports it, else JSON mode.",
    )

    redis_url: str | None = Field(
        None, description="redis://... for the shared verdict cache; unset = in-process LRU."
    )
    cache_ttl_seconds: int = Field(7 * 24 * 3600, gt=0, description="Lifetime of a cached verdict.")
    cache_max_entries: int = Field(100_000, gt=0, description="Size of the in-process LRU cache.")
    cache_key_prefix: str = Field(
        "ragpulse:v1:verdict:", min_length=1, description="Prefix of verdict keys in Redis."
    )

    metrics: tuple[str, ...] = Field(
        ("context_precision", "context_relevancy", "faithfulness", "answer_relevancy"),
        min_length=1,
        description="Metrics scored on sampled interactions (the reference-free set by default).",
    )
    sample_rate: float = Field(1.0, ge=0.0, le=1.0, description="Fraction of interactions scored.")
    sample_rates: tuple[str, ...] = Field(
        (), description="Rates per service or route: service=RATE or service/route=RATE, comma-separated."
    )
    sample_keep_rules: tuple[str, ...] = Field(
        (),
        description="Interactions always scored when a span attribute matches, e.g. feedback.score < 0.",
    )
    budget_calls_per_minute: float | None = Field(
        None, gt=0, description="Judge calls per minute across all replicas; sampling slows above it."
    )
    budget_usd_per_hour: float | None = Field(
        None, gt=0, description="Judge spend in USD per hour across all replicas; sampling slows above it."
    )
    idempotency_lease_seconds: float = Field(
        60.0, gt=0, description="How long a replica's claim on an interaction blocks the others."
    )
    idempotency_ttl_seconds: float = Field(
        3600.0, gt=0, description="How long a scored interaction id is remembered (redelivery window)."
    )
    route_attributes: tuple[str, ...] = Field(
        ("http.route",),
        description="Span attributes tried in order for the route label; the span name is the fallback.",
    )
    assembly_wait_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a trace's spans wait for the rest of the trace (its root, the LLM call) "
        "before the trace is assembled from what arrived.",
    )
    assembly_max_traces: int = Field(
        10_000, gt=0, description="Traces buffered at once; beyond it the oldest is evicted (counted)."
    )
    assembly_max_spans_per_trace: int = Field(
        1_000,
        gt=0,
        description="RAG spans kept per buffered trace, and (separately) other spans kept to link them; "
        "later spans of a full trace are evicted.",
    )
    assembly_max_chunk_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="Bytes buffered across traces: the text of chunks, queries and responses plus ~400 "
        "bytes per buffered span of any kind; beyond it the oldest traces are evicted.",
    )
    max_label_values: int = Field(
        100, gt=0, description="Distinct routes per service before that service's others are '__other__'."
    )
    eval_concurrency: int = Field(
        32, gt=0, description="Interactions evaluated concurrently (each waits on judge calls)."
    )
    max_pending: int = Field(
        1000, gt=0, description="Interactions waiting for evaluation before intake answers 503."
    )
    shutdown_timeout_seconds: float = Field(
        10.0, ge=0, description="How long shutdown waits for in-flight evaluations."
    )
    drift_baseline_size: int = Field(
        1000, ge=10, description="Scores per series learnt as the baseline before drift is judged."
    )
    drift_window: int = Field(200, ge=10, description="Recent scores compared with the baseline.")
    drift_threshold: float = Field(12.0, gt=0, description="CUSUM alarm threshold, in baseline sd.")
    drift_alpha: float = Field(1e-5, gt=0, lt=1, description="p-value the window test must reach.")
    drift_max_series: int = Field(2000, gt=0, description="Series tracked for drift (LRU beyond).")
    # Bounds against hostile or oversized input (docs/limits.md lists every bound).
    max_label_pairs: int = Field(
        500,
        gt=0,
        description="Series budget: distinct (service, route) label pairs; beyond it an interaction is "
        "labelled (service, '__other__') or ('__other__', '__other__'). Every series with service and "
        "route labels is bounded by it.",
    )
    judge_max_text_chars: int = Field(
        32_768,
        gt=0,
        description="Texts (query, response, each chunk) longer than this are cut before judging (counted).",
    )
    drift_save_interval_seconds: float = Field(
        10.0, gt=0, description="How often drift detector state is saved to Redis (when redis_url is set)."
    )
    drift_state_ttl_seconds: int = Field(
        30 * 24 * 3600, gt=0, description="Lifetime in Redis of a drift series that receives no scores."
    )
    # Delivery under faults (docs/guarantees.md).
    judge_self_check: bool = Field(
        True, description="At start, one small call to an LLM judge; a failure is logged clearly."
    )
    judge_defer_max_attempts: int = Field(
        5,
        gt=0,
        description="Retryable judge failures of one interaction, while the judge answers others, "
        "before it is recorded as an error instead of retried.",
    )
    sample_keep_max_per_minute: float | None = Field(
        600.0,
        gt=0,
        description="Interactions per minute (per replica) that keep rules may force past the rate "
        "and the budget; beyond it they are sampled like the rest. Unset = no cap.",
    )
    # Alerting: exported as ragpulse_quality_threshold{metric}, which the Prometheus alert rules
    # compare the recorded means against, so thresholds change without editing the rules.
    alert_thresholds: dict[str, float] = Field(
        dict(DEFAULT_ALERT_THRESHOLDS),
        description="Score means below which the quality alert fires, metric=VALUE or "
        "service/metric=VALUE (one service), comma-separated; unnamed metrics keep their defaults "
        "(faithfulness=0.8, context_relevancy=0.6, answer_relevancy=0.7, context_precision=0.7).",
    )
    # Trust (docs/trust.md): human labels, judge calibration, prediction-powered estimates.
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
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    # -- Security (docs/security.md) -------------------------------------------------------------
    redact_pii: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Replace personal data with placeholders before text leaves for a judge; "
        "auto = on for LLM judges, off for the local judges (which send nothing).",
    )
    redact_kinds: tuple[str, ...] = Field(
        ("email", "phone", "card", "iban", "ip"), description="Built-in kinds of personal data redacted."
    )
    redact_patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Custom kinds to redact, KIND: regex (YAML mapping, or a JSON object in the env var).",
    )
    redact_allow: tuple[str, ...] = Field(
        (), description="Values never redacted (e.g. your public support address), comma-separated."
    )
    redact_phone_regions: tuple[str, ...] = Field(
        ("US", "GB", "DE", "FR", "IN"),
        description="Regions whose national phone formats are recognised (+ numbers always are).",
    )
    log_prompts: bool = Field(
        False, description="Let litellm/openai log judge prompt bodies at DEBUG (off: they never log)."
    )
    otlp_tls_cert_file: str | None = Field(None, description="PEM certificate: serve OTLP/HTTP over TLS.")
    otlp_tls_key_file: str | None = Field(None, description="PEM private key of otlp_tls_cert_file.")
    otlp_tls_client_ca_file: str | None = Field(
        None, description="CA bundle: require OTLP clients to present a certificate it signed (mTLS)."
    )
    otlp_bearer_token: SecretStr | None = Field(
        None, description="Require 'Authorization: Bearer <token>' on OTLP requests."
    )
    otlp_bearer_token_file: str | None = Field(
        None, description="File holding the OTLP bearer token (re-read at start; for mounted secrets)."
    )
    metrics_web_config_file: str | None = Field(
        None,
        description="Prometheus web configuration file (tls_server_config, basic_auth_users) for "
        "/metrics, /healthz and /readyz.",
    )

    @field_validator("otlp_listen", "metrics_listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        _split_host_port(value)
        return value

    @field_validator("results_otlp_headers")
    @classmethod
    def _header_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            name, sep, _ = entry.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"expected NAME=VALUE, got {entry!r}")
        return value

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from agent.metrics import METRICS

        # A key is a metric (every service) or service/metric (that service only).
        unknown = [name for name in value if str(name).rpartition("/")[2] not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {sorted(METRICS)}")
        return value

    @field_validator("sample_rates")
    @classmethod
    def _rate_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from agent.sampling import RateTable

        RateTable.parse(1.0, value)
        return value

    @field_validator("sample_keep_rules")
    @classmethod
    def _keep_rules(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from agent.sampling import KeepRule

        for rule in value:
            KeepRule.parse(rule)
        return value

    @field_validator("redact_pii", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML reads a bare on/off as a boolean.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("redact_patterns", mode="before")
    @classmethod
    def _patterns_from_json(cls, value: Any) -> Any:
        # An environment variable gives the mapping as a JSON object.
        if isinstance(value, str):
            import json

            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                example = '{"EMPLOYEE_ID": "E\\\\d{6}"}'
                raise ValueError(f"expected a JSON object such as {example}: {exc}") from None
        return value

    @field_validator("redact_patterns")
    @classmethod
    def _patterns_compile(cls, value: dict[str, str]) -> dict[str, str]:
        from agent.redact import RedactionRules, Redactor

        Redactor(RedactionRules(patterns=value))
        return value

    @field_validator("redact_kinds")
    @classmethod
    def _redact_kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from agent.redact import BUILTIN_KINDS

        unknown = sorted(set(value) - set(BUILTIN_KINDS))
        if unknown:
            raise ValueError(f"unknown kind(s) {unknown}; choose from {list(BUILTIN_KINDS)}")
        return value

    @property
    def redacts(self) -> bool:
        """Whether judge inputs are redacted: on, or auto with an LLM (remote) judge."""
        return self.redact_pii == "on" or (self.redact_pii == "auto" and not self.judge_is_local)

    @field_validator("alert_thresholds", mode="before")
    @classmethod
    def _thresholds(cls, value: Any) -> dict[str, float]:
        from agent.metrics import METRICS

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
        # A key is a metric (every service) or service/metric (that service only).
        unknown = [name for name in value if str(name).rpartition("/")[2] not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {sorted(METRICS)}")
        merged = dict(DEFAULT_ALERT_THRESHOLDS)
        for name, number in value.items():
            try:
                threshold = float(number)
            except (TypeError, ValueError):
                raise ValueError(f"threshold of {name} must be a number, got {number!r}") from None
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(f"threshold of {name} must be within [0, 1], got {threshold}")
            merged[name] = threshold
        return merged

    @field_validator("calibration_file")
    @classmethod
    def _calibration(cls, value: str | None) -> str | None:
        if value is not None:
            from agent.trust.calibration import load_calibrations

            load_calibrations(Path(value))  # a bad file fails at start-up, not on the first score
        return value

    @field_validator("label_uncertain_high")
    @classmethod
    def _uncertain_band(cls, value: float, info: Any) -> float:
        low = info.data.get("label_uncertain_low")
        if low is not None and value < low:
            raise ValueError(f"must be >= label_uncertain_low ({low})")
        return value

    @property
    def otlp_address(self) -> tuple[str, int]:
        return _split_host_port(self.otlp_listen)

    @field_validator("otlp_grpc_listen")
    @classmethod
    def _optional_host_port(cls, value: str) -> str:
        if value:
            _split_host_port(value)
        return value

    @property
    def otlp_grpc_address(self) -> tuple[str, int] | None:
        return _split_host_port(self.otlp_grpc_listen) if self.otlp_grpc_listen else None

    @property
    def metrics_address(self) -> tuple[str, int]:
        return _split_host_port(self.metrics_listen)

    @property
    def judge_is_local(self) -> bool:
        return self.judge_model in LOCAL_JUDGES


_LIST_FIELDS = {name for name, f in Settings.model_fields.items() if f.annotation == tuple[str, ...]}


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}".replace("-", "_")
        if isinstance(value, Mapping) and name not in Settings.model_fields:
            flat.update(_flatten(value, f"{name}_"))
        else:
            flat[name] = value
    return flat


def _from_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, Mapping):
        raise ConfigError(f"config file {path} must hold a mapping of settings, not {type(loaded).__name__}")
    return _flatten(loaded)


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
        if name in Settings.model_fields:
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
    close = difflib.get_close_matches(name, Settings.model_fields, n=1, cutoff=0.85)
    return f"{env_name} (did you mean {ENV_PREFIX}{close[0].upper()}?)" if close else env_name


def load_settings(
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the one Settings object from file, environment and flags (highest wins)."""
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get(CONFIG_ENV)
    layers = {
        "config file": _from_yaml(Path(config_file)) if config_file else {},
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
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, origin)) from None


def _describe(exc: ValidationError, origin: Mapping[str, str]) -> str:
    lines = ["invalid configuration:"]
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "?"
        where = origin.get(name, "default")
        env_name = f"{ENV_PREFIX}{name.upper()}"
        if error["type"] == "extra_forbidden":
            lines.append(f"  {name} (from {where}): unknown setting; see `ragpulse validate-config --list`")
        else:
            lines.append(f"  {name} (from {where}; env {env_name}): {error['msg']}")
    return "\n".join(lines)


def describe_settings() -> str:
    """One line per setting: YAML key, env var, default, meaning."""
    rows = []
    for name, f in Settings.model_fields.items():
        default = f.get_default(call_default_factory=True)
        if isinstance(default, tuple):
            default = ",".join(default)
        elif isinstance(default, dict):
            default = ",".join(f"{k}={v}" for k, v in default.items())
        rows.append(f"{name:<26} {ENV_PREFIX + name.upper():<36} {default!s:<22} {f.description or ''}")
    return "\n".join(rows)


def display_settings(settings: Settings) -> str:
    """The settings as JSON for people to read: secrets as ***, passwords in URLs masked."""
    import json

    from agent.secrets import MASK, mask_url

    values = settings.model_dump(mode="json")
    for name, value in values.items():
        if isinstance(getattr(settings, name), SecretStr):
            values[name] = MASK
        elif isinstance(value, str):
            values[name] = mask_url(value)
        elif isinstance(value, list):
            values[name] = [mask_url(v) if isinstance(v, str) else v for v in value]
    return json.dumps(values, indent=2)
