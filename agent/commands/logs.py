"""Logging of every `ragpulse` command: one format, secrets masked at every level, prompts only
on request, and third-party clients quiet unless debugging."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from agent.config import Settings
from agent.infra.secrets import header_secrets, install_log_masking, url_password

# Loggers of the judge's HTTP stack that write whole request bodies (the prompts, i.e. the users'
# queries, chunks and answers) at DEBUG. They stay at INFO unless `log_prompts` is set.
PROMPT_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "openai", "httpx", "httpcore")
# Client libraries that write a line per connection attempt or request (kafka-python logs ~4 lines a
# second, at ERROR, while a broker is away). Below DEBUG they are held at these levels: the agent
# says what matters itself, once per interval (agent/infra/waiting.py, agent/throttled_log.py).
# `--log-level DEBUG` lets everything through.
QUIET_LOGGERS = {
    "kafka": logging.CRITICAL,
    "redis": logging.ERROR,
    "litellm": logging.WARNING,
    "LiteLLM": logging.WARNING,
    "LiteLLM Router": logging.WARNING,
    "LiteLLM Proxy": logging.WARNING,
    "openai": logging.WARNING,
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
    "urllib3": logging.WARNING,
    "aiohttp": logging.WARNING,
    "asyncio": logging.ERROR,
    "grpc": logging.ERROR,
}
# Environment variables whose values are secrets wherever they appear (provider keys for litellm).
_SECRET_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_PASSWORD", "_SECRET", "_SECRET_KEY", "_ACCESS_KEY")


def secret_values(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret the process knows: to be masked in whatever it prints."""
    environ = os.environ if environ is None else environ
    values: list[str | None] = [
        url_password(settings.redis.url),
        url_password(settings.judge.api_base),
        settings.kafka.sasl_password.get_secret_value() if settings.kafka.sasl_password else None,
        settings.judge.api_key.get_secret_value() if settings.judge.api_key else None,
        settings.otlp.bearer_token.get_secret_value() if settings.otlp.bearer_token else None,
    ]
    # Credentials in headers ragpulse sends: the probe endpoints', the OTLP results endpoint's.
    values += header_secrets(settings.results.otlp_header_map)
    for endpoint in settings.probes.endpoints:
        values += header_secrets(endpoint.headers)
    values += [value for name, value in environ.items() if name.upper().endswith(_SECRET_ENV_SUFFIXES)]
    return [value for value in values if value]


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    install_log_masking(secret_values(settings))
    if settings.log_level != "DEBUG":
        for name, level in QUIET_LOGGERS.items():
            logging.getLogger(name).setLevel(level)
    if not settings.security.log_prompts:
        for name in PROMPT_LOGGERS:
            logger = logging.getLogger(name)
            if logger.getEffectiveLevel() < logging.INFO:
                logger.setLevel(logging.INFO)
