"""Fixtures every test gets."""

from __future__ import annotations

import os

import pytest

# The fixtures of tests/support, registered once; test modules use them by name.
pytest_plugins = ["tests.support.kafka_broker", "tests.support.redis_server", "tests.support.tls"]

# As the session started, before any agent ran in this process.
_RESOURCE_ATTRIBUTES = os.environ.get("OTEL_RESOURCE_ATTRIBUTES")


@pytest.fixture(autouse=True)
def own_telemetry_mark_stays_with_its_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent started in-process (even by a module-scoped fixture) tags the process's
    OpenTelemetry resources as ragpulse's own through `OTEL_RESOURCE_ATTRIBUTES`
    (agent.otlp.mark_own_telemetry); every test starts from the session's value, so spans made by
    later tests are not skipped as the agent's."""
    if _RESOURCE_ATTRIBUTES is None:
        monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    else:
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", _RESOURCE_ATTRIBUTES)
