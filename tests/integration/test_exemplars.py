"""Exemplars: a low score leads to its trace.

The agent's `ragpulse_score` buckets carry the trace id of the interaction observed as an
OpenMetrics exemplar; a real Prometheus (Debian `prometheus`, exemplar storage on) scrapes the
agent in the OpenMetrics format and answers /api/v1/query_exemplars with the trace ids of the
low-scored interactions in the low bucket and of the good ones in the top bucket.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

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
    scraping_prometheus,
)
from tests.support.spans import openinference_single_span

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(missing_binaries(PROMETHEUS) is not None, reason=str(missing_binaries(PROMETHEUS))),
]

LOW_BUCKET = 'ragpulse_score_bucket{metric="faithfulness", le="0.1"}'
TOP_BUCKET = 'ragpulse_score_bucket{metric="faithfulness", le="1.0"}'


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[AgentProcess, Server]]:
    agent = AgentProcess()
    prometheus: Server | None = None
    try:
        agent.wait_ready()
        prometheus = scraping_prometheus(tmp_path, [f"127.0.0.1:{agent.metrics_port}"])
        yield agent, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        agent.kill()


def export_one(agent: AgentProcess, i: int, *, good: bool) -> str:
    """One interaction recorded with the real SDK; its trace id."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    query, chunks, response = interaction(i, good=good)
    openinference_single_span(provider.get_tracer("t"), query=query, chunks=chunks, response=response)
    spans = memory.get_finished_spans()
    exporter = OTLPSpanExporter(endpoint=agent.traces_url)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    return format(spans[0].get_span_context().trace_id, "032x")


def test_low_scored_interactions_are_found_from_their_bucket(stack: tuple[AgentProcess, Server]) -> None:
    agent, prometheus = stack
    bad, good = [], []
    for i in range(3):
        # One at a time, each scraped before the next: a bucket shows its latest exemplar.
        bad.append(export_one(agent, i, good=False))
        good.append(export_one(agent, 100 + i, good=True))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and bad[-1] not in exemplar_trace_ids(prometheus, LOW_BUCKET):
            time.sleep(0.3)
    assert exemplar_trace_ids(prometheus, LOW_BUCKET) == set(bad)
    # The top bucket is cumulative (le="1.0" counts every score): its exemplars are the good
    # interactions, the last observed in the bucket when it was scraped.
    assert exemplar_trace_ids(prometheus, TOP_BUCKET) <= set(good) | set(bad)
    assert exemplar_trace_ids(prometheus, TOP_BUCKET) & set(good)


def test_metrics_answers_openmetrics_with_exemplars_only_when_asked(
    stack: tuple[AgentProcess, Server],
) -> None:
    agent, _ = stack
    trace_id = export_one(agent, 7, good=False)
    deadline = time.monotonic() + 30
    classic = b""
    while time.monotonic() < deadline and b"ragpulse_score_bucket" not in classic:
        with urllib.request.urlopen(agent.metrics_url, timeout=5) as reply:
            classic = reply.read()
            classic_type = reply.headers["Content-Type"]
        time.sleep(0.2)
    request = urllib.request.Request(
        agent.metrics_url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        open_metrics = reply.read()
        open_type = reply.headers["Content-Type"]
    assert classic_type.startswith("text/plain") and trace_id.encode() not in classic
    assert open_type.startswith("application/openmetrics-text")
    assert f'trace_id="{trace_id}"'.encode() in open_metrics
    assert open_metrics.rstrip().endswith(b"# EOF")
