"""Secrets never shown: a Redis password, a judge API key and a SASL password planted in the
configuration appear nowhere a person or a scraper can read: `validate-config`, the agent's
DEBUG logs (including the errors of a Redis it cannot reach and a Kafka broker it cannot reach),
/metrics, and the CLI's error messages."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.support.agent_process import AgentProcess
from tests.support.llm_server import FakeLLMServer
from tests.support.net import free_port, http_get
from tests.support.repo import ROOT

pytestmark = pytest.mark.integration

REDIS_PASSWORD = "planted-redis-pw-7f3a9c"
API_KEY = "sk-planted-judge-key-51b8e2"
SASL_PASSWORD = "planted-sasl-pw-c0ffee"
SECRETS = (REDIS_PASSWORD, API_KEY, SASL_PASSWORD)


def planted_env(**extra: str) -> dict[str, str]:
    return {
        # Nothing listens on this port: every Redis operation fails with a connection error.
        "RAGPULSE_REDIS_URL": f"redis://default:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0",
        "RAGPULSE_JUDGE_API_KEY": API_KEY,
        "RAGPULSE_KAFKA_SASL_USERNAME": "ragpulse",
        "RAGPULSE_KAFKA_SASL_PASSWORD": SASL_PASSWORD,
        "RAGPULSE_LOG_LEVEL": "DEBUG",
        **extra,
    }


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} shown in {where}"


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")} | env
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_validate_config_and_config_errors_mask_secrets() -> None:
    shown = run_cli("validate-config", env=planted_env(RAGPULSE_JUDGE_MODEL="openai/gpt-4o-mini"))
    assert shown.returncode == 0, shown.stderr
    assert_no_secret(shown.stdout + shown.stderr, "validate-config")
    assert "redis://default:***@127.0.0.1" in shown.stdout
    # An invalid setting next to the secrets: the error names the setting and shows no secret.
    failed = run_cli("validate-config", env=planted_env(RAGPULSE_SAMPLE_RATE="2"))
    assert failed.returncode == 2 and "sample_rate" in failed.stderr
    assert_no_secret(failed.stdout + failed.stderr, "a configuration error")


@pytest.fixture(scope="module")
def judge_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def test_debug_logs_metrics_and_redis_errors_never_show_secrets(judge_server: FakeLLMServer) -> None:
    agent = AgentProcess(
        env=planted_env(
            RAGPULSE_JUDGE_MODEL="openai/ragpulse-test-judge", RAGPULSE_JUDGE_API_BASE=judge_server.api_base
        )
    )
    try:
        # Redis is unreachable the whole time: the agent waits for it (docs/operations.md), saying
        # so in its log and on /readyz, with the URL's password masked.
        deadline = time.monotonic() + 60
        status, body = 0, b""
        while time.monotonic() < deadline and b"waiting for Redis" not in body:
            time.sleep(0.2)
            try:
                status, body = http_get(f"http://127.0.0.1:{agent.metrics_port}/readyz", timeout=1)
            except OSError:
                continue
        assert status == 503 and b"waiting for Redis at redis://default:***@127.0.0.1:" in body, body
        assert_no_secret(body.decode(), "/readyz")
        # The judge self-check runs meanwhile (with the key), through the verdict cache (Redis errors).
        while time.monotonic() < deadline and judge_server.stats.calls < 1:
            time.sleep(0.2)
        assert judge_server.stats.calls >= 1
        status, metrics = http_get(agent.metrics_url)
        assert status == 200
        assert_no_secret(metrics.decode(), "/metrics")
    finally:
        agent.stop()
    log = agent.log()
    assert "DEBUG" in log and "redis" in log.lower()
    assert_no_secret(log, "the agent's DEBUG log")


def test_kafka_connection_errors_at_debug_never_show_the_sasl_password() -> None:
    agent = AgentProcess(
        env=planted_env(
            RAGPULSE_SOURCE="kafka",
            RAGPULSE_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",  # no broker there
            RAGPULSE_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
            RAGPULSE_KAFKA_SASL_MECHANISM="PLAIN",
        )
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "kafka" not in agent.log().lower():
            time.sleep(0.2)
        time.sleep(3)  # let the client log a few connection attempts
    finally:
        agent.kill()  # a consumer that never reached its broker may not stop promptly
    log = agent.log()
    assert "kafka" in log.lower()
    assert_no_secret(log, "the agent's DEBUG log with an unreachable Kafka broker")
