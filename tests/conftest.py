"""Fixtures every test gets."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# The fixtures of tests/support, registered once; test modules use them by name.
pytest_plugins = ["tests.support.kafka_broker", "tests.support.redis_server", "tests.support.tls"]

# As the session started, before any agent ran in this process.
_RESOURCE_ATTRIBUTES = os.environ.get("OTEL_RESOURCE_ATTRIBUTES")


def _reset_resource_attributes(patch: pytest.MonkeyPatch) -> None:
    if _RESOURCE_ATTRIBUTES is None:
        patch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    else:
        patch.setenv("OTEL_RESOURCE_ATTRIBUTES", _RESOURCE_ATTRIBUTES)


@pytest.fixture(autouse=True, scope="module")
def own_telemetry_mark_stays_with_its_module() -> Iterator[None]:
    """As below, for a module's own module-scoped fixtures: they are set up before any test's
    function-scoped fixture, so a mark left by an in-process agent of an earlier module on the same
    worker would tag the spans they make (skipped as `self` by a subprocess agent)."""
    with pytest.MonkeyPatch.context() as patch:
        _reset_resource_attributes(patch)
        yield


@pytest.fixture(autouse=True)
def own_telemetry_mark_stays_with_its_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent started in-process (even by a module-scoped fixture) tags the process's
    OpenTelemetry resources as ragpulse's own through `OTEL_RESOURCE_ATTRIBUTES`
    (agent.otlp.mark_own_telemetry); every test starts from the session's value, so spans made by
    later tests are not skipped as the agent's."""
    _reset_resource_attributes(monkeypatch)
