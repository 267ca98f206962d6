"""Signals with the judge out of the picture: a real agent with sampling at 0 (nothing is judged),
fed real OpenTelemetry spans over OTLP/HTTP, scraped by a real Prometheus (Debian `prometheus`,
exemplar storage on) that evaluates the generated alert rules.

A changed embedding model lowers the retriever's top score: the signal drift alarm rises, the
RagpulseSignalDrift alert goes pending, and the score buckets of the regressed interactions lead to
their traces (exemplars). The same agent never judged anything.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agent_process import AgentProcess
from tests.support.alerting import (
    PROMETHEUS,
    Server,
    exemplar_trace_ids,
    interaction,
    missing_binaries,
    prometheus_api,
    scraping_prometheus,
)
from tests.support.redis_server import RedisServer
from tests.support.repo import ROOT
from tests.support.spans import openinference_single_span

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(missing_binaries(PROMETHEUS) is not None, reason=str(missing_binaries(PROMETHEUS))),
]

RULES = ROOT / "deploy" / "prometheus" / "rules" / "ragpulse.rules.yml"
# Baselines of 300 interactions (30 batch means of 10), a window of 100 (10 means).
ENV = {
    "RAGPULSE_SAMPLE_RATE": "0",
    "RAGPULSE_DRIFT_BASELINE_SIZE": "300",
    "RAGPULSE_DRIFT_WINDOW": "100",
    "RAGPULSE_SIGNALS_DRIFT_BATCH": "10",
}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[AgentProcess, Server]]:
    agent = AgentProcess(env=ENV)
    prometheus: Server | None = None
    try:
        agent.wait_ready()
        prometheus = scraping_prometheus(tmp_path, [f"127.0.0.1:{agent.metrics_port}"], RULES)
        yield agent, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        agent.kill()


def export(agent: AgentProcess, start: int, count: int, top_score: float, rng: random.Random) -> list[str]:
    """`count` single-span interactions whose first chunk the retriever scored ~`top_score`, in
    one OTLP/HTTP request; their trace ids."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(start, start + count):
        query, chunks, response = interaction(i, good=True)
        score = round(rng.gauss(top_score, 0.03), 4)
        openinference_single_span(
            tracer,
            query=query,
            chunks=chunks,
            response=response,
            attributes={"retrieval.documents.0.document.score": score},
        )
    spans = memory.get_finished_spans()
    exporter = OTLPSpanExporter(endpoint=agent.traces_url)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    return [format(s.get_span_context().trace_id, "032x") for s in spans]


def query(prometheus: Server, expr: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = prometheus_api(prometheus, "query", query=expr)["result"]
    return found


def wait_for(condition: Callable[[], object], seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def test_a_retrieval_score_shift_alarms_with_nothing_judged(stack: tuple[AgentProcess, Server]) -> None:
    agent, prometheus = stack
    rng = random.Random(11)
    for start in range(0, 600, 100):  # healthy: the baseline, then a quiet stretch
        export(agent, start, 100, 0.85, rng)
    detected = 'ragpulse_signal_drift_detected{signal="retrieval_top_score"}'
    assert wait_for(lambda: query(prometheus, 'ragpulse_interactions_total{service="shop"} >= 600'))
    assert wait_for(lambda: bool(query(prometheus, f"{detected} == 0")))
    assert not query(prometheus, f"{detected} == 1")
    assert not query(prometheus, 'ALERTS{alertname="RagpulseSignalDrift"}')

    # A changed embedding model: the first chunk's score drops by 0.15 (five of its sd).
    regressed: list[str] = []
    for start in range(600, 800, 50):
        regressed += export(agent, start, 50, 0.70, rng)
    assert wait_for(lambda: bool(query(prometheus, f"{detected} == 1")))
    assert wait_for(
        lambda: bool(
            query(prometheus, 'ALERTS{alertname="RagpulseSignalDrift", signal="retrieval_top_score"}')
        )
    )
    # Nothing was judged: the alarm came from the signals alone.
    assert query(prometheus, "sum(ragpulse_interactions_sampled_total) or vector(0)")[0]["value"][1] == "0"
    assert not query(prometheus, "ragpulse_score_count")
    # The bucket of the regressed scores (healthy ones are five sd above it) leads to their traces.
    bucket = 'ragpulse_retrieval_top_score_bucket{service="shop", le="0.7"}'
    assert wait_for(lambda: bool(exemplar_trace_ids(prometheus, bucket)))
    assert exemplar_trace_ids(prometheus, bucket) <= set(regressed)


def test_signal_baselines_survive_a_restart(redis: RedisServer) -> None:
    """Killed without a chance to save at shutdown, a replica's successor resumes the signals'
    baselines from Redis: a drop right after the restart is judged against them, where a fresh
    detector would first learn the drop itself as its baseline."""
    env = {**ENV, "RAGPULSE_REDIS_URL": redis.url, "RAGPULSE_DRIFT_SAVE_INTERVAL_SECONDS": "0.2"}
    rng = random.Random(12)
    labels = {"service": "shop", "signal": "retrieval_top_score"}
    first = AgentProcess(env=env)
    try:
        first.wait_ready()
        for start in range(0, 600, 100):
            export(first, start, 100, 0.85, rng)
        first.wait_for(lambda s: s.total("ragpulse_interactions_total", service="shop") == 600)
        key = 'ragpulse:v1:drift:["shop","rag.query","signal:retrieval_top_score:b10"]'
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (saved_state(redis, key) or {}).get("n") != 30:
            time.sleep(0.1)
        assert (saved_state(redis, key) or {}).get("n") == 30  # the baseline: 300 interactions
        first.stop(signal.SIGKILL)
    finally:
        first.kill()

    second = AgentProcess(env=env)
    try:
        second.wait_ready()
        for start in range(600, 800, 50):
            export(second, start, 50, 0.70, rng)
        result = second.wait_for(lambda s: s.value("ragpulse_signal_drift_detected", **labels) == 1.0)
        assert result.total("ragpulse_interactions_total", service="shop") <= 200
        assert second.stop() == 0
    finally:
        second.kill()


def saved_state(redis: RedisServer, key: str) -> dict[str, Any] | None:
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis.url)
    try:
        raw = client.get(key)
    finally:
        client.close()
    return None if raw is None else json.loads(raw)  # type: ignore[arg-type]
