"""Secrets never shown: URL passwords and known secret values masked in logs and settings output."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import yaml

from agent.cli import display_settings, settings_listing
from agent.commands.logs import PROMPT_LOGGERS, configure_logging, secret_values
from agent.config import load_settings
from agent.infra.secrets import MASKER, install_log_masking, is_secret_header, mask, mask_url, url_password

REDIS_PASSWORD = "r3dis-Pa55/word"  # a '/' must survive URL encoding
API_KEY = "sk-planted-api-key-0123456789"
SASL_PASSWORD = "sasl-planted-pw-9876"
ENV = {
    "RAGPULSE_REDIS_URL": f"redis://default:{REDIS_PASSWORD.replace('/', '%2F')}@127.0.0.1:6390/0",
    "RAGPULSE_JUDGE_MODEL": "openai/gpt-4o-mini",
    "RAGPULSE_JUDGE_API_KEY": API_KEY,
    "RAGPULSE_KAFKA_SASL_PASSWORD": SASL_PASSWORD,
    "RAGPULSE_KAFKA_SASL_USERNAME": "ragpulse",
}


@pytest.fixture
def masker() -> Iterator[None]:
    MASKER.clear()
    yield
    MASKER.clear()


def test_url_passwords_are_masked_whoever_wrote_them() -> None:
    assert mask_url("redis://:pw@host:6379/0") == "redis://:***@host:6379/0"
    assert (
        mask_url("error talking to rediss://user:p%40ss@h/1: refused")
        == "error talking to rediss://user:***@h/1: refused"
    )
    assert (
        mask_url("http://host:8080/v1 and kafka://broker:9092")
        == "http://host:8080/v1 and kafka://broker:9092"
    )
    assert url_password("redis://u:p%2Fw@h/0") == "p/w"
    assert url_password("redis://h/0") is None


def test_known_secrets_are_masked_in_text_and_encoded_forms(masker: None) -> None:
    MASKER.add([API_KEY, REDIS_PASSWORD, "abc"])  # too short to mask by value
    text = f"key={API_KEY} url-encoded={REDIS_PASSWORD.replace('/', '%2F')} raw={REDIS_PASSWORD} abc"
    assert mask(text) == "key=*** url-encoded=*** raw=*** abc"


def test_validate_config_output_masks_every_secret() -> None:
    settings = load_settings(environ=ENV)
    shown = display_settings(settings)
    for secret in (REDIS_PASSWORD, REDIS_PASSWORD.replace("/", "%2F"), API_KEY, SASL_PASSWORD):
        assert secret not in shown
    values = json.loads(shown)
    # Printed by section, as the YAML file nests them.
    assert values["redis"]["url"] == "redis://default:***@127.0.0.1:6390/0"
    assert values["judge"]["api_key"] == values["kafka"]["sasl_password"] == "***"
    assert values["kafka"]["sasl_username"] == "ragpulse"  # not a secret


PROBE_TOKEN = "probe-planted-token-31c5"
RESULTS_KEY = "results-planted-key-7a0e"
HEADERS_ENV = {
    "RAGPULSE_PROBES_ENDPOINTS": json.dumps([{
        "url": "http://app:8000/ask",
        "headers": {"Authorization": f"Bearer {PROBE_TOKEN}", "Cookie": "sid=planted-cookie-9",
                    "x-tenant": "t1"},
    }]),
    "RAGPULSE_RESULTS_OTLP_ENDPOINT": "http://collector:4318",
    "RAGPULSE_RESULTS_OTLP_HEADERS": f"x-api-key={RESULTS_KEY},x-scope=eu",
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "secret"),
    [("authorization", True), ("Proxy-Authorization", True), ("cookie", True), ("X-Api-Key", True),
     ("api-key", True), ("x-auth-token", True), ("x-client-secret", True), ("x-db-password", True),
     ("content-type", False), ("x-tenant", False), ("accept", False), ("user-agent", False)],
)  # fmt: skip
def test_credential_headers_are_told_by_their_name(name: str, secret: bool) -> None:
    assert is_secret_header(name) is secret


def test_validate_config_masks_credential_headers_and_keeps_the_others() -> None:
    settings = load_settings(environ=HEADERS_ENV)
    shown = display_settings(settings)
    for secret in (PROBE_TOKEN, "planted-cookie-9", RESULTS_KEY):
        assert secret not in shown
        assert secret not in repr(settings)
    values = json.loads(shown)
    headers = values["probes"]["endpoints"][0]["headers"]
    assert headers == {"Authorization": "***", "Cookie": "***", "x-tenant": "t1"}
    assert values["results"]["otlp_headers"] == ["x-api-key=***", "x-scope=eu"]


@pytest.mark.parametrize("everything", [False, True])
def test_the_settings_listing_masks_as_the_json_does(everything: bool) -> None:
    """`validate-config` (what was set) and `validate-config --all`: the same masking as --json."""
    settings = load_settings(environ={**ENV, **HEADERS_ENV})
    listing = settings_listing(settings, everything=everything)
    for secret in (REDIS_PASSWORD, REDIS_PASSWORD.replace("/", "%2F"), API_KEY, SASL_PASSWORD, PROBE_TOKEN,
                   "planted-cookie-9", RESULTS_KEY):  # fmt: skip
        assert secret not in listing
    values = yaml.safe_load(listing)
    assert values["redis"]["url"] == "redis://default:***@127.0.0.1:6390/0"
    assert values["judge"]["api_key"] == values["kafka"]["sasl_password"] == "***"
    assert values["probes"]["endpoints"][0]["headers"] == {
        "Authorization": "***",
        "Cookie": "***",
        "x-tenant": "t1",
    }
    assert values["results"]["otlp_headers"] == ["x-api-key=***", "x-scope=eu"]
    # Only shown masked: the requests send them as given.
    assert settings.probes.endpoints[0].headers["Authorization"] == f"Bearer {PROBE_TOKEN}"
    assert settings.results.otlp_header_map["x-api-key"] == RESULTS_KEY


def test_credential_headers_are_masked_in_logs_bare_or_with_their_scheme(masker: None) -> None:
    settings = load_settings(environ=HEADERS_ENV)
    known = set(secret_values(settings, environ={}))
    assert {f"Bearer {PROBE_TOKEN}", PROBE_TOKEN, "sid=planted-cookie-9", RESULTS_KEY} <= known
    assert not known & {"t1", "eu"}
    install_log_masking(known)
    assert mask(f"GET /ask authorization: Bearer {PROBE_TOKEN}; token {PROBE_TOKEN}") == (
        "GET /ask authorization: ***; token ***"
    )


def test_log_records_are_masked_at_every_level_and_in_tracebacks(masker: None) -> None:
    settings = load_settings(environ=ENV)
    assert set(secret_values(settings, environ={"OPENAI_API_KEY": "sk-env-key-555"})) >= {
        REDIS_PASSWORD,
        API_KEY,
        SASL_PASSWORD,
        "sk-env-key-555",
    }
    install_log_masking(secret_values(settings, environ={}))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("tests.secrets")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("connecting to %s with key %s", settings.redis.url, API_KEY)
        logger.info(f"sasl password is {SASL_PASSWORD}")
        try:
            raise ConnectionError(f"cannot reach rediss://user:other-pw@host:1/0 ({API_KEY})")
        except ConnectionError:
            logger.exception("redis failed")
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    for secret in (REDIS_PASSWORD, API_KEY, SASL_PASSWORD, "other-pw"):
        assert secret not in written
    assert "connecting to redis://default:***@127.0.0.1:6390/0 with key ***" in written
    assert (
        "Traceback" in written and "ConnectionError: cannot reach rediss://user:***@host:1/0 (***)" in written
    )


def test_prompt_loggers_stay_quiet_at_debug_unless_log_prompts(masker: None) -> None:
    saved = {name: logging.getLogger(name).level for name in PROMPT_LOGGERS}
    try:
        for name in PROMPT_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        configure_logging(load_settings(environ={"RAGPULSE_LOG_LEVEL": "DEBUG"}))
        assert all(not logging.getLogger(n).isEnabledFor(logging.DEBUG) for n in PROMPT_LOGGERS)
        for name in PROMPT_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.DEBUG)
        configure_logging(
            load_settings(environ={"RAGPULSE_LOG_LEVEL": "DEBUG", "RAGPULSE_LOG_PROMPTS": "true"})
        )
        assert logging.getLogger("openai").isEnabledFor(logging.DEBUG)
        root.setLevel(level)
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def test_results_topic_messages_never_carry_a_secret(masker: None) -> None:
    from agent.exporters.kafka_results import evaluation_request
    from agent.model import Chunk, MetricResult, RagInteraction

    install_log_masking([API_KEY])
    interaction = RagInteraction("ab" * 16, "cd" * 8, "q", (Chunk("c"),), "r", "s", "r")
    failed = MetricResult.error(
        "faithfulness", f"judge call failed permanently: HTTP 401: Incorrect API key provided: {API_KEY}"
    )
    message = evaluation_request(interaction, [failed], include_text=True).SerializeToString()
    assert API_KEY.encode() not in message
    assert b"Incorrect API key provided: ***" in message
