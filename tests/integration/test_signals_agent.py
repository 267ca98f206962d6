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
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.agent_process import AgentProcess
from tests.support.alerting import PROMETHEUS, Server, interaction, missing_binaries, prometheus_config
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
        shutil.copy(RULES, tmp_path / "rules.yml")
        config = prometheus_config([f"127.0.0.1:{agent.metrics_port}"], "127.0.0.1:9", tmp_path / "rules.yml")
        config["rule_files"] = ["rules.yml"]
        config.pop("alerting", None)
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prometheus = Server(
            shutil.which(PROMETHEUS) or PROMETHEUS,
            ["--config.file=prometheus.yml", "--storage.tsdb.path=data", "--enable-feature=exemplar-storage"],
            tmp_path,
            "/-/ready",
        )
        prometheus.wait_ready()
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


def query(prometheus: Server, promql: str) -> list[dict[str, object]]:
    params = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{params}", timeout=10) as reply:
        document = json.loads(reply.read())
    assert document["status"] == "success", document
    return document["data"]["result"]  # type: ignore[no-any-return]


def exemplar_trace_ids(prometheus: Server, promql: str) -> set[str]:
    now = time.time()
    params = urllib.parse.urlencode({"query": promql, "start": now - 600, "end": now + 1})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query_exemplars?{params}", timeout=10) as reply:
        document = json.loads(reply.read())
    assert document["status"] == "success", document
    return {e["labels"]["trace_id"] for series in document["data"] for e in series["exemplars"]}


def wait_for(condition, seconds: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
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
    assert query(prometheus, "sum(ragpulse_interactions_sampled_total) or vector(0)")[0]["value"][1] == "0"  # type: ignore[index]
    assert not query(prometheus, "ragpulse_score_count")
    # The bucket of the regressed scores (healthy ones are five sd above it) leads to their traces.
    bucket = 'ragpulse_retrieval_top_score_bucket{service="shop", le="0.7"}'
    assert wait_for(lambda: bool(exemplar_trace_ids(prometheus, bucket)))
    assert exemplar_trace_ids(prometheus, bucket) <= set(regressed)
