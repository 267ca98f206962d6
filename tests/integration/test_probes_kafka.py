"""Golden probes in the Kafka deployment (docs/probes.md): the app and `ragpulse probe` export
OTLP/HTTP to the Collector, which writes one OTLP protobuf message per trace to the topic; an agent
with RAGPULSE_SOURCE=kafka assembles the probe traces from the broker and scores them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.agent_process import AgentProcess
from tests.support.collector import KafkaCollector
from tests.support.kafka_agent import kafka_agent
from tests.support.kafka_broker import Broker
from tests.support.net import free_port
from tests.support.probe_app import GOLDEN, ProbeApp
from tests.support.probing import SET, K, items_scored, offline_scores, probe_sums, run_probe, write_golden

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(broker: Broker) -> str:
    return broker.create_topic(partitions=3)


@pytest.fixture
def agent(broker: Broker, topic: str) -> Iterator[AgentProcess]:
    process = kafka_agent(
        broker, topic, f"ragpulse-probes-{uuid.uuid4().hex[:8]}", RAGPULSE_ASSEMBLY_WAIT_SECONDS="3"
    )
    try:
        process.wait_ready(timeout=60)
        yield process
    finally:
        process.stop()
        process.kill()


@pytest.fixture
def collector(broker: Broker, topic: str) -> Iterator[KafkaCollector]:
    with KafkaCollector(broker.bootstrap, topic) as running:
        yield running


def test_probe_traces_through_kafka_are_scored_as_eval_scores_them(
    agent: AgentProcess, collector: KafkaCollector, tmp_path_factory: pytest.TempPathFactory
) -> None:
    golden = write_golden(tmp_path_factory.mktemp("golden"))
    app = ProbeApp(collector.traces_url, free_port()).start()
    try:
        done = run_probe(collector.endpoint, app.url, golden)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{len(GOLDEN)} request(s), 0 failed" in done.stdout
        scrape = agent.wait_for(lambda s: items_scored(s) >= len(GOLDEN), timeout=30)
    finally:
        app.stop()
    assert items_scored(scrape) == len(GOLDEN), agent.log()
    # Everything came through the broker: each probe trace is the prober's span and the app's.
    assert collector.messages >= 2 * len(GOLDEN)
    assert scrape.value("ragpulse_spans_received_total", source="kafka") == collector.spans
    assert scrape.total("ragpulse_probe_interactions_total", probe_set=SET) == len(GOLDEN)
    assert scrape.total("ragpulse_probe_items_total", probe_set=SET, outcome="pass") == len(GOLDEN)
    assert scrape.total("ragpulse_probe_failures_total") == 0
    sums = probe_sums(scrape)
    expected = offline_scores(regressed=False)
    reference_based = ("context_recall", "answer_correctness", f"precision_at_{K}", f"recall_at_{K}",
                       "mrr", f"ndcg_at_{K}", "id_context_recall")  # fmt: skip
    for metric in (*reference_based, "context_precision", "faithfulness"):
        count, total = sums[metric]
        assert count == len(expected[metric]) == len(GOLDEN), metric
        assert total == pytest.approx(sum(expected[metric]), abs=1e-9), metric
    # Kept out of the production series, as over OTLP.
    assert scrape.total("ragpulse_score_count") == 0
    assert scrape.total("ragpulse_interactions_total") == 0
