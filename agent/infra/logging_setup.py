"""Logging for `ragpulse run`: one format, secrets masked at every level, prompts only on request."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from agent.config import Settings
from agent.infra.secrets import install_log_masking, url_password

# Loggers of the judge's HTTP stack that write whole request bodies (the prompts, i.e. the users'
# queries, chunks and answers) at DEBUG. They stay at INFO unless `log_prompts` is set.
PROMPT_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "openai", "httpx", "httpcore")
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
    values += [value for name, value in environ.items() if name.upper().endswith(_SECRET_ENV_SUFFIXES)]
    return [value for value in values if value]


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    install_log_masking(secret_values(settings))
    if not settings.security.log_prompts:
        for name in PROMPT_LOGGERS:
            logger = logging.getLogger(name)
            if logger.getEffectiveLevel() < logging.INFO:
                logger.setLevel(logging.INFO)
