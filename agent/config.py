"""Every setting of ragpulse, in one typed, frozen object.

Settings come from, in increasing precedence: defaults here, an optional YAML file
(`--config` or `RAGPULSE_CONFIG`), `RAGPULSE_<NAME>` environment variables, and command-line
flags. The YAML file may nest sections (`kafka: {topic: x}` is `kafka_topic`). Everything is
validated once at start-up; an error names the bad setting and where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

ENV_PREFIX = "RAGPULSE_"
CONFIG_ENV = "RAGPULSE_CONFIG"

LOCAL_JUDGES = ("lexical",)


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

    source: Literal["otlp-http"] = Field(
        "otlp-http", description="Where spans come from. otlp-http: the embedded OTLP/HTTP receiver."
    )
    otlp_listen: str = Field("127.0.0.1:4318", description="HOST:PORT of the OTLP/HTTP receiver.")
    otlp_max_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Largest OTLP/HTTP body accepted (after decompression)."
    )
    metrics_listen: str = Field(
        "127.0.0.1:9464", description="HOST:PORT serving /metrics, /healthz and /readyz."
    )

    judge_model: str = Field(
        "lexical", description="'lexical' for the built-in local judge, else a litellm model string."
    )
    judge_api_base: str | None = Field(None, description="Base URL of an OpenAI-compatible judge.")
    judge_api_key: SecretStr | None = Field(None, description="API key passed to the judge.")
    judge_timeout_seconds: float = Field(30.0, gt=0, description="Timeout of one judge call.")

    redis_url: str | None = Field(
        None, description="redis://... for the shared verdict cache; unset = in-process LRU."
    )
    cache_ttl_seconds: int = Field(7 * 24 * 3600, gt=0, description="Lifetime of a cached verdict.")
    cache_max_entries: int = Field(100_000, gt=0, description="Size of the in-process LRU cache.")

    metrics: tuple[str, ...] = Field(
        ("context_precision",), min_length=1, description="Metrics scored on sampled interactions."
    )
    sample_rate: float = Field(1.0, ge=0.0, le=1.0, description="Fraction of interactions scored.")
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
        1_000, gt=0, description="Spans kept per buffered trace; later spans of a full trace are evicted."
    )
    assembly_max_chunk_bytes: int = Field(
        256 * 1024 * 1024,
        gt=0,
        description="Bytes of text (chunks, queries, responses) buffered across traces; beyond it the "
        "oldest traces are evicted.",
    )
    max_label_values: int = Field(
        100, gt=0, description="Distinct values per label (service, route) before '__other__'."
    )
    eval_concurrency: int = Field(8, gt=0, description="Interactions evaluated concurrently.")
    max_pending: int = Field(
        1000, gt=0, description="Interactions waiting for evaluation before intake answers 503."
    )
    shutdown_timeout_seconds: float = Field(
        10.0, ge=0, description="How long shutdown waits for in-flight evaluations."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("otlp_listen", "metrics_listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        _split_host_port(value)
        return value

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from agent.metrics import STREAMING_METRICS

        unknown = [name for name in value if name not in STREAMING_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {sorted(STREAMING_METRICS)}")
        return value

    @property
    def otlp_address(self) -> tuple[str, int]:
        return _split_host_port(self.otlp_listen)

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
    values: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == CONFIG_ENV:
            continue
        values[key[len(ENV_PREFIX) :].lower()] = raw
    return values


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
        default = f.default
        if isinstance(default, tuple):
            default = ",".join(default)
        rows.append(f"{name:<26} {ENV_PREFIX + name.upper():<36} {default!s:<22} {f.description or ''}")
    return "\n".join(rows)
