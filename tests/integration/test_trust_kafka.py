"""Interactions drawn for labelling are marked on the results topic, as the label queue draws them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agent.cli import main
from agent.trust.label_sampling import label_fraction
from tests.support.kafka_agent import kafka_agent
from tests.support.kafka_broker import Broker, consume_all, produce_otlp
from tests.support.spans import record_spans

pytestmark = pytest.mark.integration


def test_results_topic_marks_the_interactions_drawn_for_labels(broker: Broker, tmp_path: Path) -> None:
    topic = broker.create_topic(partitions=2)
    results_topic = broker.create_topic(partitions=1)
    agent = kafka_agent(
        broker, topic, f"ragpulse-test-{uuid.uuid4().hex[:8]}",
        RAGPULSE_RESULTS_TOPIC=results_topic, RAGPULSE_LABEL_SAMPLE_RATE="0.5",
    )  # fmt: skip
    try:
        agent.wait_ready()
        spans = record_spans(16)
        produce_otlp(broker.bootstrap, topic, spans)
        messages = consume_all(broker.bootstrap, results_topic, expected=16)
        marked, unmarked = marks(messages)
        # The estimate's exporter runs after the durable one: wait for it to count them all.
        scraped = agent.wait_for(lambda s: s.total("ragpulse_label_requests_total") >= len(marked))
        queue = tmp_path / "queue.jsonl"
        code = main([
            "label-queue", "--from-results-topic", "--out", str(queue),
            "--set", f"kafka_bootstrap={broker.bootstrap}", "--set", f"results_topic={results_topic}",
        ])  # fmt: skip
    finally:
        agent.stop()
        agent.kill()
    assert len(messages) == 16
    # The same hash decides everywhere: the queue, every replica, every exporter.
    assert marked == {i for i in marked | unmarked if label_fraction(i) < 0.5}
    assert 0 < len(marked) < 16
    assert scraped.total("ragpulse_label_requests_total") == len(marked)
    # label-queue exports exactly the marked interactions, one line per interaction, ready to fill in.
    assert code == 0
    rows = [json.loads(line) for line in queue.read_text().splitlines()]
    assert sorted(row["interaction_id"] for row in rows) == sorted(marked)
    metrics = ["context_precision", "context_relevancy", "faithfulness"]  # the lexical judge's default
    assert all(
        row["labels"] == dict.fromkeys(metrics) and sorted(row["scores"]) == metrics
        and row["weight"] == 2.0 and row["service"] == "kafka-app"
        for row in rows
    )  # fmt: skip


def marks(messages: list[bytes]) -> tuple[set[str], set[str]]:
    """Interaction ids of the results marked for labelling, and of the others."""
    marked, unmarked = set(), set()
    for value in messages:
        (span,) = ExportTraceServiceRequest.FromString(value).resource_spans[0].scope_spans[0].spans
        attributes = {kv.key: kv.value for kv in span.attributes}
        interaction_id = attributes["ragpulse.interaction.id"].string_value
        if "ragpulse.label.requested" in attributes:
            assert attributes["ragpulse.label.requested"].bool_value is True
            assert attributes["ragpulse.label.weight"].double_value == 2.0
            assert attributes["ragpulse.label.reason"].string_value == "uniform"
            marked.add(interaction_id)
        else:
            unmarked.add(interaction_id)
    return marked, unmarked
